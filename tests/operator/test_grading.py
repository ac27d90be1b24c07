"""Grading end to end: the operator, the local runner running its grading Pods, a real git server
and the assignment store, on the real control plane (docs/grading.md).

Real: kube-apiserver, etcd and the controllers; the operator (`Controller`, in this process); the
runner (every Pod a local process, every volume a folder); git's own http-backend; the store over
HTTP; the project's sample autograder (tests/data/autograders/python) run by the grading Pods.
alice's copy is right, bob's wrong, carol's hangs: two scores and "timed out after 10 s".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import generate_latest

from tests.operator.test_assignments import Course, _equal, course, template, userland
from tests.support import MUST_COMPLETE, eventually
from tests.support.coursework import INTERNAL
from userland.platform.clients.kube import ASSIGNMENTS, PODS
from userland.platform.model import naming
from userland.platform.model.checks import check_annotation
from userland.platform.model.coursework import round_id
from userland.platform.model.gradescope import Results, parse_results
from userland.platform.model.objects import rfc3339

__all__ = ["course"]
JSON = dict[str, Any]
DATA = Path(__file__).resolve().parents[1] / "data"
TIME_LIMIT = 10


def repository() -> dict[str, str]:
    """The starter (handed out) and, beside it, the tests (never handed out)."""
    files = {"week1/calculator.py": "def add(a, b):\n    raise NotImplementedError\n"}
    for path in (DATA / "autograders" / "python").iterdir():
        files[f"grading/{path.name}"] = path.read_text()
    # The first case waits long enough for a hanging copy to pass the grader's own time limit.
    files["grading/cases.json"] = files["grading/cases.json"].replace(
        '"points": 2,\n   "visibility": "visible"}',
        '"points": 2,\n   "visibility": "visible", "timeout": 30}', 1)
    return files


async def gradings(course: Course) -> dict[str, JSON]:
    return {k: e.get("grading") or {} for k, e in (await course.students()).items()}


async def settled(course: Course, count: int) -> dict[str, JSON] | None:
    found = await gradings(course)
    done = {k: g for k, g in found.items() if g.get("state") in ("Graded", "Failed")}
    return found if len(done) == count else None


async def grading_pods(course: Course) -> list[JSON]:
    pods = (await course.kube.list(PODS, course.ns, label_selector=f"{naming.LABEL_WORK}=grade"))["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def test_two_copies_graded_and_a_hanging_one_timed_out(course: Course) -> None:
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"),
                     userland("carol", "lab"))
    files = repository()
    assert '"timeout": 30' in files["grading/cases.json"]
    course.git.repo("course", files)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"},
                            due="2099-01-01T00:00:00Z", returnFeedback=True,
                            grades={"carol": {"grade": "5/10", "comment": "Marked by hand: it hangs"}},
                            grader={"image": "course/grader:1", "tests": {"path": "grading"}, "maxScore": 10,
                                    "timeLimit": f"{TIME_LIMIT}s"})
    wanted = {"lab/alice": "HandedOut", "lab/bob": "HandedOut", "lab/carol": "HandedOut"}
    await eventually(lambda: _equal(course.states(), wanted), timeout=MUST_COMPLETE)
    # The tests are never handed out: only the starter folder is.
    assert not (course.folder("lab", "alice") / "cases.json").exists()
    for login, submission in (("alice", "right"), ("bob", "wrong"), ("carol", "hang")):
        code = (DATA / "submissions" / submission / "calculator.py").read_text()
        (course.folder("lab", login) / "calculator.py").write_text(code)
    # The deadline is now: each copy is taken, then graded.
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"spec": {"due": "2020-01-01T00:00:00Z"}})
    found = await eventually(lambda: settled(course, 3), timeout=MUST_COMPLETE)
    assert found["lab/alice"]["state"] == "Graded" and found["lab/alice"]["score"] == 10, found
    assert found["lab/bob"]["state"] == "Graded" and found["lab/bob"]["score"] == 4, found
    # run_autograder's exit status, as docs/grading.md lists it (0: it ran to its end).
    assert (found["lab/alice"]["exitStatus"], found["lab/bob"]["exitStatus"]) == (0, 0), found
    assert found["lab/carol"] == {**found["lab/carol"], "state": "Failed", "reason": "TimedOut",
                                  "message": f"timed out after {TIME_LIMIT} s"}
    status = await course.status()
    assert status["graded"] == "2/3"
    assert status["grading"]["graded"] == 2 and status["grading"]["failed"] == 1
    condition = next(c for c in status["conditions"] if c["type"] == "Grading")
    assert condition["status"] == "False" and condition["reason"] == "GradingFailed"
    assert "timed out after 10 s" in condition["message"]
    # The whole results are at the store, in Gradescope's shape.
    uid = await course.uid()
    bob = await course.store.grading_results(course.ns, "week1", uid, "lab", "bob")
    assert bob is not None
    results = parse_results(str.encode(__import__("json").dumps(bob["results"])))
    assert isinstance(results, Results)
    assert {t.name: t.score for t in results.tests}["multiply(4, 5)"] == 0
    # No grading Pod is left holding a slot.
    await eventually(lambda: _no_pods(course), timeout=MUST_COMPLETE)
    # Metrics: the store counts each outcome once; the operator times each grader that ended.
    store_metrics = await _store_metrics(course)
    assert f'userland_grading_results_total{{course="{course.ns}",kind="grade",outcome="graded"}} 2.0' \
        in store_metrics
    assert f'userland_grading_results_total{{course="{course.ns}",kind="grade",outcome="TimedOut"}} 1.0' \
        in store_metrics
    operator_metrics = generate_latest(course.controller.metrics.registry).decode()
    assert f'userland_grading_duration_seconds_count{{course="{course.ns}"}} 2.0' in operator_metrics
    # The score is the grade returned to the student, unless staff set one by hand (which wins).
    assert found["lab/carol"]["manualGrade"] == "5/10" and "manualGrade" not in found["lab/alice"]

    def returned(login: str) -> str | None:
        path = course.folder("lab", login) / "feedback" / "FEEDBACK.md"
        return path.read_text() if path.exists() else None
    assert "10/10" in await eventually(lambda: returned("alice"), timeout=MUST_COMPLETE)
    assert "4/10" in await eventually(lambda: returned("bob"), timeout=MUST_COMPLETE)
    assert "5/10" in await eventually(lambda: returned("carol"), timeout=MUST_COMPLETE)

    # Graded once: nothing is run again for the same copy and tests ...
    before = {k: g.get("at") for k, g in (await gradings(course)).items()}
    # ... until staff ask for a regrade of one student.
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_REGRADE: f"{rfc3339()} bob"}}})

    async def regraded() -> dict[str, JSON] | None:
        now = await gradings(course)
        bob = now["lab/bob"]
        return now if bob.get("at") != before["lab/bob"] and bob.get("state") == "Graded" else None
    after = await eventually(regraded, timeout=MUST_COMPLETE)
    assert after["lab/bob"]["score"] == 4
    assert after["lab/alice"].get("at") == before["lab/alice"]


async def _store_metrics(course: Course) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{INTERNAL[course.store.url]}/metrics") as answer:
        return await answer.text()


async def _no_pods(course: Course) -> bool:
    return not await grading_pods(course)


async def test_an_invalid_grader_is_said_and_hand_out_goes_on(course: Course) -> None:
    await course.add(template("lab"), userland("alice", "lab"))
    course.git.repo("course", repository())
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"},
                            grader={"image": "course/grader:1", "tests": {"path": "week1/tests"},
                                    "maxScore": 10})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)

    async def condition() -> JSON | None:
        found = [c for c in (await course.status()).get("conditions") or [] if c["type"] == "Grading"]
        return found[0] if found else None
    said = await eventually(condition, timeout=MUST_COMPLETE)
    assert said["status"] == "False" and said["reason"] == "InvalidGrader"
    assert "overlaps the folder handed out to students" in said["message"]


async def test_check_my_work_runs_the_visible_tests_on_the_folder_now_never_a_grade(course: Course) -> None:
    """Check my work: alice asks twice (a mistake, then fixed), each run on her folder as it is at
    that moment; the status says how many visible tests passed, never a score, and nothing of it
    is a grade. bob's ask dated after his deadline is refused, and bob is never run."""
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", repository())
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"},
                            due="2099-01-01T00:00:00Z",
                            grader={"image": "course/grader:1", "tests": {"path": "grading"}, "maxScore": 10,
                                    "timeLimit": f"{TIME_LIMIT}s"})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut", "lab/bob": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    right = (DATA / "submissions" / "right" / "calculator.py").read_text()
    wrong_add = right.replace("return a + b", "return a - b")
    (course.folder("lab", "alice") / "calculator.py").write_text(wrong_add)

    async def ask(login: str, at: datetime) -> str:
        key, value = check_annotation(login, "lab", at)
        await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1",
                                      {"metadata": {"annotations": {key: value}}})
        return round_id(at)

    async def check_of(login: str, asked: str) -> JSON | None:
        entry = (await course.students()).get(f"lab/{login}") or {}
        found = entry.get("check") or {}
        return found if found.get("asked") == asked and found.get("state") in ("Checked", "Failed") else None

    first = await ask("alice", datetime.now(UTC))
    found = await eventually(lambda: check_of("alice", first), timeout=MUST_COMPLETE)
    assert found["state"] == "Checked" and found["visible"] == 2 and found["passed"] == 0, found
    assert "score" not in found
    # Fixed, and checked again: the folder as it is now.
    (course.folder("lab", "alice") / "calculator.py").write_text(right)
    second = await ask("alice", datetime.now(UTC) + timedelta(seconds=1))
    found = await eventually(lambda: check_of("alice", second), timeout=MUST_COMPLETE)
    assert found["state"] == "Checked" and found["passed"] == 2, found
    # The store keeps every test's result (hidden ones too: the web UI shows the visible ones).
    uid = await course.uid()
    stored = await course.store.grading_results(course.ns, "week1", uid, "lab", "alice", check=True)
    assert stored is not None and len(stored["results"]["tests"]) == 5
    assert f'userland_grading_results_total{{course="{course.ns}",kind="check",outcome="graded"}} 2.0' \
        in await _store_metrics(course)
    # Never a grade: no grading, nothing graded at the store, no copy taken.
    assert await course.store.grading_results(course.ns, "week1", uid, "lab", "alice") is None
    alice = (await course.students())["lab/alice"]
    assert "grading" not in alice and "collected" not in alice, alice
    # An ask dated at or after the student's deadline is refused, whoever wrote it.
    late = await ask("bob", datetime(2099, 1, 1, tzinfo=UTC))
    refused = await eventually(lambda: check_of("bob", late), timeout=MUST_COMPLETE)
    assert refused["state"] == "Failed" and refused["reason"] == "AfterDeadline", refused
    pods = (await course.kube.list(PODS, course.ns, label_selector=f"{naming.LABEL_WORK}=check"))["items"]
    assert not [p for p in pods if "lab/bob" in p["metadata"]["annotations"].get(naming.ANNOTATION_JOB, "")]
