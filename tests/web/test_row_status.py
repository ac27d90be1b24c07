"""What a row says: the one precedence rule, for every combination, and its words (web/rules/row_status.py).

The table below is the rule written out by hand; the test walks every combination of being
removed, spec.suspended, status.phase (none and the CRD's six), the Ready condition's reason
and the Pod's problems through the real `dashboard.environment` and checks the row's status,
that the Status filter picks it by that status and by no other, and that its words are true.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.jargon import jargon_in
from userland.web.rules import dashboard, row_status, slim

# (being removed, spec.suspended, status.phase) -> what the row says. Removing beats suspended
# beats the status; the operator writes phase Suspended for a suspended one whose Template is
# missing (it lets spec.suspended win too), and a stale "Suspended" after a resume is Starting.
EXPECTED: dict[tuple[bool, bool, str | None], str] = {}
for _deleting, _suspended, _phase in itertools.product((False, True), (False, True),
                                                       (None, *row_status.PHASES)):
    EXPECTED[(_deleting, _suspended, _phase)] = (
        "Removing" if _deleting else "Suspended" if _suspended else
        "Pending" if _phase is None else "Starting" if _phase == "Suspended" else _phase)
# The same, written out for the cases people asked about, so the loop above cannot drift.
assert EXPECTED[(False, True, "Pending")] == "Suspended"      # suspended, Template missing
assert EXPECTED[(False, True, "Ready")] == "Suspended"        # just suspended, still running
assert EXPECTED[(False, False, "Suspended")] == "Starting"    # just resumed
assert EXPECTED[(True, True, "Failed")] == "Removing"
assert EXPECTED[(False, False, None)] == "Pending"            # no status yet: "Waiting"
assert EXPECTED[(False, False, "Idle")] == "Idle"

# The Ready condition reasons the operator writes (the contract with the operator: a Failed
# environment carries the Pod's final reason, or StartTimeout) and a few others.
FINAL_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
                 "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
                 "ProgramNotInstalled", "StartTimeout")
REASONS = ("", "Available", "Starting", "Waking", "Asleep", "Suspended", "TemplateNotFound",
           "InvalidTemplate", "RouteConflict", "ProgressDeadlineExceeded", *FINAL_REASONS, "SomethingNew")
POD_PROBLEMS: tuple[tuple[dict[str, Any], ...], ...] = (
    (),
    ({"metadata": {"name": "p"}, "status": {"waiting": [
        {"reason": "ProgramNotInstalled", "message": "code-server is not installed here"}]}},),
)


def userland(deleting: bool, suspended: bool, phase: str | None, reason: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "vscode-alice", "namespace": "c", "resourceVersion": "1",
                            "creationTimestamp": "2027-01-15T07:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T07:59:00Z"
    status: dict[str, Any] = {}
    if phase is not None:
        ready = "True" if phase == "Ready" else "False"
        status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready, "reason": reason,
                                                  "message": "the operator's words",
                                                  "lastTransitionTime": "2027-01-15T07:58:00Z"}]}
    return slim.userland({"metadata": meta, "spec": {"user": "alice", "template": "vscode",
                                                      "suspended": suspended}, "status": status})


@pytest.mark.parametrize(("deleting", "suspended", "phase"), sorted(EXPECTED, key=str))
def test_every_combination_says_one_status_and_one_filter_picks_it(deleting: bool, suspended: bool,
                                                                    phase: str | None) -> None:
    expected = EXPECTED[(deleting, suspended, phase)]
    for reason, pods in itertools.product(REASONS, POD_PROBLEMS):
        env = dashboard.environment(userland(deleting, suspended, phase, reason), None, pods)
        assert env.phase == expected, (reason, pods)
        row = dashboard.student_row("alice", [], [env])
        picked_by = [value for value in row_status.STATUS_FILTERS
                     if dashboard.Query.from_params({"phase": value}).matches(row)]
        assert picked_by == [next(k for k, v in row_status.STATUS_FILTERS.items() if v == expected)]
        # Words that are true: never only "starting" when the Pod or the condition says why.
        says_why = pods or (phase is not None and reason in row_status.CONDITION_WORDS)
        if expected in ("Starting", "Pending", "Failed") and says_why:
            assert env.reason not in ("starting", "it cannot start", "waiting to be set up"), (reason, pods)
        words = dashboard.student_reason(env) + ". " + dashboard.advice(env)
        assert words and not jargon_in(words), words


@pytest.mark.parametrize("reason", FINAL_REASONS)
def test_a_failed_environment_says_why_in_words_for_staff_and_students(reason: str) -> None:
    env = dashboard.environment(userland(False, False, "Failed", reason), None)
    assert (env.phase_words, env.condition) == ("Failed", reason)
    assert env.reason in row_status.WAITING_WORDS.values() or env.reason == row_status.TIMEOUT
    assert env.detail == "the operator's words"  # staff also see the operator's message
    student = dashboard.student_reason(env)
    assert student != "it cannot start" and reason.lower() not in student.lower()
    assert "cannot start right now" in dashboard.advice(env)


def test_a_starting_environment_whose_pod_says_why_does_not_only_say_starting() -> None:
    pods = POD_PROBLEMS[1]
    env = dashboard.environment(userland(False, False, "Starting", "Starting"), None, pods)
    assert env.phase_words == "Starting" and env.reason == row_status.NOT_INSTALLED
    assert env.problems[0].detail == "ProgramNotInstalled: code-server is not installed here"
    assert dashboard.student_reason(env) == "its program is not installed here"
    warning = {"type": "Warning", "reason": "ProgramNotInstalled", "message": "not installed",
               "lastTimestamp": "2027-01-15T07:58:00Z"}
    env = dashboard.environment(userland(False, False, "Starting", "Starting"), None, (), [warning])
    assert env.reason == row_status.NOT_INSTALLED


def test_terminated_containers_explain_too() -> None:
    """The local runner reports a program that exits 127 as terminated ProgramNotInstalled; a
    crash loop keeps saying it crashes, and why it last stopped when that says more."""
    pod = slim.pod({"metadata": {"name": "p", "namespace": "c"}, "status": {"containerStatuses": [
        {"name": "c", "restartCount": 2, "state": {"terminated": {"reason": "ProgramNotInstalled",
                                                                   "message": "exit 127"}}}]}})
    env = dashboard.environment(userland(False, False, "Starting", "Starting"), None, [pod])
    assert env.reason == row_status.NOT_INSTALLED
    looping = slim.pod({"metadata": {"name": "p", "namespace": "c"}, "status": {"containerStatuses": [
        {"name": "c", "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "m"}},
         "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}})
    env = dashboard.environment(userland(False, False, "Starting", "Starting"), None, [looping])
    assert env.reason == f"{row_status.CRASH}; {row_status.MEMORY}"
