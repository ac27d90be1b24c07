"""The restart policy of `userland local`'s children, with real child processes.

Real: the processes (small Python programs started with the same `spawn` as Redis, the
operator, the web UI and the gateway). The clock is a plain counter the test moves, so the
backoff is checked without waiting for it.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from userland.local.children import Child, spawn
from userland.local.setup_terminal import gave_up_words, last_lines
from userland.local.supervisor import Supervisor, restart_delay


@pytest.mark.parametrize(("failures", "delay"), [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0),
                                                 (6, 30.0), (50, 30.0)])
def test_restart_delay_doubles_up_to_a_cap(failures: int, delay: float) -> None:
    assert restart_delay(failures) == delay


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_exited(child: Child) -> None:
    child.process.wait(timeout=10)


def test_a_dead_child_comes_back_with_backoff_and_a_stable_run_resets_it(tmp_path: Path) -> None:
    clock = Clock()
    supervisor = Supervisor(clock=clock)
    started: list[Child] = []

    def start() -> Child:
        child = spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"], tmp_path)
        started.append(child)
        return child

    supervisor.add("sleeper", start)
    try:
        assert supervisor.poll() == []
        for attempt, delay in enumerate([1.0, 2.0, 4.0], start=1):
            started[-1].signal(signal.SIGKILL)
            wait_exited(started[-1])
            (exited,) = supervisor.poll()
            assert (exited.what, exited.status, exited.retry_in) == ("exited", -signal.SIGKILL, delay)
            clock.now += delay - 0.5
            assert supervisor.poll() == []  # not yet
            assert [s.name for s in supervisor.down()] == ["sleeper"]
            clock.now += 0.5
            (restarted,) = supervisor.poll()
            assert (restarted.what, restarted.restarts) == ("restarted", attempt)
            assert started[-1].exited() is None and len(started) == attempt + 1
        # Up for a minute: the next exit starts the count afresh.
        clock.now += 60
        started[-1].signal(signal.SIGKILL)
        wait_exited(started[-1])
        (exited,) = supervisor.poll()
        assert exited.retry_in == 1.0
        assert (tmp_path / "sleeper.log").exists()
    finally:
        for child in started:
            child.stop(grace=1)


def test_a_child_that_exits_by_itself_is_restarted_too(tmp_path: Path) -> None:
    clock = Clock()
    supervisor = Supervisor(clock=clock)
    child = supervisor.add("quits", lambda: spawn("quits", [sys.executable, "-c", "raise SystemExit(3)"],
                                                  tmp_path))
    wait_exited(child)
    (report,) = supervisor.poll()
    assert (report.status, report.retry_in) == (3, 1.0)
    clock.now += 1
    deadline = time.monotonic() + 10
    assert supervisor.poll()[0].what == "restarted"
    while (again := supervisor.child("quits")) is not None and again.exited() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert supervisor.poll()[0].retry_in == 2.0


def test_a_child_that_keeps_stopping_is_reported_with_its_last_words(tmp_path: Path) -> None:
    # What `userland local` prints when it gives up: the log's last lines, so a run that ends on
    # a machine nobody can log in to (CI) still says why (the run that had only "see web.log").
    program = ("import sys\nfor n in range(40): print('starting', n, file=sys.stderr)\n"
               "print('userland web: cannot serve on 127.0.0.1:1: Address already in use', file=sys.stderr)\n"
               "raise SystemExit(2)")
    child = spawn("web", [sys.executable, "-c", program], tmp_path)
    assert child.process.wait(timeout=10) == 2
    last = "userland web: cannot serve on 127.0.0.1:1: Address already in use"
    words = gave_up_words("web", 2, child.log_path)
    assert words.startswith(f"the web keeps stopping (exit status 2); see {child.log_path}; it said last:")
    said = [line.removeprefix("    | ") for line in words.splitlines()[1:]]
    assert said == [*(f"starting {n}" for n in range(35, 40)), last]
    # Read from the end only: a line cut by the window is left out, not shown in half.
    assert last_lines(child.log_path, 3, limit=len(last) + 1) == [last]
    assert last_lines(child.log_path, 3, limit=len(last)) == []
    # A log that is not there leaves the line as it was.
    assert gave_up_words("web", 2, tmp_path / "none.log") == \
        f"the web keeps stopping (exit status 2); see {tmp_path / 'none.log'}"
