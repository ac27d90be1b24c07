"""operator/lifecycle.py: which waits are timed and from when, on a clock moved by hand; read
back from the operator's registry as a scrape reads it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import generate_latest

from tests.support.clock import ManualClock
from tests.support.metrics import parse, value
from userland.operator.lifecycle import Lifecycle
from userland.operator.metrics import OperatorMetrics
from userland.operator.rules.sleep import Verdict
from userland.operator.rules.wake import WakeDecision

KEY = ("cs101", "vscode-ann")
T0 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


def status(phase: str, reason: str = "") -> dict[str, Any]:
    return {"phase": phase, "conditions": [{"type": "Ready", "status": "False", "reason": reason or phase}]}


def figures(metrics: OperatorMetrics, name: str, **labels: str) -> float:
    return value(parse(generate_latest(metrics.registry).decode()), name,
                 **{"course": "cs101", "template": "vscode", **labels})


def setup() -> tuple[Lifecycle, OperatorMetrics, ManualClock]:
    metrics, clock = OperatorMetrics(), ManualClock(T0)
    return Lifecycle(metrics, clock), metrics, clock


def test_creation_to_ready_counts_from_the_creation_time() -> None:
    life, metrics, clock = setup()
    created = T0 - timedelta(seconds=4)  # the operator saw it 4 s after it was created
    life.seen(KEY, "vscode", None, status("Starting"), created=created, decision=None, now=clock.now)
    assert life.longest_waits() == {"cs101": 4.0}
    clock.advance(6)
    life.seen(KEY, "vscode", status("Starting"), status("Ready"), created=created, decision=None,
              now=clock.now)
    assert figures(metrics, "userland_environment_start_seconds_count") == 1
    assert figures(metrics, "userland_environment_start_seconds_sum") == 10
    assert life.longest_waits() == {}


def test_a_wake_counts_from_the_request_and_a_direct_wake_is_timed_too() -> None:
    life, metrics, clock = setup()
    asked = T0 - timedelta(seconds=3)
    decision = WakeDecision(Verdict(False, asked, "visit"), woke=True, asked_at=asked)
    # Its turn came at once and the environment was Ready by the next look: Idle -> Ready.
    life.seen(KEY, "vscode", status("Idle"), status("Ready"), created=None, decision=decision, now=clock.now)
    assert figures(metrics, "userland_environment_wakes_total", cause="visit") == 1
    assert figures(metrics, "userland_environment_wake_seconds_sum") == 3
    assert figures(metrics, "userland_environment_wake_failures_total") == 0


def test_a_wake_that_fails_is_counted_and_not_timed() -> None:
    life, metrics, clock = setup()
    decision = WakeDecision(Verdict(False, T0, "staff-start"), waking=True, in_line=True, asked_at=T0)
    life.seen(KEY, "vscode", status("Idle"), status("Starting", "Waking"), created=None, decision=decision,
              now=clock.now)
    clock.advance(30)
    life.seen(KEY, "vscode", status("Starting"), status("Failed", "ImagePullBackOff"), created=None,
              decision=None, now=clock.now)
    assert figures(metrics, "userland_environment_wakes_total", cause="staff-start") == 1
    assert figures(metrics, "userland_environment_wake_failures_total") == 1
    assert figures(metrics, "userland_environment_wake_seconds_count") == 0
    assert figures(metrics, "userland_environment_failures_total", reason="image") == 1


def test_waits_that_are_not_timed_and_waits_that_end_untimed() -> None:
    life, metrics, clock = setup()
    # A new leader finds it Starting: counted as waiting from now, never timed.
    life.seen(KEY, "vscode", status("Starting"), status("Starting"), created=T0 - timedelta(hours=1),
              decision=None, now=clock.now)
    clock.advance(20)
    assert life.longest_waits() == {"cs101": 20.0}
    life.seen(KEY, "vscode", status("Starting"), status("Ready"), created=None, decision=None, now=clock.now)
    assert figures(metrics, "userland_environment_start_seconds_count") == 0
    # Suspended while starting: nobody waits any more.
    other = ("cs101", "vscode-bob")
    life.seen(other, "vscode", None, status("Starting"), created=T0, decision=None, now=clock.now)
    life.seen(other, "vscode", status("Starting"), status("Suspended"), created=T0, decision=None,
              now=clock.now)
    assert life.longest_waits() == {}
    # A sleep is counted when it happens, not each time an asleep environment is looked at.
    life.seen(KEY, "vscode", status("Ready"), status("Idle"), created=None, decision=None, now=clock.now)
    for _ in range(3):
        life.seen(KEY, "vscode", status("Idle"), status("Idle"), created=None, decision=None, now=clock.now)
    assert figures(metrics, "userland_environment_sleeps_total") == 1
