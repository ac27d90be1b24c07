"""The waking page's words about how long a wake takes, from the wakes the gateway saw
(proxy/rules/wake_times.py): what it says with too few, with some, and which changes count as a wake."""

from __future__ import annotations

import pytest

from userland.proxy.rules.wake_times import KEEP, TYPICAL, WakeTimes, wake_words


def wake(times: WakeTimes, name: str, start: float, took: float, template: str = "vscode") -> None:
    times.seen("classroom", name, template, was_idle=True, idle=False, ready=False, now=start)
    times.seen("classroom", name, template, was_idle=False, idle=False, ready=False, now=start + took / 2)
    times.seen("classroom", name, template, was_idle=False, idle=False, ready=True, now=start + took)


def test_a_wake_is_timed_from_leaving_idle_to_ready() -> None:
    times = WakeTimes()
    wake(times, "vscode-alice", 100.0, 9.0)
    wake(times, "vscode-bob", 200.0, 11.0)
    assert times.recent("classroom", "vscode") == (9.0, 11.0)
    assert times.recent("classroom", "jupyterlab") == ()


@pytest.mark.parametrize("changes", [
    # A first start (never asleep) is no wake.
    [(False, False, False), (False, False, True)],
    # Fell asleep again before it was Ready.
    [(True, False, False), (False, True, False), (False, False, True)],
])
def test_what_is_not_a_wake_is_not_counted(changes: list[tuple[bool, bool, bool]]) -> None:
    times = WakeTimes()
    for step, (was_idle, idle, ready) in enumerate(changes):
        times.seen("classroom", "vscode-alice", "vscode", was_idle=was_idle, idle=idle, ready=ready,
                   now=float(step))
    assert times.recent("classroom", "vscode") == ()


def test_a_removed_userland_is_forgotten() -> None:
    times = WakeTimes()
    times.seen("classroom", "vscode-alice", "vscode", was_idle=True, idle=False, ready=False, now=0.0)
    times.forget("classroom", "vscode-alice")
    times.seen("classroom", "vscode-alice", "vscode", was_idle=False, idle=False, ready=True, now=5.0)
    assert times.recent("classroom", "vscode") == ()


def test_only_the_last_wakes_are_kept() -> None:
    times = WakeTimes()
    for i in range(KEEP + 5):
        wake(times, f"vscode-s{i}", float(i * 100), float(i))
    assert times.recent("classroom", "vscode") == tuple(float(i) for i in range(5, KEEP + 5))


@pytest.mark.parametrize(("took", "words"), [
    ((), TYPICAL),
    ((9.0, 10.0), TYPICAL),  # two wakes say little: the measured figure
    ((8.2, 10.4, 10.9, 9.6), "Waking VS Code up took 8 to 11 seconds the last 4 times (usually about 10 "
                             "seconds); longer when many start at once."),
    ((7.0, 7.2, 6.9), "Waking VS Code up took 7 seconds the last 3 times (usually about 7 seconds); "
                      "longer when many start at once."),
])
def test_the_words(took: tuple[float, ...], words: str) -> None:
    assert wake_words(took, "VS Code") == words
