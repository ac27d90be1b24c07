"""A failed test that ran `userland local` shows its services' logs (tests/support/failure_logs.py):
the last warnings, then the last lines; a passing test shows nothing.

Real: pytest itself, run on a small test file with the plugin, and log files as services write
them (one JSON object per line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.failure_logs import LAST_LINES, log_digest

REPO = Path(__file__).resolve().parents[2]


def _line(level: str, msg: str) -> str:
    return json.dumps({"time": "2026-11-28T14:56:58.809Z", "level": level, "msg": msg})


def _write_log(path: Path) -> None:
    lines = [_line("info", f"early {n}") for n in range(40)]
    lines[5] = _line("warning", "[classroom/broken] watch failed, retrying")
    lines += [_line("info", f"late {n}") for n in range(LAST_LINES)]
    path.write_text("\n".join(lines) + "\n")


def test_the_digest_is_the_last_problems_then_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    _write_log(log)
    digest = log_digest(log).splitlines()
    assert "watch failed" in digest[0] and digest[1] == "..."
    assert [json.loads(line)["msg"] for line in digest[2:]] == [f"late {n}" for n in range(LAST_LINES)]
    assert log_digest(tmp_path / "none.log") == ""


def test_a_failed_test_carries_the_logs_and_a_passing_one_does_not(tmp_path: Path) -> None:
    logs = tmp_path / "state" / "logs"
    logs.mkdir(parents=True)
    _write_log(logs / "operator.log")
    (tmp_path / "test_it.py").write_text(
        "import pytest\nfrom pathlib import Path\n\n"
        f"class Local:\n    state_dir = Path({str(tmp_path / 'state')!r})\n\n"
        "@pytest.fixture\ndef local():\n    return Local()\n\n"
        "def test_fails(local):\n    assert False, 'the page still said New'\n\n"
        "def test_passes(local):\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.failure_logs", "-p", "no:cacheprovider",
         "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_it.py")],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    assert result.stdout.count(f"make run's operator.log ({logs})") == 1, result.stdout
    assert "watch failed, retrying" in result.stdout and f"late {LAST_LINES - 1}" in result.stdout
    assert "early 39" not in result.stdout  # neither a problem nor among the last lines
