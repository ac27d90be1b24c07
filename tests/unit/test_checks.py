"""Check my work, the pure part (docs/grading.md): the ask's annotation, which checks run and in
which state each is, checks after deadline gradings in the queue, the check Pod's snapshot step,
and what a student is shown of a check (visible tests only)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.unit.test_grading_plan import TESTS, assignment, grader
from userland.operator.rules.assignment.plan import Env, RunAs
from userland.operator.rules.grading.checks import plan_checks
from userland.operator.rules.grading.plan import GradingPod
from userland.operator.rules.grading.pods import GradeWork, GradingSettings, grading_pod
from userland.operator.rules.grading.queue import GradingQueue
from userland.platform.model.checks import (
    CheckAsk,
    check_annotation,
    check_summary,
    check_words,
    parse_checks,
)
from userland.platform.model.coursework import Job, round_id
from userland.platform.model.gradescope import Results, parse_results
from userland.web.rules.grading import check_line, check_results, score_histogram

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
DUE = datetime(2026, 12, 7, 23, 59, tzinfo=UTC)


def ask(login: str, minutes_ago: float = 1.0) -> CheckAsk:
    return CheckAsk(login, "lab", NOW - timedelta(minutes=minutes_ago))


def pod(a: CheckAsk, **extra: object) -> GradingPod:
    return GradingPod(name=f"p-{a.login}-{round_id(a.at)}", env=a.env, version=round_id(a.at), kind="check",
                      **extra)  # type: ignore[arg-type]


def test_the_ask_is_an_annotation_per_student_and_anything_unreadable_is_left_out() -> None:
    key, value = check_annotation("alice", "lab", NOW)
    assert key == "check.userland.dev/alice" and value == "2026-12-01T10:00:00Z lab"
    found = parse_checks({key: value, "check.userland.dev/bob": "yesterday lab",
                          "check.userland.dev/Not_A_Login!": value, "userland.dev/regrade": value,
                          "check.userland.dev/carol": "2026-12-01T10:00:00Z"})
    assert found == {"lab/alice": CheckAsk("alice", "lab", NOW)}


def test_an_ask_is_queued_then_running_then_kept_as_the_stores_outcome() -> None:
    alice = ask("alice")
    deadlines = {"lab/alice": DUE, "lab/bob": DUE}
    plan = plan_checks({"lab/alice": alice}, deadlines, {}, [], now=NOW)
    assert plan.start == [alice]
    assert plan.states["lab/alice"] == {"state": "Queued", "asked": round_id(alice.at)}
    plan = plan_checks({"lab/alice": alice}, deadlines, {}, [pod(alice, phase="Running")], now=NOW)
    assert plan.start == [] and plan.states["lab/alice"]["state"] == "Running"
    done = {"lab/alice": {"asked": round_id(alice.at), "state": "Checked", "visible": 2, "passed": 1,
                          "at": "2026-12-01T10:00:30Z"}}
    plan = plan_checks({"lab/alice": alice}, deadlines, done, [pod(alice, phase="Succeeded")], now=NOW)
    assert plan.start == [] and plan.delete == [pod(alice).name]
    assert plan.states["lab/alice"] == {"state": "Checked", "asked": round_id(alice.at), "visible": 2,
                                        "passed": 1, "at": "2026-12-01T10:00:30Z"}
    # A newer ask runs again, and the older ask's Pod goes.
    again = ask("alice", 0.0)
    plan = plan_checks({"lab/alice": again}, deadlines, done, [pod(alice, phase="Running")], now=NOW)
    assert plan.start == [again] and plan.delete == [pod(alice).name]


def test_an_ask_after_the_deadline_or_of_no_student_never_runs() -> None:
    late = CheckAsk("bob", "lab", DUE)
    plan = plan_checks({"lab/bob": late, "lab/zed": ask("zed")}, {"lab/bob": DUE}, {}, [pod(late)], now=NOW)
    assert plan.start == [] and plan.delete == [pod(late).name]
    assert plan.states == {"lab/bob": {"state": "Failed", "asked": round_id(late.at),
                                       "reason": "AfterDeadline",
                                       "message": "it was asked after the deadline"}}


def test_a_check_past_its_time_limit_fails_in_the_students_words() -> None:
    alice = ask("alice")
    hung = pod(alice, phase="Running", time_limit=60, grade_started=NOW - timedelta(seconds=70))
    plan = plan_checks({"lab/alice": alice}, {"lab/alice": None}, {}, [hung], now=NOW)
    assert plan.delete == [hung.name] and [f[1] for f in plan.failures] == ["TimedOut"]
    assert plan.states["lab/alice"]["message"] == "the tests took longer than their time limit"


def test_checks_take_only_slots_no_deadline_grading_waits_for() -> None:
    queue = GradingQueue(limit=4)
    assert queue.grant_checks({("a", "x"): 1}) == 3
    queue.note("b", "y", 10)  # another course's deadline: its copies go first
    assert queue.grant_checks({}) == 0
    queue.note("b", "y", 0)
    assert queue.grant_checks({("b", "y"): 4}) == 0


def test_a_check_pod_snapshots_the_folder_as_the_student_without_any_credential() -> None:
    env = Env("alice", "lab", "lab-alice-data", node="node-1", run_as=RunAs(1000, 1000, 1000),
              tolerations=({"key": "lab", "operator": "Exists"},))
    settings = GradingSettings(image="userland:1", store_url="http://10.96.0.20:8080", store_secret="s" * 40,
                               copy_bytes=1024 * 1024)
    work = GradeWork("alice", "lab", round_id(NOW), "", TESTS)
    built = grading_pod(assignment(), grader(), work, settings, now=NOW, check=env)
    spec = built["spec"]
    steps = [c["name"] for c in spec["initContainers"]] + [c["name"] for c in spec["containers"]]
    assert steps == ["snapshot", "fetch", "grade", "report"]
    snapshot = spec["initContainers"][0]
    assert snapshot["securityContext"]["runAsUser"] == 1000 and snapshot["securityContext"]["runAsNonRoot"]
    assert not any(e["name"].startswith("USERLAND_") for e in snapshot["env"])  # no job, no token
    assert {"name": "student", "mountPath": "/student", "readOnly": True} in snapshot["volumeMounts"]
    assert {"name": "student", "persistentVolumeClaim": {"claimName": "lab-alice-data", "readOnly": True}} \
        in spec["volumes"]
    grade = spec["initContainers"][2]
    assert all(m["name"] != "student" for m in grade["volumeMounts"])  # the student's code never sees it
    assert spec["affinity"]["nodeAffinity"] and spec["tolerations"] == [{"key": "lab", "operator": "Exists"}]
    assert spec["automountServiceAccountToken"] is False
    job = Job.from_json(spec["initContainers"][1]["env"][0]["value"])
    assert job.scope.kind == "check" and job.scope.round == round_id(NOW)
    assert built["metadata"]["labels"]["userland.dev/work"] == "check"
    assert json.loads(built["metadata"]["annotations"]["userland.dev/job"])["kind"] == "check"


RESULTS = {"tests": [
    {"name": "add", "score": 2, "max_score": 2, "visibility": "visible"},
    {"name": "sub", "score": 0, "max_score": 2, "visibility": "visible", "output": "expected 1"},
    {"name": "later", "score": 2, "max_score": 2, "visibility": "after_due_date"},
    {"name": "published", "score": 2, "max_score": 2, "visibility": "after_published"},
    {"name": "secret", "score": 2, "max_score": 2, "visibility": "hidden"}], "output": "harness: secret"}


def test_a_student_is_shown_the_visible_tests_only_and_no_total() -> None:
    results = parse_results(json.dumps(RESULTS).encode())
    assert isinstance(results, Results)
    assert check_summary(results) == {"visible": 2, "passed": 1}
    shown = check_results({"summary": {}, "results": RESULTS})
    assert shown is not None and [t.name for t in shown] == ["add", "sub"]
    assert check_words({"state": "Checked", "visible": 2, "passed": 1}) == \
        "Your work was checked: 1 of 2 visible tests passed."
    assert check_words({"state": "Queued"}).startswith("Checking your work")
    assert check_words(None) == ""
    line = check_line({"grader": {}}, {"deadline": "2026-12-07T23:59:00Z", "check": {"state": "Checked"}})
    assert line is not None and line.results and line.open_at(NOW.timestamp())
    assert not line.open_at(DUE.timestamp())
    assert check_line({}, {}) is None  # no grader: nothing to check with


def test_the_score_histogram_counts_graded_scores_in_ten_ranges() -> None:
    def entry(state: str, score: object) -> dict[str, object]:
        return {"grading": {"state": state, "score": score}}
    entries = [entry("Graded", s) for s in (0, 3.5, 4, 10, 10, 12, -1)] + \
        [entry("Failed", 5), entry("Queued", None), entry("Graded", True), {"grading": None}]
    histogram = score_histogram(entries, 10.0)
    assert histogram is not None
    assert [b.count for b in histogram.bins] == [2, 0, 0, 1, 1, 0, 0, 0, 0, 3]
    assert [b.width for b in histogram.bins][:4] == [133, 0, 0, 67] and histogram.bins[9].width == 200
    assert histogram.graded == 7 and histogram.median == 4
    assert histogram.bins[0].words == "0 to 1 (below 1)" and histogram.bins[9].words == "9 to 10"
    assert histogram.words == "7 copies graded: mean 5.5, median 4 of 10"
    assert score_histogram(entries, None) is None and score_histogram([entry("Failed", 1)], 10.0) is None
