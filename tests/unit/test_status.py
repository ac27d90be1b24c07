"""Status computation: phase, Ready condition, and when lastTransitionTime moves."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from userland.operator.rules.progress import FINAL_REASONS, trim_pod
from userland.operator.rules.sleep import Verdict
from userland.operator.rules.status import (
    Problem,
    invalid_userland_status,
    start_deadline,
    status_changed,
    template_status,
    userland_status,
)
from userland.platform.model.models import Template, Userland

T0, T1 = "2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z"


def _userland(status: dict[str, Any] | None = None, suspended: bool = False) -> Userland:
    return Userland.from_object(
        {
            "metadata": {"name": "vscode-ann", "namespace": "c", "uid": "u", "generation": 4},
            "spec": {"user": "ann", "template": "vscode", "suspended": suspended},
            "status": status or {},
        }
    )


def _template(routing: dict[str, str]) -> Template:
    return Template.from_object(
        {
            "metadata": {"name": "vscode", "namespace": "c"},
            "spec": {
                "routing": routing,
                "port": 8080,
                "podSpec": {"containers": [{"name": "c", "image": "i"}]},
            },
        }
    )


AVAILABLE = {"status": {"availableReplicas": 1}}
STUCK = {
    "status": {
        "conditions": [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "too slow",
            }
        ]
    }
}


@pytest.mark.parametrize(
    ("deployment", "problem", "suspended", "phase", "ready", "reason"),
    [
        (None, None, False, "Starting", "False", "Starting"),
        ({"status": {}}, None, False, "Starting", "False", "Starting"),
        (AVAILABLE, None, False, "Ready", "True", "Available"),
        # Woken just now: the Deployment's status is still the one from before it slept (its
        # old Pod counted, generation 6 not yet seen by the deployment controller): not ready.
        ({"metadata": {"generation": 7}, "status": {"availableReplicas": 1, "observedGeneration": 6}},
         None, False, "Starting", "False", "Starting"),
        ({"metadata": {"generation": 7}, "status": {"availableReplicas": 1, "observedGeneration": 7}},
         None, False, "Ready", "True", "Available"),
        (AVAILABLE, None, True, "Suspended", "False", "Suspended"),
        (STUCK, None, False, "Failed", "False", "ProgressDeadlineExceeded"),
        (
            None,
            Problem("TemplateNotFound", "no", phase="Pending"),
            False,
            "Pending",
            "False",
            "TemplateNotFound",
        ),
        (AVAILABLE, Problem("InvalidPodSpec", "bad"), False, "Failed", "False", "InvalidPodSpec"),
    ],
)
def test_phase_and_ready(
    deployment: Any, problem: Problem | None, suspended: bool, phase: str, ready: str, reason: str
) -> None:
    status = userland_status(
        _userland(suspended=suspended),
        _template({"host": "ide.example.edu"}),
        deployment,
        problem,
        public_url="https://u.example.edu",
        now=T0,
    )
    assert status["phase"] == phase
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Ready", ready, reason)
    assert condition["observedGeneration"] == status["observedGeneration"] == 4
    assert status["service"] == "vscode-ann-svc"


def test_urls_for_host_and_path_routing() -> None:
    by_host = userland_status(
        _userland(),
        _template({"host": "ide.example.edu"}),
        None,
        None,
        public_url="http://localhost:8000",
        now=T0,
    )
    by_path = userland_status(
        _userland(),
        _template({"pathPrefix": "/ide/"}),
        None,
        None,
        public_url="https://u.example.edu/",
        now=T0,
    )
    # A host route serves each student on their own origin, on the platform's port.
    assert by_host["url"] == "http://ann.ide.example.edu:8000/"
    assert by_path["url"] == "https://u.example.edu/ide/"
    deployed = userland_status(_userland(), _template({"host": "IDE.example.edu"}), None, None,
                               public_url="https://u.example.edu", now=T0)
    assert deployed["url"] == "https://ann.ide.example.edu/"


def test_no_template_means_no_url_or_service() -> None:
    status = userland_status(
        _userland(), None, None, Problem("TemplateNotFound", "x", "Pending"), public_url="", now=T0
    )
    assert "url" not in status and "service" not in status


def test_transition_time_moves_only_when_the_value_changes() -> None:
    first = userland_status(
        _userland(), None, None, Problem("TemplateNotFound", "x", "Pending"), public_url="", now=T0
    )
    same_value = userland_status(
        _userland(first), _template({"host": "h"}), None, None, public_url="", now=T1
    )
    assert same_value["conditions"][0]["reason"] == "Starting"
    assert same_value["conditions"][0]["lastTransitionTime"] == T0
    flipped = userland_status(
        _userland(first), _template({"host": "h"}), AVAILABLE, None, public_url="", now=T1
    )
    assert flipped["conditions"][0]["lastTransitionTime"] == T1


def test_status_changed_ignores_nothing_that_matters() -> None:
    status = userland_status(_userland(), None, None, None, public_url="", now=T0)
    assert not status_changed(status, dict(status))
    assert status_changed({**status, "phase": "Ready"}, status)
    assert status_changed({}, status)


def test_template_status() -> None:
    obj = {"metadata": {"generation": 3}, "status": {}}
    ok = template_status(obj, 5, None, now=T0)
    assert ok["userlands"] == 5 and ok["observedGeneration"] == 3
    assert ok["conditions"][0]["status"] == "True"
    bad = template_status({**obj, "status": ok}, 5, Problem("InvalidPodSpec", "refused"), now=T1)
    assert bad["conditions"][0] == {
        "type": "Ready",
        "status": "False",
        "reason": "InvalidPodSpec",
        "message": "refused",
        "lastTransitionTime": T1,
        "observedGeneration": 3,
    }


# --- precedence: what the status says when several things hold at once ------------------------

NOW = "2026-11-22T12:00:00Z"
OLD_POD_CREATED = "2026-11-22T11:00:00Z"  # an hour before NOW: past any start timeout used here
NEW_POD_CREATED = "2026-11-22T11:59:00Z"


def _pod(*, waiting: str = "ContainerCreating", message: str = "", created: str = NEW_POD_CREATED,
         ready: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "vscode-ann-1", "creationTimestamp": created},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": [{"imageID": "", "state": {"waiting": {
                           "reason": waiting, "message": message}}}]}}


# The rule of operator/rules/status.py, as data: the first state that holds decides (phase, reason).
PRECEDENCE = [
    ("suspended", "Suspended", "Suspended"),
    ("problem", None, None),  # the problem's own phase and reason
    ("asleep", "Idle", "Idle"),
    ("waking", "Starting", "Waking"),
    ("available", "Ready", "Available"),
    ("final", "Failed", "ImagePullBackOff"),
    ("stuck", "Failed", "ProgressDeadlineExceeded"),
    ("late", "Failed", "StartTimeout"),
    ("blocked", "Starting", "QuotaExceeded"),
]
QUOTA_REFUSED = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                 "message": 'pods "x" is forbidden: exceeded quota: course, requested: pods=1'}
PROBLEMS = [None, Problem("TemplateNotFound", "no Template yet", phase="Pending"),
            Problem("InvalidTemplate", "the Template has a mistake")]


def _case(suspended: bool, problem: Problem | None, asleep: bool, waking: bool, available: bool,
          final: bool, stuck: bool, late: bool, blocked: bool) -> dict[str, Any]:
    deployment: dict[str, Any] = {"status": {"conditions": []}}
    if available:
        deployment["status"]["availableReplicas"] = 1
    if stuck:
        deployment["status"]["conditions"] += STUCK["status"]["conditions"]
    if blocked:
        deployment["status"]["conditions"].append(QUOTA_REFUSED)
    pod = _pod(waiting="ImagePullBackOff" if final else "ContainerCreating",
               created=OLD_POD_CREATED if late else NEW_POD_CREATED)
    verdict = Verdict(asleep=asleep, cause="visit")
    return userland_status(_userland(suspended=suspended), _template({"host": "ide.example.edu"}), deployment,
                           problem, public_url="https://u.example.edu", now=NOW, sleep=verdict, waking=waking,
                           pod=pod, start_timeout=600)


@pytest.mark.parametrize("states", list(itertools.product(
    [False, True], PROBLEMS, [False, True], [False, True], [False, True], [False, True], [False, True],
    [False, True], [False, True])), ids=lambda states: "-".join(
        name for name, on in zip([p[0] for p in PRECEDENCE], states, strict=True) if on) or "nothing")
def test_every_combination_follows_the_precedence(states: tuple[Any, ...]) -> None:
    status = _case(*states)
    holding = [entry for entry, on in zip(PRECEDENCE, states, strict=True) if on]
    expected: tuple[Any, Any]
    if not holding:
        expected = ("Starting", "Starting")
    elif holding[0][0] == "problem":
        problem = states[1]
        expected = (problem.phase, problem.reason)
    else:
        expected = (holding[0][1], holding[0][2])
    ready = status["conditions"][0]
    assert (status["phase"], ready["reason"]) == expected
    assert ready["status"] == ("True" if expected == ("Ready", "Available") else "False")


def test_suspended_wins_over_a_missing_template_and_says_what_resuming_will_meet() -> None:
    status = userland_status(_userland(suspended=True), None, None,
                             Problem("TemplateNotFound", "Template 'vscode' not found", phase="Pending"),
                             public_url="", now=T0)
    assert status["phase"] == "Suspended"
    message = status["conditions"][0]["message"]
    assert message.startswith("vscode is suspended; resume it to start it again")
    assert "Template 'vscode' not found" in message


@pytest.mark.parametrize("reason", sorted(FINAL_REASONS))
def test_a_final_pod_reason_fails_at_once_with_the_pods_own_reason_and_message(reason: str) -> None:
    pod = _pod(waiting=reason, message="the kubelet's own words")
    status = userland_status(_userland(), _template({"host": "h"}), {"status": {}}, None, public_url="",
                             now=NOW, pod=pod)
    ready = status["conditions"][0]
    assert (status["phase"], ready["status"], ready["reason"]) == ("Failed", "False", reason)
    assert ready["message"] == f"vscode cannot start: {FINAL_REASONS[reason]}: the kubelet's own words"


def test_a_waiting_reason_that_passes_by_itself_is_still_starting() -> None:
    for reason in ("ContainerCreating", "PodInitializing"):
        status = userland_status(_userland(), _template({"host": "h"}), {"status": {}}, None, public_url="",
                                 now=NOW, pod=_pod(waiting=reason))
        assert (status["phase"], status["conditions"][0]["reason"]) == ("Starting", "Starting")


def test_a_failed_start_goes_back_when_the_pod_recovers() -> None:
    failed = userland_status(_userland(), _template({"host": "h"}), {"status": {}}, None, public_url="",
                             now=NOW, pod=_pod(waiting="CrashLoopBackOff"))
    assert failed["phase"] == "Failed"
    recovered = userland_status(_userland(failed), _template({"host": "h"}), AVAILABLE, None, public_url="",
                                now=NOW, pod=_pod(ready=True, waiting=""))
    assert (recovered["phase"], recovered["conditions"][0]["reason"]) == ("Ready", "Available")


def test_start_timeout_counts_from_the_pods_creation() -> None:
    pod = _pod(created="2026-11-22T11:50:00Z")
    assert start_deadline(pod, 600) == datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert start_deadline(pod, None) is None
    assert start_deadline(None, 600) is None
    assert start_deadline(_pod(ready=True), 600) is None  # ready: no deadline to meet
    just_before = userland_status(_userland(), _template({"host": "h"}), None, None, public_url="",
                                  now="2026-11-22T11:59:59Z", pod=pod, start_timeout=600)
    assert just_before["phase"] == "Starting"
    at_it = userland_status(_userland(), _template({"host": "h"}), None, None, public_url="",
                            now=NOW, pod=pod, start_timeout=600, progress=["Scheduled"])
    ready = at_it["conditions"][0]
    assert (at_it["phase"], ready["reason"]) == ("Failed", "StartTimeout")
    assert ready["message"] == "vscode did not become ready within 10 min; it got as far as: Scheduled"
    unbounded = userland_status(_userland(), _template({"host": "h"}), None, None, public_url="",
                                now=NOW, pod=_pod(created=OLD_POD_CREATED), start_timeout=None)
    assert unbounded["phase"] == "Starting"


def test_an_unreadable_spec_is_failed_and_keeps_its_transition_time() -> None:
    obj = {"metadata": {"generation": 2}, "status": {}}
    first = invalid_userland_status(obj, "spec.user is missing", now=T0)
    assert first == {"phase": "Failed", "observedGeneration": 2, "conditions": [{
        "type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "spec.user is missing",
        "lastTransitionTime": T0, "observedGeneration": 2}]}
    again = invalid_userland_status({**obj, "status": first}, "spec.user is wrong", now=T1)
    assert again["conditions"][0]["lastTransitionTime"] == T0
    assert not status_changed(first, invalid_userland_status({**obj, "status": first}, "spec.user is missing",
                                                             now=T1))


def _scheduler_says(message: str) -> dict[str, Any]:
    pod = _pod()
    pod["status"]["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": message})
    return pod


@pytest.mark.parametrize(("message", "reason", "words"), [
    ("0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims.", "StorageUnavailable",
     "its storage cannot be attached"),
    ("0/3 nodes are available: 3 Insufficient memory.", "Unschedulable", "not enough room in the cluster"),
])
def test_a_pod_the_scheduler_cannot_place_says_what_the_start_waits_for(message: str, reason: str,
                                                                       words: str) -> None:
    # What the operator keeps of the Pod (trim_pod) is enough to tell.
    status = userland_status(_userland(), _template({"host": "ide.example.edu"}), {"status": {}}, None,
                             public_url="https://u.example.edu", now=NOW,
                             pod=trim_pod(_scheduler_says(message)), start_timeout=600)
    ready = status["conditions"][0]
    assert (status["phase"], ready["reason"]) == ("Starting", reason)
    assert ready["message"] == f"vscode is waiting to start: {words} ({message})"


def test_a_quota_refusal_says_so_and_other_refusals_do_not() -> None:
    other = {**QUOTA_REFUSED, "message": 'pods "x" is forbidden: violates PodSecurity "restricted"'}
    for condition, reason in ((QUOTA_REFUSED, "QuotaExceeded"), (other, "Starting")):
        status = userland_status(_userland(), _template({"host": "ide.example.edu"}),
                                 {"status": {"conditions": [condition]}}, None,
                                 public_url="https://u.example.edu", now=NOW, start_timeout=600)
        assert (status["phase"], status["conditions"][0]["reason"]) == ("Starting", reason)
