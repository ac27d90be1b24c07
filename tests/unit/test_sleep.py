"""The sleep verdict, the wake rate and the progress steps (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from userland.operator.rules.progress import newest_pod, pod_progress, trim_pod
from userland.operator.rules.sleep import verdict
from userland.operator.rules.wake_rate import WakeRate
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # a Monday


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def template(*, idle: str | None = "1h", schedule: dict[str, Any] | None = None,
             wake_all: datetime | None = None) -> Template:
    spec: dict[str, Any] = {"routing": {"host": "ide.example.edu"}, "port": 8080,
                            "podSpec": {"containers": [{"name": "c", "image": "i"}]}}
    if idle:
        spec["idleTimeout"] = idle
    if schedule:
        spec["schedule"] = schedule
    meta: dict[str, Any] = {"name": "vscode", "namespace": "c"}
    if wake_all:
        meta["annotations"] = {naming.ANNOTATION_WAKE_ALL: stamp(wake_all)}
    return Template.from_object({"metadata": meta, "spec": spec})


def userland(*, created: datetime = T0, active: datetime | None = None) -> Userland:
    meta: dict[str, Any] = {"name": "vscode-alice", "namespace": "c", "creationTimestamp": stamp(created)}
    if active:
        meta["annotations"] = {naming.ANNOTATION_LAST_ACTIVITY: stamp(active)}
    return Userland.from_object({"metadata": meta, "spec": {"user": "alice", "template": "vscode"}})


def test_no_activity_data_counts_from_creation_never_from_the_beginning_of_time() -> None:
    fresh = verdict(userland(), template(), T0 + timedelta(minutes=59))
    assert (fresh.asleep, fresh.cause, fresh.recheck_at) == (False, "created", T0 + timedelta(hours=1))
    assert verdict(userland(), template(), T0 + timedelta(hours=1)).asleep


def test_activity_keeps_it_awake_for_the_idle_timeout_after_it() -> None:
    used = userland(active=T0 + timedelta(minutes=50))
    awake = verdict(used, template(), T0 + timedelta(hours=1, minutes=49))
    assert (awake.asleep, awake.cause) == (False, "visit")
    assert awake.recheck_at == T0 + timedelta(hours=1, minutes=50)
    asleep = verdict(used, template(), T0 + timedelta(hours=1, minutes=50))
    assert asleep.asleep and asleep.since == T0 + timedelta(minutes=50)


def test_without_idle_timeout_it_never_sleeps() -> None:
    result = verdict(userland(), template(idle=None), T0 + timedelta(days=30))
    assert (result.asleep, result.recheck_at) == (False, None)


def test_start_all_counts_as_use_for_everyone() -> None:
    woken = template(wake_all=T0 + timedelta(hours=5))
    result = verdict(userland(), woken, T0 + timedelta(hours=5, minutes=30))
    assert (result.asleep, result.cause) == (False, "start-all")
    assert verdict(userland(), woken, T0 + timedelta(hours=6)).asleep


LECTURES = {"timeZone": "Europe/Berlin", "wakeBefore": "10m",
            "lectures": [{"days": ["Mon", "Wed"], "start": "14:15", "end": "15:45"}]}


def test_a_lecture_keeps_everyone_awake_from_before_it_starts_until_it_ends() -> None:
    # Monday 23 November 2026, Berlin is UTC+1: the lecture is 13:15-14:45 UTC, woken 13:05.
    scheduled = template(schedule=LECTURES)
    before = verdict(userland(), scheduled, datetime(2026, 11, 23, 13, 4, tzinfo=UTC))
    assert before.asleep and before.recheck_at == datetime(2026, 11, 23, 13, 5, tzinfo=UTC)
    during = verdict(userland(), scheduled, datetime(2026, 11, 23, 14, 30, tzinfo=UTC))
    assert (during.asleep, during.cause, during.recheck_at) == (
        False, "lecture", datetime(2026, 11, 23, 14, 45, tzinfo=UTC))
    # After it: idleTimeout (1h) from the lecture's wake, so asleep at once at its end...
    after = verdict(userland(), scheduled, datetime(2026, 11, 23, 14, 46, tzinfo=UTC))
    assert after.asleep
    # ...unless a student used it during the lecture.
    used = userland(active=datetime(2026, 11, 23, 14, 40, tzinfo=UTC))
    assert not verdict(used, scheduled, datetime(2026, 11, 23, 15, 20, tzinfo=UTC)).asleep
    # The next wake is Wednesday's.
    assert after.recheck_at == datetime(2026, 11, 25, 13, 5, tzinfo=UTC)


def test_lecture_times_stay_local_across_a_daylight_saving_change() -> None:
    # Berlin: summer time (UTC+2) until 25 October 2026. Monday 19 October: 12:05 UTC wake.
    scheduled = template(schedule=LECTURES)
    summer = verdict(userland(created=datetime(2026, 10, 1, tzinfo=UTC)), scheduled,
                     datetime(2026, 10, 19, 12, 6, tzinfo=UTC))
    assert (summer.asleep, summer.cause) == (False, "lecture")
    winter = verdict(userland(created=datetime(2026, 10, 1, tzinfo=UTC)), scheduled,
                     datetime(2026, 10, 26, 12, 6, tzinfo=UTC))
    assert winter.asleep  # 13:06 Berlin: an hour before that Monday's wake


def test_the_wake_rate_is_fair_and_keeps_each_place() -> None:
    now = [100.0]
    turns: list[tuple[object, float]] = []
    rate = WakeRate(4.0, 2, clock=lambda: now[0], on_turn=lambda key, waited: turns.append((key, waited)))
    waits = [rate.wait(k) for k in "abcdef"]
    assert waits == [0.0, 0.0, 0.25, 0.5, 0.75, 1.0]
    # Asked again before its turn, a key keeps its place in the line.
    now[0] += 0.5  # two tokens back
    assert rate.wait("e") == pytest.approx(0.25) and rate.wait("c") == 0.0
    assert rate.waiting == 3 and list(rate.keys()) == ["d", "e", "f"]
    # How long each waited for its turn, from when it first asked (for /metrics).
    assert turns == [("a", 0.0), ("b", 0.0), ("c", 0.5)]
    # One that leaves the line before its turn takes no token: those behind move up.
    rate.done("d")
    assert rate.wait("e") == 0.0 and rate.wait("f") == pytest.approx(0.25)
    rate.done("f")
    # Tokens come back at 4 a second, up to the burst.
    now[0] += 10
    assert [rate.wait(k) for k in "xyz"] == [0.0, 0.0, 0.25]
    with pytest.raises(ValueError):
        WakeRate(0, 1)


def test_leaving_the_line_never_piles_up_a_debt() -> None:
    # 300 environments queue behind one that woke, fall asleep again before their turn, and
    # queue again, many times: one that asks later waits only for its own place.
    now = [0.0]
    rate = WakeRate(5.0, 1, clock=lambda: now[0])
    assert rate.wait("first") == 0.0
    for _ in range(10):
        assert rate.wait(0) == pytest.approx(0.2)
        for n in range(1, 300):
            rate.wait(n)
        for n in range(300):
            rate.done(n)
    now[0] += 0.2  # one token back
    assert rate.wait("late") == 0.0


def pod(*, scheduled: bool = True, image: str = "", state: str = "waiting", ready: bool = False,
        created: str = "2026-11-23T12:00:00Z", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "c", "creationTimestamp": created, "managedFields": [1]}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}]}, "status": {
        "conditions": [{"type": "PodScheduled", "status": str(scheduled)},
                       {"type": "Ready", "status": str(ready), "message": "x"}],
        "containerStatuses": [{"name": "c", "imageID": image, "state": {state: {"reason": "r"}}}]}}


def test_progress_steps_come_from_the_pods_own_status() -> None:
    assert pod_progress(None) == []
    assert pod_progress(pod(scheduled=False)) == []
    assert pod_progress(pod()) == ["Scheduled"]
    assert pod_progress(pod(image="sha256:1")) == ["Scheduled", "ImagePulled"]
    started = pod(image="sha256:1", state="running")
    assert pod_progress(started) == ["Scheduled", "ImagePulled", "ContainerStarted"]
    full = pod(image="sha256:1", state="running", ready=True)
    assert pod_progress(full) == ["Scheduled", "ImagePulled", "ContainerStarted", "Ready"]
    assert pod_progress(trim_pod(full)) == pod_progress(full)  # what the operator keeps suffices
    assert "managedFields" not in trim_pod(full)["metadata"]
    assert pod_progress(pod(image="x", state="running", ready=True, deleting=True)) == []
    old, new = pod(created="2026-11-23T12:00:00Z"), pod(created="2026-11-23T12:05:00Z", deleting=False)
    assert newest_pod([old, new, pod(created="2026-11-23T12:09:00Z", deleting=True)]) is new
