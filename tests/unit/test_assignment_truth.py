"""Assignments that tell the truth (issue 24), the pure rules, against golden data
(golden/assignment_truth.json): a copy waits for the student's hand-out; a copy's time is told as
the platform's lateness, never the student's; a failed source fails every student who has
nothing (and the figures count them so the alert can fire), while one who received an earlier
commit keeps "Handed out"; a due date in the past is asked in the form; the words teachers,
students and the audit log read; `make run`'s git server keeps its address."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from userland.local.assignment_example import base_url, kept_port, moved_source
from userland.operator.rules.assignment.census import entry_of
from userland.operator.rules.assignment.plan import Env, RunAs, Source, plan_work
from userland.operator.rules.assignment.status import assignment_status, copy_timing
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import round_id
from userland.platform.model.grants import Grant
from userland.platform.model.models import parse_time
from userland.web.help_records import ended_words
from userland.web.rules import assignments as views

GOLDEN = json.loads((Path(__file__).parent / "golden" / "assignment_truth.json").read_text())
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
SOURCE = Source("c0ffee-1234abcd", "c0ffee" + "0" * 34)
PAST = datetime(2020, 1, 1, 9, 0, tzinfo=UTC)
PROBLEM = ("UnknownRef", "the repository has no branch or tag 'no-such-branch': check spec.source.ref")


def assignment(**spec: Any) -> Assignment:
    return Assignment.from_object({
        "metadata": {"name": "week1", "namespace": "course", "uid": "u-1", "generation": 1,
                     "creationTimestamp": "2026-12-07T11:59:00Z"},
        "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1",
                 "source": {"url": "https://git.example.edu/c.git", "ref": "no-such-branch"}, **spec}})


def env(login: str) -> Env:
    return Env(login, "lab", f"lab-{login}-data", run_as=RunAs(1000, 1000, 1000))


def record(case: dict[str, Any] | None) -> dict[str, Any] | None:
    if case is None:
        return None
    commit = SOURCE.commit if case["commit"] == "source" else "older" * 8
    return {"commit": commit, "state": case["state"], "at": "2026-12-07T11:59:30Z",
            "reason": "the student's storage is full"}


@pytest.mark.parametrize("case", GOLDEN["collect_waits_for_the_hand_out"], ids=lambda c: c["case"])
def test_a_copy_waits_for_the_students_hand_out(case: dict[str, Any]) -> None:
    the_assignment = assignment(due=PAST.isoformat())
    found = record(case["record"])
    state = {"handout": {"lab/alice": found}} if found else {}
    plan = plan_work(the_assignment, [env("alice")], SOURCE if case["source"] else None, state, [], now=NOW,
                     lead=60.0, source_failed=case["source_failed"])
    collect = [(p.key, [e.key for e in p.envs]) for p in plan.pending if p.kind == "collect"]
    assert collect == ([(round_id(PAST), ["lab/alice"])] if case["collect"] else [])


@pytest.mark.parametrize("case", GOLDEN["copy_timing"], ids=lambda c: c["case"])
def test_a_copys_time_is_the_platforms_lateness(case: dict[str, Any]) -> None:
    moment, taken, created = (parse_time(case[k]) for k in ("moment", "taken", "created"))
    assert moment is not None
    assert copy_timing(moment, taken, created) == case["timing"]


@pytest.mark.parametrize("case", GOLDEN["timing_words"], ids=lambda c: f"{c['late_seconds']}-{c['past_due']}")
def test_lateness_is_told_without_blaming_the_student(case: dict[str, Any]) -> None:
    for who in ("teacher", "student"):
        words = views.timing_words(case["late_seconds"], case["past_due"], student=who == "student")
        assert words == case[who]
        assert "your fault" not in words and "you were late" not in words.lower()


@pytest.mark.parametrize("case", GOLDEN["student_state_when_the_source_fails"], ids=lambda c: c["case"])
def test_each_students_state_follows_the_sources_failure(case: dict[str, Any]) -> None:
    the_assignment = assignment()
    found = record(case["record"])
    state = {"handout": {"lab/alice": found}} if found else {}
    plan = plan_work(the_assignment, [env("alice")], None, state, [], now=NOW, lead=60.0, source_failed=True)
    status = assignment_status(the_assignment, [env("alice")], [], None, None, PROBLEM, state, plan, [], [],
                               now=NOW)
    (alice,) = status["students"]
    assert alice["state"] == case["state"] and alice.get("reason") == case["reason"]
    assert status["phase"] == "Failed"


def test_a_failed_repository_counts_every_student_without_files_as_failed() -> None:
    """What UserlandAssignmentHandOutFailing counts: 3 failed, none pending (it was 9 Pending)."""
    the_assignment = assignment()
    envs = [env("alice"), env("bob"), env("carol")]
    plan = plan_work(the_assignment, envs, None, {}, [], now=NOW, lead=60.0, source_failed=True)
    status = assignment_status(the_assignment, envs, [], None, None, PROBLEM, {}, plan, [], [], now=NOW)
    entry = entry_of({"metadata": {"namespace": "course"}, "status": status})
    assert entry.phase == "Failed" and dict(entry.states) == {"Failed": 3}
    # An older operator's status (Pending under a Failed assignment) is counted the same way.
    old = {**status, "students": [{**s, "state": "Pending"} for s in status["students"]]}
    assert dict(entry_of({"metadata": {"namespace": "course"}, "status": old}).states) == {"Failed": 3}
    # While the source is only being fetched, or the store does not answer (the platform's, not
    # the repository's), they are pending, not failed.
    fetching = assignment_status(the_assignment, envs, [], None, None, None, {}, plan, [], [], now=NOW)
    assert dict(entry_of({"metadata": {"namespace": "course"}, "status": fetching}).states) == {"Pending": 3}
    store_down = ("StoreUnavailable", "the assignment store does not answer (ClientConnectorError)")
    waiting = assignment_status(the_assignment, envs, [], None, None, store_down, {}, plan, [], [], now=NOW)
    assert waiting["phase"] == "Failed" and {s["state"] for s in waiting["students"]} == {"Pending"}
    assert dict(entry_of({"metadata": {"namespace": "course"}, "status": waiting}).states) == {"Pending": 3}


def test_an_empty_copy_is_never_told_as_success_alone() -> None:
    the_assignment = assignment(due=PAST.isoformat())
    source = Source(SOURCE.key, SOURCE.commit)
    envs = [env("alice"), env("bob")]
    handout = {"lab/alice": record({"commit": "source", "state": "HandedOut"}),
               "lab/bob": record({"commit": "source", "state": "HandedOut"})}
    taken = "2026-12-07T12:00:00Z"
    copies = {round_id(PAST): {"lab/alice": {"takenAt": taken, "sha256": "a" * 64, "files": 3, "bytes": 30},
                               "lab/bob": {"takenAt": taken, "sha256": "b" * 64, "files": 0, "bytes": 0}}}
    state = {"handout": handout, "copies": copies}
    plan = plan_work(the_assignment, envs, source, state, [], now=NOW, lead=60.0)
    status = assignment_status(the_assignment, envs, [], source, None, None, state, plan, [], [], now=NOW)
    ready = status["conditions"][0]
    assert status["phase"] == "Collected" and status["emptyCopies"] == 1
    assert ready["reason"] == "CollectedSomeEmpty"
    assert ready["message"] == ("every copy is taken (2); 1 of the copies taken is empty (no files were in "
                                "the folder at that moment)")
    # The due date had passed when the assignment was made: neither copy is "late".
    assert [s["collected"]["late"] for s in status["students"]] == [False, False]
    assert [s["collected"].get("pastDue") for s in status["students"]] == [True, True]
    words, badge = views.phase_words(status)
    assert (words, badge) == ("Collected, 1 empty", "phase-starting")


def test_the_student_reads_not_available_yet_and_the_teacher_the_forms_words() -> None:
    obj = {"spec": {"title": "Week 1", "path": "week1"},
           "status": {"phase": "Failed",
                      "students": [{"user": "alice", "template": "lab", "state": "Pending"}],
                      "conditions": [{"type": "Ready", "status": "False", "reason": "UnknownRef",
                                      "message": PROBLEM[1]}]}}
    (mine,) = views.my_assignments([obj], "alice", {})
    assert mine.state_words == "Not available yet: your teacher has been told"
    assert mine.badge == "phase-starting"  # amber: nothing for the student to fix
    (row,) = views.student_views(obj, {})
    assert row.state == "Failed" and "spec." not in row.reason
    assert row.reason == ("the repository cannot be read: the repository has no branch or tag "
                          "'no-such-branch': check the branch or tag (in the assignment's settings)")
    (listed,) = views.list_rows([obj])
    assert "spec." not in listed.message


def form(**fields: Any) -> views.Form:
    return views.Form(**{"title": "Week 1", "templates": ["lab"], "url": "https://git.example.edu/c.git",
                         "ref": "main", "path": "week1", "due": "2036-12-07T23:59", "zone": "UTC", **fields})


def test_a_due_date_in_the_past_is_asked_in_the_form() -> None:
    with pytest.raises(views.PastDue, match=r"The due date 2020-01-01 09:00 is in the past"):
        views.spec_from_form(form(due="2020-01-01T09:00"), ["lab"], now=NOW)
    ticked = views.spec_from_form(form(due="2020-01-01T09:00", collect_past=True), ["lab"], now=NOW)
    assert ticked["due"] == "2020-01-01T09:00:00Z"
    # An edit keeping the due date it had is not asked again; moving it to another past time is.
    kept = views.spec_from_form(form(due="2020-01-01T09:00"), ["lab"], now=NOW,
                                current_due="2020-01-01T09:00:00Z")
    assert kept["due"] == "2020-01-01T09:00:00Z"
    with pytest.raises(views.PastDue):
        views.spec_from_form(form(due="2021-01-01T09:00"), ["lab"], now=NOW,
                             current_due="2020-01-01T09:00:00Z")
    # A minute ahead is fine; the present minute is not (its copy would be taken at once).
    soon = (NOW + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    assert views.spec_from_form(form(due=soon), ["lab"], now=NOW)["due"]
    with pytest.raises(views.PastDue):
        views.spec_from_form(form(due=NOW.strftime("%Y-%m-%dT%H:%M")), ["lab"], now=NOW)


def test_the_form_says_which_addresses_it_takes() -> None:
    with pytest.raises(views.FormProblem, match=r"must be an https:// \(or http://\) address"):
        views.spec_from_form(form(url="git@github.com:c/w.git"), ["lab"], now=NOW)
    assert views.spec_from_form(form(url="http://127.0.0.1:9/starter.git"), ["lab"], now=NOW)


@pytest.mark.parametrize(("seconds", "words"), [
    (30, "1 minute"), (90, "2 minutes"), (180, "3 minutes"), (3600, "1 hour"), (3900, "1 hour 5 minutes"),
    (7260, "2 hours 1 minute"), (3 * 86400, "3 days"),
])
def test_minutes_words(seconds: int, words: str) -> None:
    assert views.minutes_words(seconds) == words


def test_a_help_access_ended_by_the_student_names_her_once() -> None:
    grant = Grant(id="g1", course="cs101", student="alice", staff="tina", role="assistant", basis="request",
                  started=1_800_000_000.0, expires=1_800_003_600.0, ended=1_800_000_060.0,
                  end_reason="student", ended_by="alice")
    words = ended_words(grant)
    assert "by the student by" not in words
    assert words.startswith("tina (assistant) no longer has access to alice's environments "
                            "(ended by alice, the student, ")


@pytest.mark.parametrize(("text", "port"), [("43117\n", 43117), ("", 0), ("80", 0), ("x", 0),
                                             ("70000", 0)])
def test_the_git_servers_kept_port(text: str, port: int) -> None:
    assert kept_port(text) == port


def test_every_assignment_on_the_old_address_is_pointed_at_the_new_one() -> None:
    old, new = base_url(41000), base_url(42000)
    mine = {"spec": {"source": {"url": f"{old}starter.git", "ref": "main"}}}
    assert moved_source(mine, old, new) == {"spec": {"source": {"url": f"{new}starter.git"}}}
    elsewhere = {"spec": {"source": {"url": "https://github.com/course/w.git"}}}
    other_port = {"spec": {"source": {"url": f"{base_url(4100)}starter.git"}}}
    assert moved_source(elsewhere, old, new) is None and moved_source(other_port, old, new) is None
    assert moved_source(mine, old, old) is None


@pytest.mark.parametrize("path", ["theirs.git", "starter.git.evil", "starter", "", "x/starter.git"])
def test_only_the_examples_own_repository_is_moved(path: str) -> None:
    """Attack review (SECURITY.md): the old port was taken by another server; an assignment that
    names a repository of that server is not pointed at the example's git server."""
    old, new = base_url(41000), base_url(42000)
    theirs = {"spec": {"source": {"url": f"{old}{path}", "ref": "main"}}}
    assert moved_source(theirs, old, new) is None
