# ruff: noqa: F811  (the fixtures imported from test_lti_sync are parameters here)
"""Autograding's scores to the LMS gradebook, end to end (docs/grading.md, docs/lti-services.md).

Real: the LMS (lti1p3platform over aiohttp, tests/support/lti_services_platform.py), the control
plane with deploy/rbac/ applied, the web UI (`create_app`) as its own ServiceAccount, the operator
(`Controller`, in this process), the local runner running the grading Pods with the project's
sample autograder, git's http-backend and the store. The roster sync makes alice's, bob's and
carol's environments; the operator hands out, takes the copies at the deadline and grades them;
the web UI's watch sees each score and passes it back at once (its scheduled pass is an hour
away here, so nothing else could post it). The scores are read back from the LMS's results
service.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio

from tests.operator.support import OperatorRunner
from tests.operator.test_assignments import LEAD, Course, _equal, template
from tests.operator.test_grading import DATA, repository
from tests.support import MUST_COMPLETE, eventually
from tests.support.coursework import STORE_SECRET, git_server, store_server
from tests.support.lti_services_platform import LtiServicesPlatform
from tests.support.runner import running
from tests.web.test_lti_sync import (  # noqa: F401  (fixtures)
    SYSTEM,
    TEMPLATE,
    TOOL_KEY,
    WebFactory,
    as_web,
    course,
    lms,
    member,
    rbac,
    sync_as,
    tool_key,
    web_factory,
)
from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, TEMPLATES, KubeClient
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.clients.store_client import StoreClient
from userland.platform.model import naming
from userland.platform.model.lti_links import course_links
from userland.platform.model.lti_services_grades import RESULTS_TYPE, service_url
from userland.platform.model.lti_services_token import SCOPE_RESULT_READONLY, ServiceCredentials
from userland.platform.model.objects import rfc3339
from userland.web.lti_grades import pass_back_course
from userland.web.lti_sync import RosterSync
from userland.web.rules.lti_grades import ANNOTATION_LINE_ITEM

JSON = dict[str, Any]
COLUMN_POINTS = 20  # the gradebook column's maximum: the grader's 10 is scaled to it


@pytest.fixture
async def graded(course: str, kube: KubeClient, tmp_path: Path,
                 run_operator: OperatorRunner) -> AsyncIterator[Course]:
    """The LMS-linked course with the operator, the runner, git and the store."""
    # The course's Template, runnable by the local runner, with a home folder to hand out into.
    await kube.merge_patch(TEMPLATES, course, TEMPLATE, {"spec": template(TEMPLATE)["spec"]})
    (tmp_path / "run").mkdir()
    async with contextlib.AsyncExitStack() as stack:
        git = await stack.enter_async_context(git_server(tmp_path / "git"))
        store_url = await stack.enter_async_context(store_server(tmp_path / "store",
                                                                 git_urls=(git.url + "/",)))
        runner = await stack.enter_async_context(running(kube, course, tmp_path / "run"))
        controller = await stack.enter_async_context(run_operator(settings_extra={
            "store_url": store_url, "store_secret": STORE_SECRET, "collect_lead_seconds": LEAD}))
        store = StoreClient(store_url, STORE_SECRET, "web")
        stack.push_async_callback(store.close)
        yield Course(kube, course, git, store, runner, controller)


def held(lms: LtiServicesPlatform) -> dict[str, JSON]:
    """userId -> the Score the gradebook holds, of the one column."""
    (item,) = lms.line_items["c1"].values()
    return item.scores


def posts(lms: LtiServicesPlatform) -> Counter[str]:
    return Counter(str(score["userId"]) for score in lms.score_posts)


async def passback(kube: KubeClient, namespace: str) -> dict[str, JSON]:
    status = (await kube.get(ASSIGNMENTS, namespace, "week1")).get("status") or {}
    return dict((status.get("lti") or {}).get("students") or {})


async def test_the_graders_scores_go_to_the_gradebook_once_per_value_and_a_regrade_that_changes_one_again(
    lms: LtiServicesPlatform, graded: Course, kube: KubeClient, as_web: KubeClient, web_factory: WebFactory,
    redis_url: str,
) -> None:
    course = graded
    lms.rosters["c1"] = [member("alice"), member("bob"), member("carol")]
    # The scheduled pass runs at start and then in an hour: only the watch's trigger posts here.
    web_ui = await web_factory(minutes=0, lti_grade_seconds=3600.0)
    assert (await sync_as(web_ui, course.ns, "teacher")).status == 303  # their environments, with LMS ids
    course.git.repo("course", repository())
    (link,) = course_links(await kube.get(NAMESPACES, None, course.ns))
    await kube.create(ASSIGNMENTS, course.ns, {
        "apiVersion": naming.API_VERSION, "kind": "Assignment",
        "metadata": {"name": "week1", "annotations": {ANNOTATION_LINE_ITEM: json.dumps(
            {"registration": link.registration, "context": "c1", "scoreMaximum": COLUMN_POINTS})}},
        "spec": {"title": "Week 1", "templates": [TEMPLATE], "path": "week1",
                 "source": {"url": course.git.url_of("course"), "ref": "main", "subPath": "week1"},
                 "due": "2099-01-01T00:00:00Z", "returnFeedback": True,
                 # carol's copy is right, but staff graded her by hand: their grade wins.
                 "grades": {"carol": {"grade": "5/10", "comment": "Marked by hand"}},
                 "grader": {"image": "course/grader:1", "tests": {"path": "grading"}, "maxScore": 10,
                            "timeLimit": "30s"}}})
    wanted = {f"{TEMPLATE}/{login}": "HandedOut" for login in ("alice", "bob", "carol")}
    await eventually(lambda: _equal(course.states(), wanted), timeout=MUST_COMPLETE)
    for login, submission in (("alice", "right"), ("bob", "wrong"), ("carol", "right")):
        code = (DATA / "submissions" / submission / "calculator.py").read_text()
        (course.folder(TEMPLATE, login) / "calculator.py").write_text(code)
    # Nothing in the gradebook before anything is graded.
    assert lms.score_posts == []

    # The deadline is now: each copy is taken and graded, and each score goes to the gradebook.
    await kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"spec": {"due": "2020-01-01T00:00:00Z"}})

    async def in_gradebook(expected: dict[str, float]) -> dict[str, JSON] | None:
        scores = held(lms) if lms.line_items.get("c1") else {}
        return scores if {u: s["scoreGiven"] for u, s in scores.items()} == expected else None

    scores = await eventually(lambda: in_gradebook({"alice": 20.0, "bob": 8.0, "carol": 10.0}),
                              timeout=MUST_COMPLETE)
    # The comment is the tests' summary (the four tests shown once returned; never the hidden one).
    assert scores["alice"]["comment"] == "Graded automatically: 10/10. 4 of 4 tests passed."
    assert scores["bob"]["comment"] == "Graded automatically: 4/10. 2 of 4 tests passed."
    assert scores["carol"]["comment"] == "Marked by hand"  # the manual grade, not the grader's 10/10
    assert scores["alice"]["scoreMaximum"] == COLUMN_POINTS
    assert posts(lms) == {"alice": 1, "bob": 1, "carol": 1}
    states = await eventually(lambda: _all_sent(kube, course.ns), timeout=MUST_COMPLETE)
    assert states["bob"]["points"] == 8.0 and states["bob"]["sentPoints"] == 8.0

    # Passes again with nothing changed post nothing.
    conn = redis.asyncio.Redis.from_url(redis_url)
    sync = RosterSync(as_web, conn, SYSTEM)
    await pass_back_course(sync, course.ns)
    await pass_back_course(sync, course.ns)
    assert posts(lms) == {"alice": 1, "bob": 1, "carol": 1}

    # The teacher fixes the hidden test (bob's answer passes it now) and asks for a regrade of
    # everyone: every copy is graded again with the new tests. alice's score and summary are
    # the same (not posted again, though her copy had no score while it was being graded), bob's
    # went up (posted again, at once), carol's grade is still staff's.
    # (carol's score went out as staff's grade, which needs no grading: her copy may still be
    # being graded here. A fresh-clone run read her grading before it had a time.)
    async def all_graded() -> dict[str, JSON] | None:
        found = {k.split("/")[1]: e.get("grading") or {} for k, e in (await course.students()).items()}
        return found if all(g.get("state") == "Graded" and g.get("at") for g in found.values()) else None

    before = {login: grading["at"] for login, grading in
              (await eventually(all_graded, timeout=MUST_COMPLETE)).items()}
    assert sorted(before) == ["alice", "bob", "carol"]
    fixed = repository()
    fixed["grading/cases.json"] = fixed["grading/cases.json"].replace(
        '"call": "m.multiply(0, 9)", "expected": "0"', '"call": "m.multiply(2, 2)", "expected": "4"')
    assert fixed != repository()
    course.git.repo("course", fixed)
    await kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_REGRADE: rfc3339()}}})

    async def being_regraded() -> bool:
        grading = (await course.students())[f"{TEMPLATE}/alice"].get("grading") or {}
        return grading.get("state") != "Graded"

    await eventually(being_regraded, timeout=MUST_COMPLETE)
    # A pass while alice's copy has no score (the scheduled pass may come at any moment): what the
    # LMS has of hers stays known, so the same score coming back is not posted again.
    await pass_back_course(sync, course.ns)
    assert (await passback(kube, course.ns))["alice"]["sentPoints"] == 20.0

    async def regraded() -> dict[str, JSON] | None:
        found = {k.split("/")[1]: e.get("grading") or {} for k, e in (await course.students()).items()}
        done = all(found[login].get("at") != before[login] and found[login].get("state") == "Graded"
                   for login in before)
        return found if done else None

    after = await eventually(regraded, timeout=MUST_COMPLETE)
    assert (after["alice"]["score"], after["bob"]["score"], after["carol"]["score"]) == (10, 6, 10), after
    scores = await eventually(lambda: in_gradebook({"alice": 20.0, "bob": 12.0, "carol": 10.0}),
                              timeout=MUST_COMPLETE)
    assert scores["bob"]["comment"] == "Graded automatically: 6/10. 2 of 4 tests passed."
    await eventually(lambda: _all_sent(kube, course.ns), timeout=MUST_COMPLETE)
    await pass_back_course(sync, course.ns)
    assert posts(lms) == {"alice": 1, "bob": 2, "carol": 1}

    # What the LMS's own results service says (read with a token for results alone).
    async with aiohttp.ClientSession() as session:
        tokens = TokenClient(session, timeout=MUST_COMPLETE)
        creds = ServiceCredentials(client_id=lms.client_id, token_url=lms.token_url, key=TOOL_KEY)
        (item,) = lms.line_items["c1"].values()
        answer = await tokens.call(creds, {SCOPE_RESULT_READONLY}, "GET", service_url(item.id, "results"),
                                   accept=RESULTS_TYPE)
    results = {r["userId"]: (r["resultScore"], r["resultMaximum"]) for r in json.loads(answer.body)}
    assert results == {"alice": (20.0, 20), "bob": (12.0, 20), "carol": (10.0, 20)}
    await conn.aclose()


async def _all_sent(kube: KubeClient, namespace: str) -> dict[str, JSON] | None:
    states = await passback(kube, namespace)
    return states if {k: v.get("state") for k, v in states.items()} == dict.fromkeys(
        ("alice", "bob", "carol"), "sent") else None
