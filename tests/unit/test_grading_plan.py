"""Grading decisions (operator/rules/grading/): which copies to grade, each student's state, the
time limit enforced from outside, the fair queue between courses, and the grading Pod and its
NetworkPolicy against golden data (tests/unit/golden/grading-pod.json, grading-policy.json)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden import check_golden
from userland.operator.rules.grading.plan import GradingPod, Regrade, plan_grading
from userland.operator.rules.grading.pods import GradeWork, GradingSettings, grading_pod, grading_policy
from userland.operator.rules.grading.queue import GradingQueue, fair_shares
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import Job
from userland.platform.model.grading import Grader, parse_grader

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 12, 8, 0, 5, tzinfo=UTC)
ROUND = "20261207T235900Z"
TESTS = "tests-key-1"
GRADER_SPEC: dict[str, Any] = {"image": "registry.example.edu/course/grader:1", "tests": {"path": "grading"},
                               "maxScore": 10, "timeLimit": "90s",
                               "env": [{"name": "LANG", "value": "C.UTF-8"}]}


def assignment() -> Assignment:
    return Assignment.from_object({
        "metadata": {"name": "week1", "namespace": "course", "uid": "u-1", "generation": 3},
        "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1",
                 "source": {"url": "https://git.example.edu/c.git", "subPath": "week1"}}})


def grader() -> Grader:
    found = parse_grader(GRADER_SPEC, assignment().spec.source)
    assert isinstance(found, Grader)
    return found


def copies(*logins: str) -> dict[str, tuple[str, str, str, str]]:
    return {f"lab/{login}": (login, "lab", ROUND, f"sha-{login}") for login in logins}


def work(login: str) -> GradeWork:
    return GradeWork(login, "lab", ROUND, f"sha-{login}", TESTS)


def at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def graded(login: str, **extra: Any) -> dict[str, Any]:
    return {"version": work(login).version, "state": "Graded", "score": 7.0, "maxScore": 10.0,
            "at": at(NOW - timedelta(minutes=1)), **extra}


def pod(login: str, **fields: Any) -> GradingPod:
    return GradingPod(name=f"p-{login}", env=f"lab/{login}", version=work(login).version, **fields)


def test_each_copy_is_queued_once_and_a_graded_one_is_kept() -> None:
    plan = plan_grading(copies("alice", "bob", "carol"), TESTS, {"lab/alice": graded("alice")},
                        [pod("bob", phase="Running")], Regrade(), now=NOW)
    assert [w.login for w, _ in plan.start] == ["carol"]
    assert plan.states["lab/alice"]["state"] == "Graded" and plan.states["lab/alice"]["score"] == 7.0
    assert plan.states["lab/bob"] == {"state": "Running", "round": ROUND}
    assert plan.states["lab/carol"] == {"state": "Queued", "round": ROUND}
    assert plan.delete == []


def test_a_graded_copy_keeps_the_graders_exit_status() -> None:
    # docs/grading.md lists `exitStatus` in each student's grading: it comes from the store's record.
    plan = plan_grading(copies("alice", "bob"), TESTS,
                        {"lab/alice": graded("alice", exitStatus=1),
                         "lab/bob": graded("bob", state="Failed", reason="OutOfMemory", exitStatus=137)},
                        [], Regrade(), now=NOW)
    assert plan.states["lab/alice"]["exitStatus"] == 1
    assert (plan.states["lab/bob"]["reason"], plan.states["lab/bob"]["exitStatus"]) == ("OutOfMemory", 137)
    assert "version" not in plan.states["lab/alice"]  # what the store keeps for itself stays there


def test_new_tests_or_a_new_copy_grade_again_and_the_old_pod_goes() -> None:
    old = {"lab/alice": graded("alice", version="another-version")}
    stale = GradingPod(name="p-old", env="lab/alice", version="another-version", phase="Running")
    plan = plan_grading(copies("alice"), TESTS, old, [stale], Regrade(), now=NOW)
    assert [w.login for w, _ in plan.start] == ["alice"]
    assert plan.delete == ["p-old"]


def test_regrade_for_everyone_or_one_student() -> None:
    records = {"lab/alice": graded("alice"), "lab/bob": graded("bob")}
    everyone = Regrade.parse(at(NOW))
    plan = plan_grading(copies("alice", "bob"), TESTS, records, [], everyone, now=NOW)
    assert sorted(w.login for w, _ in plan.start) == ["alice", "bob"]
    assert all(attempt == int(NOW.timestamp()) for _, attempt in plan.start)
    only_bob = Regrade.parse(f"{at(NOW)} Bob")
    plan = plan_grading(copies("alice", "bob"), TESTS, records, [], only_bob, now=NOW)
    assert [w.login for w, _ in plan.start] == ["bob"]
    # Graded after the regrade was asked: done.
    later = {"lab/bob": graded("bob", at=at(NOW + timedelta(seconds=5)))}
    assert plan_grading(copies("bob"), TESTS, later, [], only_bob, now=NOW).start == []


def test_a_hung_grader_is_ended_from_outside_at_its_time_limit() -> None:
    started = NOW - timedelta(seconds=60)
    running = pod("alice", phase="Pending", time_limit=60, grade_started=started)
    plan = plan_grading(copies("alice"), TESTS, {}, [running], Regrade(), now=NOW - timedelta(seconds=1))
    assert plan.states["lab/alice"]["state"] == "Running" and plan.failures == []
    assert plan.look_again == started + timedelta(seconds=62)
    plan = plan_grading(copies("alice"), TESTS, {}, [running], Regrade(), now=started + timedelta(seconds=62))
    assert [(f.work.login, f.reason, f.message) for f in plan.failures] == [
        ("alice", "TimedOut", "timed out after 60 s")]
    assert plan.delete == ["p-alice"] and plan.start == []
    assert plan.states["lab/alice"]["state"] == "Failed"


@pytest.mark.parametrize(("fields", "reason", "words"), [
    ({"phase": "Failed", "pod_reason": "DeadlineExceeded"}, "TimedOut", "timed out after 60 s"),
    ({"phase": "Failed", "trouble": ("grade", "OOMKilled", "")}, "OutOfMemory", "ran out of memory"),
    ({"phase": "Pending", "trouble": ("grade", "ImagePullBackOff", "not found")}, "GraderFailed",
     "the grader's image cannot be pulled: not found"),
    ({"phase": "Failed", "trouble": ("fetch", "Error", "")}, "GraderFailed",
     "while fetching the copy and the tests"),
    ({"phase": "Failed"}, "GraderFailed", "the grading Pod failed"),
])
def test_a_grading_that_ends_without_a_report_fails_with_its_reason(fields: dict[str, Any], reason: str,
                                                                    words: str) -> None:
    plan = plan_grading(copies("alice"), TESTS, {}, [pod("alice", **fields)], Regrade(), now=NOW)
    assert [(f.reason, f.message) for f in plan.failures] == [(reason, plan.failures[0].message)]
    assert words in plan.failures[0].message
    assert plan.start == []


def test_a_pod_that_never_starts_its_grader_frees_its_slot() -> None:
    made = NOW - timedelta(minutes=9)
    waiting = pod("alice", phase="Pending", created=made)
    plan = plan_grading(copies("alice"), TESTS, {}, [waiting], Regrade(), now=NOW)
    assert plan.failures == [] and plan.look_again == made + timedelta(minutes=10)
    plan = plan_grading(copies("alice"), TESTS, {}, [waiting], Regrade(), now=made + timedelta(minutes=10))
    assert [f.reason for f in plan.failures] == ["GraderFailed"]
    assert "did not start within 10 minutes" in plan.failures[0].message and plan.delete == ["p-alice"]


def test_a_grading_pod_as_the_plan_reads_it() -> None:
    from userland.operator.rules.grading.plan import grading_pod_of

    body = {"metadata": {"name": "p", "creationTimestamp": "2026-12-08T00:00:00Z", "annotations": {
        naming.ANNOTATION_JOB: '{"kind":"grade","key":"v1","members":["lab/alice"],"timeLimit":90}'}},
        "status": {"phase": "Pending", "initContainerStatuses": [
            {"name": "fetch", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "grade", "state": {"running": {"startedAt": "2026-12-08T00:01:00Z"}}}]}}
    found = grading_pod_of(body)
    assert found is not None
    assert (found.env, found.version, found.time_limit, found.trouble) == ("lab/alice", "v1", 90, None)
    assert found.grade_started == datetime(2026, 12, 8, 0, 1, tzinfo=UTC) and not found.grade_ended
    body["status"]["initContainerStatuses"][1] = {"name": "grade", "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-12-08T00:01:00Z"}}}
    found = grading_pod_of(body)
    assert found is not None and found.trouble == ("grade", "OOMKilled", "") and found.grade_ended
    other = {"metadata": {"annotations": {naming.ANNOTATION_JOB: '{"kind":"collect"}'}}}
    assert grading_pod_of(other) is None


def test_a_finished_pod_waits_for_its_report_then_goes() -> None:
    done = pod("alice", phase="Succeeded")
    plan = plan_grading(copies("alice"), TESTS, {}, [done], Regrade(), now=NOW)
    assert plan.start == [] and plan.delete == [] and plan.states["lab/alice"]["state"] == "Running"
    plan = plan_grading(copies("alice"), TESTS, {"lab/alice": graded("alice")}, [done], Regrade(), now=NOW)
    assert plan.delete == ["p-alice"]


def test_a_student_who_left_has_their_pod_removed() -> None:
    plan = plan_grading(copies("bob"), TESTS, {}, [pod("alice", phase="Running")], Regrade(), now=NOW)
    assert "p-alice" in plan.delete


@pytest.mark.parametrize(("demand", "capacity", "shares"), [
    ({"a": 500, "b": 20}, 40, {"a": 20, "b": 20}),
    ({"a": 500, "b": 5}, 40, {"a": 35, "b": 5}),
    ({"a": 3, "b": 3, "c": 3}, 4, {"a": 2, "b": 1, "c": 1}),
    ({"a": 0, "b": 7}, 4, {"a": 0, "b": 4}),
    ({"a": 2}, 10, {"a": 2}),
])
def test_fair_shares(demand: dict[str, int], capacity: int, shares: dict[str, int]) -> None:
    assert fair_shares(demand, capacity) == shares


def test_one_course_never_starves_another() -> None:
    """Course a's 500 copies are waiting (and 40 of its Pods running: all the slots) when course b's
    deadline brings 20: as a's Pods end, b gets its half of the slots before a gets more."""
    queue = GradingQueue(limit=40)
    queue.note("a", "big", 460)
    queue.note("b", "small", 20)
    running = {("a", "big"): 40}
    assert queue.grant("b", "small", running) == 0  # no slot is free
    running = {("a", "big"): 30}  # ten ended
    assert queue.grant("a", "big", running) == 0  # a is past its fair share: the free slots are b's
    assert queue.grant("b", "small", running) == 10
    running = {("a", "big"): 20, ("b", "small"): 10}
    assert queue.grant("b", "small", running) == 10
    assert queue.grant("a", "big", {("a", "big"): 20, ("b", "small"): 20}) == 0
    queue.note("b", "small", 0)
    assert queue.grant("a", "big", {("a", "big"): 20, ("b", "small"): 5}) == 15


