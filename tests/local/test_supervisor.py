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
