"""What an Assignment needs done (operator/rules/assignment/plan.py), its status
(operator/rules/assignment/status.py) and its worker Pods (operator/rules/assignment/pods.py): pure,
table-driven, with golden Pods."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from userland.operator.rules.assignment.plan import Env, Pending, RunAs, Source, WorkerPod, batches, plan_work
from userland.operator.rules.assignment.pods import WorkerSettings, worker_pod, worker_policy
from userland.operator.rules.assignment.status import assignment_status
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import Job, feedback_digest, round_id

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
DUE = datetime(2026, 12, 7, 23, 59, tzinfo=UTC)
SOURCE = Source("c0ffee-1234abcd", "c0ffee" + "0" * 34)
LEAD = 60.0


def assignment(annotations: dict[str, str] | None = None, **spec: Any) -> Assignment:
    return Assignment.from_object({
        "metadata": {"name": "week1", "namespace": "course", "uid": "u-1", "generation": 3,
                     "annotations": annotations or {}},
        "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1",
                 "source": {"url": "https://git.example.edu/c.git"}, **spec}})


def env(login: str, node: str | None = None, template: str = "lab", has_claim: bool = True) -> Env:
    return Env(login, template, f"{template}-{login}-data", has_claim=has_claim, node=node,
               run_as=RunAs(1000, 1000, 1000))


def done(commit: str = SOURCE.commit, state: str = "HandedOut", at: datetime = NOW) -> dict[str, Any]:
    return {"commit": commit, "state": state, "at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def keys(plan_pending: list[Pending]) -> list[tuple[str, str, list[str]]]:
    return [(p.kind, p.key, [e.key for e in p.envs]) for p in plan_pending]


def test_nothing_before_the_release_and_a_look_at_it() -> None:
    release = NOW + timedelta(hours=1)
    plan = plan_work(assignment(release=release.isoformat()), [env("alice")], SOURCE, {}, [], now=NOW,
                     lead=LEAD)
    assert plan.pending == [] and plan.look_again == release


def test_hand_out_to_who_does_not_have_this_commit() -> None:
    state = {"handout": {"lab/alice": done(), "lab/bob": done(commit="old" * 13 + "o"),
                         "lab/carol": done(state="Conflicts")}}
    envs = [env("alice"), env("bob"), env("carol"), env("dave"), env("erin", has_claim=False)]
    plan = plan_work(assignment(), envs, SOURCE, state, [], now=NOW, lead=LEAD)
    assert keys(plan.pending) == [("handout", SOURCE.commit, ["lab/bob", "lab/dave"])]


def test_hand_out_again_redoes_what_came_before_it() -> None:
    asked = NOW + timedelta(minutes=1)
    plan = plan_work(assignment({naming.ANNOTATION_HANDOUT_AT: asked.strftime("%Y-%m-%dT%H:%M:%SZ")}),
                     [env("alice")], SOURCE, {"handout": {"lab/alice": done()}}, [],
                     now=NOW + timedelta(minutes=2), lead=LEAD)
    assert keys(plan.pending) == [("handout", SOURCE.commit, ["lab/alice"])]


def test_a_failure_is_tried_again_after_ten_minutes() -> None:
    state = {"handout": {"lab/alice": done(state="Failed")}}
    soon = plan_work(assignment(), [env("alice")], SOURCE, state, [], now=NOW + timedelta(minutes=5),
                     lead=LEAD)
    assert soon.pending == [] and soon.look_again == NOW + timedelta(minutes=10)
    later = plan_work(assignment(), [env("alice")], SOURCE, state, [], now=NOW + timedelta(minutes=11),
                      lead=LEAD)
    assert keys(later.pending) == [("handout", SOURCE.commit, ["lab/alice"])]


def test_work_in_a_live_pod_is_not_asked_twice_and_a_failed_pod_holds_it_a_minute() -> None:
    live = WorkerPod("p1", "handout", SOURCE.commit, ("lab/alice",), phase="Running")
    failed = WorkerPod("p2", "handout", SOURCE.commit, ("lab/bob",), phase="Failed", created=NOW)
    finished = WorkerPod("p3", "handout", SOURCE.commit, ("lab/carol",), phase="Succeeded")
    envs = [env("alice"), env("bob"), env("carol")]
    plan = plan_work(assignment(), envs, SOURCE, {}, [live, failed, finished], now=NOW, lead=LEAD)
    assert keys(plan.pending) == [("handout", SOURCE.commit, ["lab/carol"])]
    assert plan.finished == ["p3"] and plan.look_again == NOW + timedelta(seconds=60)
    plan = plan_work(assignment(), envs, SOURCE, {}, [live, failed], now=NOW + timedelta(minutes=2),
                     lead=LEAD)
    assert plan.finished == ["p2"]
    assert keys(plan.pending) == [("handout", SOURCE.commit, ["lab/bob", "lab/carol"])]


def test_collection_pods_are_made_a_lead_before_each_students_deadline() -> None:
    later = DUE + timedelta(days=2)
    spec = {"due": DUE.isoformat(), "extensions": {"bob": later.isoformat()}}
    state = {"handout": {"lab/alice": done(), "lab/bob": done()}}
    envs = [env("alice"), env("bob")]
    early = plan_work(assignment(**spec), envs, SOURCE, state, [], now=NOW, lead=LEAD)
    assert early.pending == [] and early.look_again == DUE - timedelta(seconds=LEAD)
    at_lead = plan_work(assignment(**spec), envs, SOURCE, state, [], now=DUE - timedelta(seconds=30),
                        lead=LEAD)
    assert keys(at_lead.pending) == [("collect", round_id(DUE), ["lab/alice"])]
    assert at_lead.pending[0].at == DUE
    copied = {**state, "copies": {round_id(DUE): {"lab/alice": {"sha256": "x"}}}}
    after = plan_work(assignment(**spec), envs, SOURCE, copied, [], now=DUE + timedelta(hours=1), lead=LEAD)
    assert after.pending == [] and after.look_again == later - timedelta(seconds=LEAD)
    assert after.rounds == {"lab/alice": [round_id(DUE)]}


def test_collect_now_is_a_round_for_everyone_and_a_failure_is_not_retried() -> None:
    now_round = NOW - timedelta(seconds=1)
    state = {"collectFailed": {round_id(now_round): {"lab/bob": {"reason": "too large"}}},
             "handout": {"lab/alice": done(), "lab/bob": done()}}
    plan = plan_work(assignment({naming.ANNOTATION_COLLECT_NOW: now_round.strftime("%Y-%m-%dT%H:%M:%SZ")}),
                     [env("alice"), env("bob")], SOURCE, state, [], now=NOW, lead=LEAD)
    collect = [p for p in plan.pending if p.kind == "collect"]
    assert keys(collect) == [("collect", round_id(now_round), ["lab/alice"])]


def test_feedback_goes_back_when_it_differs_from_what_was_returned() -> None:
    upload = {"sha256": "u1"}
    state: dict[str, Any] = {"handout": {"lab/alice": done(), "lab/bob": done(), "lab/carol": done()},
                             "feedback": {"alice": upload, "bob": upload}}
    spec = {"returnFeedback": True, "grades": {"alice": {"grade": "A"}, "carol": {"comment": "ok"}}}
    alice_digest = feedback_digest("u1", "A", "")
    state["feedbackReturned"] = {"lab/alice": {"digest": alice_digest, "state": "HandedOut", "at": "x"}}
    plan = plan_work(assignment(**spec), [env("alice"), env("bob"), env("carol"), env("dave")], SOURCE, state,
                     [], now=NOW, lead=LEAD)
    (feedback,) = [p for p in plan.pending if p.kind == "feedback"]
    assert [e.login for e in feedback.envs] == ["bob", "carol"]
    assert feedback.feedback == {"bob": ("", "", feedback_digest("u1", "", "")),
                                 "carol": ("", "ok", feedback_digest("", "", "ok"))}
    quiet = plan_work(assignment(grades=spec["grades"]), [env("bob")], SOURCE, state, [], now=NOW, lead=LEAD)
    assert [p for p in quiet.pending if p.kind == "feedback"] == []


def test_batches_keep_one_template_and_one_node_per_pod() -> None:
    envs = (env("a", "n1"), env("b", "n1"), env("c", "n1"), env("d"), env("e", template="vscode"),
            env("f", "n2"))
    groups = batches(Pending("handout", "c", envs), 2)
    assert [[e.login for e in group] for group in groups] == [["d"], ["a", "b"], ["c"], ["f"], ["e"]]


SETTINGS = WorkerSettings(image="registry.example.edu/userland:0.1.0",
                          store_url="http://userland-store.userland-system.svc:8080",
                          store_secret="s" * 40, max_files=20000, max_bytes=500 * 1024 * 1024)


def test_the_worker_pod_is_golden() -> None:
    pending = Pending("collect", round_id(DUE), (env("alice", "node-1"), env("bob", "node-1")), at=DUE)
    pod = worker_pod(assignment(), pending, pending.envs, SETTINGS, now=DUE - timedelta(seconds=60))
    job = Job.from_json(pod["spec"]["containers"][0]["env"][0]["value"])
    assert [m.mount for m in job.scope.members] == ["/students/s0", "/students/s1"]
    assert job.at == "2026-12-07T23:59:00Z" and job.scope.round == "20261207T235900Z"
    golden = json.loads((GOLDEN / "assignment-worker-pod.json").read_text())
    assert pod == golden


def test_the_worker_policy_is_golden() -> None:
    policy = worker_policy(assignment(), {"app.kubernetes.io/name": "userland-store"}, "userland-system",
                           8080)
    assert policy == json.loads((GOLDEN / "assignment-worker-policy.json").read_text())


@pytest.mark.parametrize(("states", "spec", "reason", "phase", "counts"), [
    ({"alice": "HandedOut", "bob": "Conflicts"}, {}, "HandedOut", "Open", ("2/2", None)),
    ({"alice": "HandedOut"}, {}, "HandingOut", "HandingOut", ("1/2", None)),
    ({"alice": "HandedOut", "bob": "Failed"}, {}, "HandOutFailed", "HandingOut", ("1/2", None)),
])
def test_the_summary_says_what_matters_first(states: dict[str, str], spec: dict[str, Any], reason: str,
                                             phase: str, counts: tuple[str, str | None]) -> None:
    handout = {f"lab/{login}": {**done(state=state), "reason": "the student's storage is full"}
               for login, state in states.items()}
    the_assignment = assignment(**spec)
    envs = [env("alice"), env("bob")]
    plan = plan_work(the_assignment, envs, SOURCE, {"handout": handout}, [], now=NOW, lead=LEAD)
    status = assignment_status(the_assignment, envs, [], SOURCE, {"commit": SOURCE.commit}, None,
                               {"handout": handout}, plan, [], [], now=NOW)
    assert status["conditions"][0]["reason"] == reason and status["phase"] == phase
    assert (status["handedOut"], status["collected"]) == counts


def test_a_student_entry_says_their_copy_and_whether_it_was_late() -> None:
    the_assignment = assignment(due=DUE.isoformat(), students=["alice", "zoe"])
    taken = (DUE + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = {"handout": {"lab/alice": {**done(), "conflicts": [["hello.py", "changed"]], "conflictCount": 1}},
             "copies": {round_id(DUE): {"lab/alice": {"takenAt": taken, "sha256": "3f2a" * 16, "files": 14,
                                                      "bytes": 1_200_000}}}}
    later = DUE + timedelta(hours=1)
    plan = plan_work(the_assignment, [env("alice")], SOURCE, state, [], now=later, lead=LEAD)
    status = assignment_status(the_assignment, [env("alice")], ["zoe"], SOURCE, None, None, state, plan, [],
                               [],
                               now=later)
    alice, zoe = status["students"]
    assert alice["state"] == "HandedOut" and alice["conflicts"] == [{"path": "hello.py", "kind": "changed"}]
    assert alice["collected"] == {"round": "2026-12-07T23:59:00Z", "takenAt": taken, "sha256": "3f2a" * 16,
                                  "files": 14, "bytes": 1_200_000, "late": True, "lateSeconds": 300}
    assert zoe == {"user": "zoe", "template": "", "state": "NoEnvironment",
                   "reason": "this student has no environment of lab in this course"}
    assert status["collected"] == "1/1" and status["phase"] == "Collected"
