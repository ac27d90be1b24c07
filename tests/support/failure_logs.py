"""A failed test that ran `userland local` carries what its services logged.

The test's folder (and its `state/logs/`) is gone with the machine a CI run used, and a failure
such as "the page still says New after 3 minutes" names no cause by itself. So a failed report
gets, per service, its last warnings and errors and its last lines, from the log files under the
`state_dir` of any fixture value that has one (tests/support/real_apps.py `Local`,
tests/local's runs).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest
from _pytest.reports import TestReport

SERVICES = ("operator", "web", "gateway", "store", "local")
LAST_LINES = 15
LAST_PROBLEMS = 10
_PROBLEMS = ('"level": "warning"', '"level": "error"', '"level": "critical"', "Traceback")


def log_digest(path: Path, *, lines: int = LAST_LINES, problems: int = LAST_PROBLEMS) -> str:
    """The last warnings and errors of one log, then its last lines, each cut to 300 characters."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    tail = text[-lines:]
    bad = [line for line in text[:-lines] if any(mark in line for mark in _PROBLEMS)][-problems:]
    cut = [line[:300] for line in (*bad, *(["..."] if bad else []), *tail)]
    return "\n".join(cut)


def _log_dirs(item: pytest.Item) -> list[Path]:
    found = []
    for value in getattr(item, "funcargs", {}).values():
        state_dir = getattr(value, "state_dir", None)
        if isinstance(state_dir, Path) and (state_dir / "logs").is_dir():
            found.append(state_dir / "logs")
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, TestReport, TestReport]:
    report = yield
    if report.failed and report.when == "call":
        for logs in _log_dirs(item):
            for service in SERVICES:
                if digest := log_digest(logs / f"{service}.log"):
                    report.sections.append((f"make run's {service}.log ({logs})", digest))
    return report


__all__ = ["log_digest", "pytest_runtest_makereport"]
