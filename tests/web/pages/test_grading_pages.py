"""Grading in the web UI (docs/grading.md): the teacher's table, a student's full results for
staff, the regrade buttons, the CSV, and a student's own results on /me within the visibility rules.

Real: the web UI over HTTP as its own ServiceAccount, the control plane, Redis, the assignment
store over HTTP; the copies put there by the collection worker's own code and the results by the
grading Pod's own report step (coursework/grading_work.py). The operator is not running: the
status is written as it writes it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.coursework import STORE_SECRET
from tests.web.pages.support import ASSISTANT, INSTRUCTOR, AppFactory
from tests.web.pages.test_assignment_pages import (
    DUE,
    ROUND,
    assignment_body,
    collect_into_store,
    git,
    store_url,
    teacher_in,
    wait_cached,
    write_status,
)
from userland.coursework.grading_work import run_report
from userland.coursework.worker import StoreForWorker
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient
from userland.platform.model import naming
from userland.platform.model.coursework import Job, JobScope, Member, job_token, round_id
from userland.platform.model.models import parse_time

__all__ = ["git", "store_url"]
JSON = dict[str, Any]
GRADER = {"image": "course/grader:1", "tests": {"repository": {"url": "https://git.example.edu/c/t.git"}},
          "maxScore": 10}
RESULTS = {"tests": [
    {"name": "add works", "score": 2, "max_score": 2, "output": "<b>passed</b>", "visibility": "visible"},
    {"name": "multiply after the deadline", "score": 0, "max_score": 3, "visibility": "after_due_date"},
    {"name": "divide once returned", "score": 2, "max_score": 2, "visibility": "after_published"},
    {"name": "secret edge case", "score": 0, "max_score": 3, "visibility": "hidden",
     "output": "expected 0 for multiply(0, 9)"}]}


async def report(store: str, tmp_path: Path, namespace: str, uid: str, login: str, results: JSON) -> None:
    """What a grading Pod's report step sends, by its own code, for this student's copy."""
    folder = tmp_path / f"grading-{login}"
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "results.json").write_text(json.dumps(results))
    scope = JobScope(kind="grade", namespace=namespace, assignment="week1",
                     members=(Member(login, "lab", str(folder / "submission")),),
                     expires=int(time.time()) + 600, round=ROUND, source="tests-key", uid=uid)
    job = Job(scope=scope, path="/autograder")
    async with aiohttp.ClientSession() as session:
        assert await run_report(job, StoreForWorker(store, job, job_token(STORE_SECRET, scope), session)) == 0


def graded(login: str, **entry: Any) -> JSON:
    receipt = {"round": DUE, "takenAt": DUE, "sha256": "3f2a9c01" + "0" * 56, "files": 1, "bytes": 10,
               "late": False}
    return {"user": login, "template": "lab", "state": "HandedOut", "deadline": DUE, "collected": receipt,
            "grading": entry}


async def test_the_teacher_sees_scores_failures_and_full_results_and_regrades(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, tmp_path: Path) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    created = await kube.create(ASSIGNMENTS, namespace, assignment_body(
        grader=GRADER, grades={"carol": {"grade": "8/10"}}))
    uid = created["metadata"]["uid"]
    await collect_into_store(store_url, tmp_path, namespace, uid, {
        "alice": {"calculator.py": "x\n"}, "bob": {"calculator.py": "y\n"},
        "carol": {"calculator.py": "z\n"}})
    await report(store_url, tmp_path, namespace, uid, "alice", RESULTS)
    await write_status(kube, namespace, [
        graded("alice", state="Graded", score=4.0, round=ROUND),
        graded("bob", state="Failed", reason="TimedOut", message="timed out after 60 s"),
        graded("carol", state="Graded", score=6.0, manualGrade="8/10"),
        {"user": "dave", "template": "lab", "state": "HandedOut",
         "grading": {"state": "Queued", "position": 1, "estimatedAt": "2026-12-08T00:12:00Z"}}],
        graded="2/4", grading={"maxScore": 10, "graded": 2, "failed": 1, "queued": 1, "running": 0})
    teacher = as_user(INSTRUCTOR)
    base = f"/courses/{namespace}/assignments/week1"
    page = await wait_cached(teacher, base, "timed out after 60 s")
    for words in ('<span class="score">4/10</span>', "not graded", "queued",
                  "number 1 in line, graded by about 00:12 UTC",
                  "the grade set by hand below wins", "Regrade everyone"):
        assert words in page, words
    # The score histogram: server-rendered bars (SVG sized by the server) and its text.
    histogram = page[page.index('id="score-histogram"'):page.index("<h2>Students</h2>")]
    assert "2 copies graded: mean 5, median 5 of 10" in histogram
    rows = re.findall(r'<th scope="row">([^<]+)</th>\s*<td><svg[^>]*><rect class="bar" x="0" y="1" '
                      r'width="(\d+)"[^>]*></rect></svg></td>\s*<td class="count">(\d+)</td>', histogram)
    assert len(rows) == 10
    assert ("4 to 5 (below 5)", "200", "1") in rows and ("6 to 7 (below 7)", "200", "1") in rows
    assert ("9 to 10", "0", "0") in rows and "style=" not in histogram
    # Staff see every test, the hidden one too, with its output as text.
    status, page = await teacher.get(f"{base}/students/alice/results")
    assert status == 200
    assert "secret edge case" in page and "expected 0 for multiply(0, 9)" in page and ">never<" in page
    assert "&lt;b&gt;passed&lt;/b&gt;" in page and "<b>passed</b>" not in page  # never rendered
    # The CSV carries the grader's score beside the grade set by hand.
    status, text = await teacher.get(f"{base}/grades.csv")
    lines = text.lstrip("\ufeff").splitlines()
    assert lines[0].endswith(",grade,comment,autograded")
    assert lines[1].startswith("alice,") and lines[1].endswith(",,,4/10")
    assert lines[2].endswith(",not graded: timed out after 60 s")
    assert lines[3].endswith(",8/10,,6/10")
    # Regrade: everyone from the table, one student from their page; audited; an assistant may not.
    assert (await teacher.post(f"{base}/actions", {"action": "regrade"}))[0] == 303
    obj = await kube.get(ASSIGNMENTS, namespace, "week1")
    assert len(obj["metadata"]["annotations"][naming.ANNOTATION_REGRADE].split()) == 1
    assert (await teacher.post(f"{base}/students/bob/regrade", {}))[0] == 303
    obj = await kube.get(ASSIGNMENTS, namespace, "week1")
    assert obj["metadata"]["annotations"][naming.ANNOTATION_REGRADE].endswith(" bob")
    assert (await teacher.post(f"{base}/students/zed/regrade", {}))[0] == 404
    assert (await as_user(ASSISTANT).post(f"{base}/students/bob/regrade", {}))[0] == 403
    audit = await wait_cached(teacher, f"/courses/{namespace}/audit", "Asked for a regrade")
    assert "regrading bob" in audit


async def test_a_student_sees_only_what_the_visibility_rules_allow(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, tmp_path: Path) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    created = await kube.create(ASSIGNMENTS, namespace, assignment_body(grader=GRADER))
    uid = created["metadata"]["uid"]
    await collect_into_store(store_url, tmp_path, namespace, uid, {"alice": {"calculator.py": "x\n"},
                                                                   "bob": {"calculator.py": "y\n"}})
    await report(store_url, tmp_path, namespace, uid, "alice", RESULTS)
    future = "2099-01-01T00:00:00Z"
    await write_status(kube, namespace, [
        {**graded("alice", state="Graded", score=4.0), "deadline": future},
        graded("bob", state="Failed", reason="TimedOut", message="timed out after 60 s: cases.json line 4")],
        grading={"maxScore": 10})
    alice = as_user("alice")
    page = await wait_cached(alice, "/me", "See your results")
    assert "Automatic grading: graded" in page
    # Before her deadline, unpublished: the visible test only, and no total.
    status, page = await alice.get(f"/me/results/{namespace}/week1/lab")
    assert status == 200
    assert "add works" in page and "&lt;b&gt;passed&lt;/b&gt;" in page
    for hidden in ("multiply after the deadline", "divide once returned", "secret edge case",
                   "multiply(0, 9)", "4/10"):
        assert hidden not in page, hidden
    assert "3 more tests are graded and not shown to you now" in page
    # Returned (published) and past her deadline: all but the hidden one, and the total.
    await kube.merge_patch(ASSIGNMENTS, namespace, "week1", {"spec": {"returnFeedback": True}})
    await write_status(kube, namespace, [graded("alice", state="Graded", score=4.0)],
                       grading={"maxScore": 10})

    async def published() -> str | None:
        status, text = await alice.get(f"/me/results/{namespace}/week1/lab")
        return text if status == 200 and "4/10" in text else None
    deadline = time.monotonic() + 10
    while (page := await published()) is None:
        assert time.monotonic() < deadline
        await __import__("asyncio").sleep(0.05)
    assert "multiply after the deadline" in page and "divide once returned" in page
    assert "secret edge case" not in page and "multiply(0, 9)" not in page
    # Bob reads that his work could not be graded, never the harness's words; nobody reads another's.
    await write_status(kube, namespace, [
        graded("alice", state="Graded", score=4.0),
        graded("bob", state="Failed", reason="TimedOut", message="timed out after 60 s: cases.json line 4")],
        grading={"maxScore": 10})
    bob = as_user("bob")
    status, page = await bob.get(f"/me/results/{namespace}/week1/lab")
    deadline = time.monotonic() + 10
    while status != 200:
        assert time.monotonic() < deadline
        status, page = await bob.get(f"/me/results/{namespace}/week1/lab")
    assert "could not be graded automatically" in page and "cases.json" not in page
    status, page = await as_user("mallory").get(f"/me/results/{namespace}/week1/lab")
    assert status == 404 and "add works" not in page


async def test_check_my_work_from_me_visible_tests_only_rate_limited_audited(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, tmp_path: Path) -> None:
    """Check my work on /me: the button before the deadline, the ask as an annotation (the operator
    runs it: tests/operator/test_grading.py), a second ask within the interval a 429, no ask
    after the deadline, without the form's token, or for an environment that is not one's own;
    the results the visible tests only; audited."""
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    created = await kube.create(ASSIGNMENTS, namespace, assignment_body(
        grader=GRADER, due="2099-01-01T00:00:00Z", extensions={"bob": "2020-01-01T00:00:00Z"}))
    uid = created["metadata"]["uid"]
    await write_status(kube, namespace, [
        {"user": "alice", "template": "lab", "state": "HandedOut", "deadline": "2099-01-01T00:00:00Z"},
        {"user": "bob", "template": "lab", "state": "HandedOut", "deadline": "2020-01-01T00:00:00Z"}])
    alice, bob, mallory = as_user("alice"), as_user("bob"), as_user("mallory")
    path = f"/me/check/{namespace}/week1/lab"
    # (/me lists every course's assignments: other tests' courses too.)
    page = await wait_cached(alice, "/me", f'action="{path}"')
    assert "It is not your grade" in page
    assert f'action="{path}"' not in await wait_cached(bob, "/me", f'data-live="work-{namespace}"')

    async def annotations() -> dict[str, str]:
        obj = await kube.get(ASSIGNMENTS, namespace, "week1")
        return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items()
                if k.startswith(naming.ANNOTATION_CHECK_PREFIX)}
    # A form from elsewhere (no token) changes nothing.
    assert (await alice.post(path, {}, csrf=None))[0] == 403
    assert await annotations() == {}
    status, _ = await alice.post(path, {})
    assert status == 303
    asked = (await annotations())[f"{naming.ANNOTATION_CHECK_PREFIX}alice"]
    assert asked.endswith(" lab")
    # Again at once: refused in words, with when to come back; nothing written.
    status, page = await alice.post(path, {})
    assert status == 429 and "You checked your work a moment ago" in page
    assert list(await annotations()) == [f"{naming.ANNOTATION_CHECK_PREFIX}alice"]
    # After the deadline, or for an environment that is not theirs: no ask.
    status, page = await bob.post(path, {})
    assert status == 403 and "The deadline has passed" in page
    assert (await mallory.post(path, {}))[0] == 404
    assert (await alice.post(f"/me/check/{namespace}/week1/vscode", {}))[0] == 404
    assert list(await annotations()) == [f"{naming.ANNOTATION_CHECK_PREFIX}alice"]
    audit = await wait_cached(as_user(INSTRUCTOR), f"/courses/{namespace}/audit", "Checked their work")
    assert "alice (Week 1)" in audit
    # The check's report, by the grading Pod's own report step, and the status the operator writes.
    moment = parse_time(asked.split()[0])
    assert moment is not None
    round_ = round_id(moment)
    folder = tmp_path / "check-alice"
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "results.json").write_text(json.dumps(RESULTS))
    scope = JobScope(kind="check", namespace=namespace, assignment="week1",
                     members=(Member("alice", "lab", str(folder / "submission")),),
                     expires=int(time.time()) + 600, round=round_, source="tests-key", uid=uid)
    job = Job(scope=scope, path="/autograder")
    async with aiohttp.ClientSession() as session:
        store = StoreForWorker(store_url, job, job_token(STORE_SECRET, scope), session)
        assert await run_report(job, store) == 0
    await write_status(kube, namespace, [
        {"user": "alice", "template": "lab", "state": "HandedOut", "deadline": "2099-01-01T00:00:00Z",
         "check": {"state": "Checked", "asked": round_, "visible": 1, "passed": 1}}])
    page = await wait_cached(alice, "/me", "Your work was checked: 1 of 1 visible test passed.")
    assert f'href="{path}"' in page
    status, page = await alice.get(path)
    assert status == 200 and "add works" in page and "&lt;b&gt;passed&lt;/b&gt;" in page
    for never in ("multiply after the deadline", "divide once returned", "secret edge case", "multiply(0, 9)",
                  "4/10"):
        assert never not in page, never
    # Never a grade: nothing graded at the store; nobody else reaches it.
    assert (await alice.get(f"/me/results/{namespace}/week1/lab"))[0] == 404
    assert (await bob.get(path))[0] == 404 and (await mallory.get(path))[0] == 404
