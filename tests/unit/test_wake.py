"""The wake decision (pure): what the children and the status follow, the wake line, and when
to look again; and the Events a status change tells (sleeping, waking and why)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from userland.operator.rules import sleep, wake
from userland.operator.rules.sleep import Verdict
from userland.operator.rules.status_events import EventNote, template_events, userland_events
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland
from userland.platform.model.objects import rfc3339 as stamp

MARGIN = wake.RECHECK_MARGIN
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def template() -> Template:
    return Template.from_object({"metadata": {"name": "vscode", "namespace": "c"}, "spec": {
        "routing": {"host": "ide.example.edu"}, "port": 8080, "idleTimeout": "1h",
        "podSpec": {"containers": [{"name": "c", "image": "i"}]}}})


def userland(*, suspended: bool = False, started_by: str = "", started_at: datetime | None = None,
             active: datetime | None = None) -> Userland:
    annotations: dict[str, str] = {}
    if started_at is not None:
        annotations[naming.ANNOTATION_STARTED_AT] = stamp(started_at)
        if started_by:
            annotations[naming.ANNOTATION_STARTED_BY] = started_by
    if active is not None:
        annotations[naming.ANNOTATION_LAST_ACTIVITY] = stamp(active)
    return Userland.from_object({
        "metadata": {"name": "vscode-alice", "namespace": "c", "creationTimestamp": stamp(T0),
                     "annotations": annotations},
        "spec": {"user": "alice", "template": "vscode", "suspended": suspended}})


def test_no_turn_asked_follows_the_verdict_and_looks_again_at_its_recheck() -> None:
    verdict = sleep.verdict(userland(), template(), T0)
    decision = wake.decide(userland(), template(), verdict, now=T0, turn_in=None)
    assert decision == wake.WakeDecision(verdict, look_again_at=T0 + timedelta(hours=1) + MARGIN)
    asleep = sleep.verdict(userland(), template(), T0 + timedelta(hours=2))
    assert wake.decide(userland(), template(), asleep, now=T0, turn_in=None).look_again_at is None


def test_waiting_in_line_stays_scaled_down_and_looks_again_at_its_turn() -> None:
    asleep = sleep.verdict(userland(), template(), T0 + timedelta(hours=2))
    decision = wake.decide(userland(), template(), asleep, now=T0 + timedelta(hours=2), turn_in=3.0)
    assert decision.waking and decision.in_line and not decision.woke
    assert not decision.verdict.asleep  # the status says Waking, not Idle
    assert decision.look_again_at == T0 + timedelta(hours=2, seconds=3)


def test_its_turn_wakes_it_with_a_whole_idle_timeout_from_now_and_keeps_the_cause() -> None:
    now = T0 + timedelta(hours=5)
    asked = userland(started_at=now - timedelta(seconds=1), started_by="teacher")
    first = sleep.verdict(asked, template(), now)
    assert (first.cause, first.by) == ("staff-start", "teacher")
    decision = wake.decide(asked, template(), first, now=now, turn_in=0.0)
    assert decision.woke and not decision.waking and not decision.in_line
    assert not decision.verdict.asleep
    assert (decision.verdict.cause, decision.verdict.by) == ("staff-start", "teacher")
    assert decision.look_again_at == now - timedelta(seconds=1) + timedelta(hours=1) + MARGIN


def test_who_asks_for_a_turn() -> None:
    awake, asleep = Verdict(False), Verdict(True)
    assert wake.wants_turn(userland(), awake, scaled_down=True, in_line=False)
    assert not wake.wants_turn(userland(), awake, scaled_down=False, in_line=False)  # already up
    assert not wake.wants_turn(userland(suspended=True), awake, scaled_down=True, in_line=True)
    assert not wake.wants_turn(userland(), asleep, scaled_down=True, in_line=False)
    # A wake once asked is carried out, even if its idleTimeout passes while it waits.
    assert wake.wants_turn(userland(), asleep, scaled_down=True, in_line=True)


def test_a_staff_start_is_its_own_use_source_naming_who() -> None:
    now = T0 + timedelta(hours=3)
    started = userland(started_at=now - timedelta(minutes=1), started_by="teacher",
                       active=now - timedelta(minutes=30))
    verdict = sleep.verdict(started, template(), now)
    assert (verdict.asleep, verdict.cause, verdict.by) == (False, "staff-start", "teacher")
    assert sleep.cause_words(verdict) == "teacher started it"
    # The student's own later visit is the cause then, and nobody is named.
    visited = userland(started_at=now - timedelta(minutes=30), started_by="teacher", active=now)
    assert (sleep.verdict(visited, template(), now).cause, sleep.verdict(visited, template(), now).by) == (
        "visit", "")
    anonymous = sleep.verdict(userland(started_at=now), template(), now)
    assert sleep.cause_words(anonymous) == "a staff member started it"


def _status(phase: str, reason: str, message: str = "", ready: str = "False") -> dict[str, Any]:
    return {"phase": phase, "conditions": [{"type": "Ready", "status": ready, "reason": reason,
                                            "message": message or reason}]}


def test_sleeping_and_waking_say_so_and_why() -> None:
    idle = _status("Idle", "Idle", "VS Code is asleep since 14:02 UTC after 1 h without use")
    running = _status("Ready", "Available", ready="True")
    slept = userland_events(running, idle, app="VS Code", verdict=Verdict(True))
    assert slept == [EventNote("Normal", "Sleeping", idle["conditions"][0]["message"])]
    for verdict, words in [(Verdict(False, cause="visit"), "its student opened it"),
                           (Verdict(False, cause="staff-start", by="teacher"), "teacher started it"),
                           (Verdict(False, cause="start-all"), "the whole class was started"),
                           (Verdict(False, cause="lecture"), "a lecture is about to start")]:
        assert userland_events(idle, _status("Starting", "Waking"), app="VS Code", verdict=verdict) == [
            EventNote("Normal", "Waking", f"VS Code is waking up: {words}")]


def test_other_changes_tell_the_new_reason_once() -> None:
    starting, ready = _status("Starting", "Starting"), _status("Ready", "Available", ready="True")
    assert userland_events({}, starting, app="A", verdict=None) == []  # "Created" said it
    assert userland_events(starting, ready, app="A", verdict=None) == [
        EventNote("Normal", "Available", "Available")]
    assert userland_events(ready, ready, app="A", verdict=None) == []
    failed = _status("Failed", "ImagePullBackOff", "A cannot start: its image cannot be downloaded")
    assert userland_events(starting, failed, app="A", verdict=None) == [
        EventNote("Warning", "ImagePullBackOff", "A cannot start: its image cannot be downloaded")]
    suspended = userland_events(ready, _status("Suspended", "Suspended"), app="A", verdict=None)
    assert suspended[0].type == "Normal"
    valid = _status("", "Valid", ready="True")
    assert template_events({}, valid) == [EventNote("Normal", "Valid", "Valid")]
    assert template_events(valid, _status("", "InvalidPodSpec"))[0].type == "Warning"


def test_the_clock_is_what_the_decision_is_made_at() -> None:
    later = datetime(2030, 1, 1, tzinfo=UTC)
    verdict = sleep.verdict(userland(), template(), later)
    assert wake.decide(userland(), template(), verdict, now=later, turn_in=None).verdict.asleep