def test_a_courses_assignments_share_its_part() -> None:
    queue = GradingQueue(limit=10)
    queue.note("a", "one", 100)
    queue.note("a", "two", 100)
    assert queue.grant("a", "one", {}) == 5
    assert queue.grant("a", "two", {("a", "one"): 5}) == 5


def test_the_grading_pod_and_its_policy_golden() -> None:
    settings = GradingSettings(image="userland:1", store_url="http://10.96.0.20:8080", store_secret="s" * 40,
                               copy_bytes=500 * 1024 * 1024)
    built = grading_pod(assignment(), grader(), GradeWork("alice", "lab", ROUND, "c" * 64, TESTS, 2048),
                        settings, now=NOW)
    check_golden(GOLDEN / "grading-pod.json", built)
    check_golden(GOLDEN / "grading-policy.json", grading_policy(assignment(), {"app": "store"},
                                                                "userland-system", 8080))


def test_the_grading_pod_is_sandboxed() -> None:
    settings = GradingSettings(image="userland:1", store_url="http://10.96.0.20:8080", store_secret="s" * 40,
                               copy_bytes=1024 * 1024)
    built = grading_pod(assignment(), grader(), work("alice"), settings, now=NOW)
    spec = built["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 120 + 90 + 60
    assert "hostNetwork" not in spec and "hostPID" not in spec
    fetch, grade = spec["initContainers"]
    (report,) = spec["containers"]
    for container in (fetch, grade, report):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
        assert set(container["resources"]["limits"]) == {"cpu", "memory", "ephemeral-storage"}
    assert grade["securityContext"]["capabilities"]["add"] == ["SETUID", "SETGID"]
    assert report["securityContext"]["runAsNonRoot"] is True
    assert {m["mountPath"]: m.get("readOnly", False) for m in grade["volumeMounts"]}["/autograder/submission"]
    # The credential is in the platform's steps only, never in the grader's environment.
    assert {e["name"] for e in grade["env"]} == {"LANG"}
    assert any(e["name"] == "USERLAND_JOB_TOKEN" for e in fetch["env"])
    job = Job.from_json(next(e["value"] for e in fetch["env"] if e["name"] == "USERLAND_JOB"))
    assert job.scope.kind == "grade" and job.scope.round == ROUND and job.scope.source == TESTS
    assert [m.key for m in job.scope.members] == ["lab/alice"]
    assert naming.LABEL_USER not in built["metadata"]["labels"]  # never taken for the environment
    policy = grading_policy(assignment(), {"app": "store"}, "", 8080)["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy
    assert policy["egress"] == [{"to": [{"podSelector": {"matchLabels": {"app": "store"}}}],
                                 "ports": [{"protocol": "TCP", "port": 8080}]}]


def test_the_graders_score_is_the_grade_unless_staff_set_one() -> None:
    from userland.operator.rules.assignment.plan import desired_feedback

    body = {"metadata": {"name": "week1", "namespace": "course", "uid": "u-1"},
            "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1", "returnFeedback": True,
                     "source": {"url": "https://git.example.edu/c.git", "subPath": "week1"},
                     "grader": GRADER_SPEC, "grades": {"bob": {"grade": "9/10", "comment": "Seen by hand"}}}}
    graded_asg = Assignment.from_object(body)
    state = {"graded": {"lab/alice": graded("alice", score=7.5), "lab/bob": graded("bob"),
                        "lab/carol": {"state": "Failed", "reason": "TimedOut"}}}
    alice = desired_feedback(graded_asg, state, "alice")
    assert alice is not None and alice[:2] == ("7.5/10", "")
    bob = desired_feedback(graded_asg, state, "bob")
    assert bob is not None and bob[:2] == ("9/10", "Seen by hand")
    assert desired_feedback(graded_asg, state, "carol") is None


def test_each_waiting_copy_has_a_place_and_an_estimate() -> None:
    from userland.operator.rules.grading.queue import line_estimates

    assert line_estimates(3, 2, None, NOW) == [(1, None), (2, None), (3, None)]
    found = line_estimates(5, 2, 30.0, NOW)
    assert [place for place, _ in found] == [1, 2, 3, 4, 5]
    waits = [timedelta(seconds=s) for s in (30, 30, 60, 60, 90)]
    assert [at - NOW for _, at in found if at is not None] == waits


def test_the_teachers_row_says_the_place_in_line() -> None:
    from userland.web.rules.grading import grading_row

    row = grading_row({"state": "Queued", "position": 3, "estimatedAt": "2026-12-08T00:12:00Z"}, 10.0)
    assert row is not None and row.words == "queued"
    assert row.line == "number 3 in line, graded by about 00:12 UTC"
    graded_row = grading_row({"state": "Graded", "score": 7.5}, 10.0)
    assert graded_row is not None and graded_row.score == "7.5/10"
    assert grading_row({"state": "Nonsense"}, 10.0) is None and grading_row("x", 10.0) is None
