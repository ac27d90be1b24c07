# ruff: noqa: F811  (the fixtures imported from test_lti_sync are parameters here)
"""Grades back to the LMS gradebook from an Assignment, end to end.

Real: the LMS (lti1p3platform over aiohttp: its token endpoint, line items and scores), the
control plane with deploy/rbac/ applied, and the web UI (`create_app`) as its own
ServiceAccount: staff return the Assignment and change grades through its forms; the
passback's per-student state is read from the Assignment's status and its page; the scores are
read back from the LMS. The course, its LMS link and the tool's key come from
tests/web/test_lti_sync.py's fixtures.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import redis.asyncio

from tests.support import eventually
from tests.support.lti_services_platform import LtiServicesPlatform
from tests.support.waiting import MUST_COMPLETE
from tests.web.test_lti_sync import (  # noqa: F401  (fixtures)
    SYSTEM,
    TEMPLATE,
    Client,
    WebFactory,
    as_web,
    course,
    csrf,
    lms,
    member,
    rbac,
    signed,
    sync_as,
    tool_key,
    web_factory,
)
from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, KubeClient
from userland.platform.model import naming
from userland.platform.model.lti_links import course_links
from userland.web.lti_grades import pass_back_course
from userland.web.lti_sync import RosterSync
from userland.web.rules.lti_grades import ANNOTATION_LINE_ITEM

NAME = "week1"


async def linked_assignment(kube: KubeClient, namespace: str, grades: dict[str, str],
                            context: str = "c1") -> None:
    (link,) = course_links(await kube.get(NAMESPACES, None, namespace))
    annotation = json.dumps({"registration": link.registration, "context": context, "scoreMaximum": 10})
    await kube.create(ASSIGNMENTS, namespace, {
        "apiVersion": naming.API_VERSION, "kind": "Assignment",
        "metadata": {"name": NAME, "annotations": {ANNOTATION_LINE_ITEM: annotation}},
        "spec": {"title": "Week 1", "templates": [TEMPLATE], "path": "week1",
                 "source": {"url": "https://git.example.edu/c/w.git"},
                 "grades": {login: {"grade": grade} for login, grade in grades.items()}}})
    # Who receives it, as the operator writes it (no operator runs here).
    await kube.merge_patch(ASSIGNMENTS, namespace, NAME, {"status": {
        "students": [{"user": login} for login in sorted(grades)]}}, subresource="status")


async def passback(kube: KubeClient, namespace: str) -> dict[str, Any]:
    status = (await kube.get(ASSIGNMENTS, namespace, NAME)).get("status") or {}
    return dict((status.get("lti") or {}).get("students") or {})


def scores(lms: LtiServicesPlatform) -> dict[str, float]:
    (item,) = lms.line_items["c1"].values()
    return {user: score["scoreGiven"] for user, score in item.scores.items()}


async def act(web_ui: Client, namespace: str, path: str, **form: str) -> None:
    resp = await web_ui.post(f"/courses/{namespace}/assignments/{NAME}/{path}",
                             data={"csrf": csrf("teacher"), **form}, headers=signed("teacher"),
                             allow_redirects=False)
    assert resp.status == 303, await resp.text()


async def test_returned_grades_go_to_the_gradebook_once_per_value_and_say_where_they_stand(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, as_web: KubeClient, web_factory: WebFactory,
    redis_url: str,
) -> None:
    lms.rosters["c1"] = [member("s0"), member("s1"), member("s2")]
    web_ui = await web_factory(minutes=0)
    await sync_as(web_ui, course, "teacher")  # the students' environments carry their LMS ids
    await linked_assignment(kube, course, {"s0": "8", "s1": "9/10", "s2": "A-", "ghost": "5"})
    conn = redis.asyncio.Redis.from_url(redis_url)
    sync = RosterSync(as_web, conn, SYSTEM)
    # Not returned yet: nothing goes.
    await pass_back_course(sync, course)
    assert lms.score_posts == [] and await passback(kube, course) == {}

    await act(web_ui, course, "actions", action="return")

    async def sent() -> dict[str, Any] | None:
        states = await passback(kube, course)
        return states if states.get("s0", {}).get("state") == "sent" else None

    states = await eventually(sent, timeout=MUST_COMPLETE)
    assert {k: v["state"] for k, v in states.items()} == {"s0": "sent", "s1": "sent", "s2": "failed",
                                                          "ghost": "failed"}
    assert "not points" in states["s2"]["reason"]
    assert "does not know this student" in states["ghost"]["reason"]
    assert scores(lms) == {"s0": 8.0, "s1": 9.0}
    assert len(lms.created_line_items) == 1 and lms.created_line_items[0]["scoreMaximum"] == 10

    # Passes again, nothing changed: nothing posted again.
    posts = len(lms.score_posts)
    await pass_back_course(sync, course)
    await pass_back_course(sync, course)
    assert len(lms.score_posts) == posts and len(lms.created_line_items) == 1

    # A changed grade goes again, at once.
    await act(web_ui, course, "students/s0/grade", grade="7", comment="resubmitted")

    async def changed() -> bool:
        return scores(lms).get("s0") == 7.0 and (await passback(kube, course))["s0"]["points"] == 7

    await eventually(changed, timeout=MUST_COMPLETE)
    assert len(lms.score_posts) == posts + 1

    # The LMS is down: the changed grade waits, with the reason, and goes once it answers again.
    lms.faults.ags_down = 1000
    await act(web_ui, course, "students/s1/grade", grade="10")

    async def waiting() -> dict[str, Any] | None:
        s1 = (await passback(kube, course))["s1"]
        return s1 if s1["state"] == "pending" else None

    s1 = await eventually(waiting, timeout=MUST_COMPLETE)
    assert "Trying again in 30 seconds" in s1["reason"], s1
    assert scores(lms)["s1"] == 9.0
    lms.faults.ags_down = 0
    await asyncio.sleep(31)  # the backoff
    await pass_back_course(sync, course)
    assert (await passback(kube, course))["s1"]["state"] == "sent" and scores(lms)["s1"] == 10.0

    # The Assignment's page says where each student's grade stands.
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", await (await web_ui.get(
        f"/courses/{course}/assignments/{NAME}", headers=signed("teacher"))).text()))
    assert "LMS gradebook" in page and "2 sent" in page and "2 not sent" in page
    assert "s2 not sent The grade &#39;A-&#39; is not points" in page
    await conn.aclose()


async def test_a_column_in_an_lms_course_not_linked_here_is_refused(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, as_web: KubeClient, redis_url: str
) -> None:
    lms.rosters["c2"] = [member("s0")]
    await linked_assignment(kube, course, {"s0": "8"}, context="c2")
    await kube.merge_patch(ASSIGNMENTS, course, NAME, {"spec": {"returnFeedback": True}})
    conn = redis.asyncio.Redis.from_url(redis_url)
    await pass_back_course(RosterSync(as_web, conn, SYSTEM), course)
    await conn.aclose()
    status = (await kube.get(ASSIGNMENTS, course, NAME))["status"]["lti"]
    assert "not linked to this course" in status["error"]
    assert lms.score_posts == [] and lms.created_line_items == []
