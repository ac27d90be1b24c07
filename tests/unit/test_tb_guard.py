"""tests/support/tb_guard.py: a failing test is reported, not an INTERNALERROR, when the AST bug
shows. The bug cannot be caused on demand, so an inner pytest run makes pytest's source lookup
raise the very SystemError the bug raises; the inner run is a real pytest in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

BROKEN_SOURCE_LOOKUP = '''
import _pytest._code.code as code

def broken(self, astcache=None):
    raise SystemError("AST constructor recursion depth mismatch (before=147, after=199)")

code.TracebackEntry.getsource = broken
'''


def inner_run(tmp_path: Path, *, guard: bool) -> subprocess.CompletedProcess[str]:
    conftest = BROKEN_SOURCE_LOOKUP
    if guard:
        conftest += "from tests.support.tb_guard import pytest_runtest_makereport  # noqa\n"
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_inner.py").write_text(
        "def test_passes():\n    assert True\n\n\n"
        "def test_fails():\n    value = 41\n    assert value == 42, 'the answer'\n\n\n"
        "def test_runs_after_the_failure():\n    assert True\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", str(tmp_path)],
        cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        timeout=120)


def test_a_failure_is_reported_natively_and_the_session_goes_on(tmp_path: Path) -> None:
    result = inner_run(tmp_path, guard=True)
    out = result.stdout + result.stderr
    assert "INTERNALERROR" not in out, out
    assert "1 failed, 2 passed" in out, out
    # The native traceback still names the failing line and the assertion's message.
    assert "assert value == 42, 'the answer'" in out and "AssertionError: the answer" in out, out


def test_without_the_guard_the_bug_ends_the_session(tmp_path: Path) -> None:
    """What the guard is for: the same inner run without it stops at an INTERNALERROR."""
    result = inner_run(tmp_path, guard=False)
    out = result.stdout + result.stderr
    assert "INTERNALERROR" in out and "AST constructor recursion depth mismatch" in out, out
