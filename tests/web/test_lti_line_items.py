# ruff: noqa: F811  (the fixtures imported from test_lti_sync are parameters here)
"""An Assignment linked by a deep link finds its gradebook column when the LMS launches it.

Real: the LMS (lti1p3platform over aiohttp, tests/support/lti_services_platform.py: its token
endpoint and line items, checked per scope), the control plane with deploy/rbac/ applied and the
web UI's ServiceAccount. The column is the one the LMS made from the deep link's `lineItem`
(resourceId = the Assignment's uid, tag `userland`, its end date); the launch note is what the
gateway writes on that link's launch (auth/lti.py; tests/proxy/test_lti_deep_link.py checks the
gateway writes it). The course, its LMS link and the tool's key come from test_lti_sync's fixtures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from tests.support.lti_services_platform import LineItem, LtiServicesPlatform
from tests.web.test_lti_sync import (  # noqa: F401  (fixtures)
    SYSTEM,
    TEMPLATE,
    as_web,
    course,
    lms,
    rbac,
    tool_key,
)
from userland.auth.lti_store import LtiStore
from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, KubeClient
from userland.platform.model import keyspace, naming
from userland.platform.model.lti_links import course_links
from userland.web.lti_line_items import follow_launched
from userland.web.lti_sync import RosterSync
from userland.web.rules.lti_deep_link import line_item_annotation

NAME = "week1"


async def deep_linked(kube: KubeClient, namespace: str, lms: LtiServicesPlatform, *, context: str = "c1",
                      end: str | None = "2030-12-11T12:00:00Z") -> tuple[str, dict[str, Any]]:
    """The Assignment as the picker leaves it, and the column the LMS made from its deep link."""
    (link,) = course_links(await kube.get(NAMESPACES, None, namespace))
    obj = await kube.create(ASSIGNMENTS, namespace, {
        "apiVersion": naming.API_VERSION, "kind": "Assignment",
        "metadata": {"name": NAME, "annotations": {
            naming.ANNOTATION_LTI_LINE_ITEM: line_item_annotation(link.registration, context, 10, "Week 1")}},
        "spec": {"title": "Week 1", "templates": [TEMPLATE], "path": "week1",
                 "source": {"url": "https://git.example.edu/c/w.git"}, "due": "2030-12-07T23:59:00Z"}})
    body: dict[str, Any] = {"id": f"{lms.lineitems_url('c1')}/1", "label": "Week 1", "scoreMaximum": 10,
                            "resourceId": obj["metadata"]["uid"], "tag": "userland",
                            "resourceLinkId": "rl-1"}
    if end is not None:
        body["endDateTime"] = end
    lms.line_items.setdefault("c1", {})["1"] = LineItem(id=body["id"], body=body)
    return link.registration, body


async def note(redis_url: str, namespace: str, registration: str, context: str = "c1") -> None:
    conn = redis.asyncio.Redis.from_url(redis_url)
    await LtiStore(conn).note_assignment_launch(namespace, NAME, {
        "registration": registration, "context": context, "lineitem": ""})
    await conn.aclose()


@pytest.fixture
async def sync(as_web: KubeClient, redis_url: str) -> AsyncIterator[RosterSync]:
    """The web UI's LMS loop, as its ServiceAccount (its grade pass calls follow_launched)."""
    conn = redis.asyncio.Redis.from_url(redis_url)
    yield RosterSync(as_web, conn, SYSTEM)
    await conn.aclose()


async def test_a_launched_assignment_finds_its_column_and_follows_its_end_date(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, sync: RosterSync, redis_url: str
) -> None:
    registration, column = await deep_linked(kube, course, lms)
    # Not launched yet: nothing is asked of the LMS.
    assert await follow_launched(sync, course) == 0 and lms.service_requests == []
    await note(redis_url, course, registration)
    assert await follow_launched(sync, course) == 1
    obj = await kube.get(ASSIGNMENTS, course, NAME)
    assert obj["status"]["lti"]["lineItem"] == column["id"]
    assert obj["spec"]["due"] == "2030-12-11T12:00:00Z"  # the LMS's end date wins
    assert lms.created_line_items == []  # found by its resourceId, never made again
    (request,) = lms.service_requests
    assert request[0] == "GET" and f"resource_id={obj['metadata']['uid']}" in request[1]
    # Staff move the due date in Userland; a later launch keeps it while the LMS's date stays.
    await kube.merge_patch(ASSIGNMENTS, course, NAME, {"spec": {"due": "2030-12-20T09:00:00Z"}})
    await note(redis_url, course, registration)
    assert await follow_launched(sync, course) == 1
    assert (await kube.get(ASSIGNMENTS, course, NAME))["spec"]["due"] == "2030-12-20T09:00:00Z"
    # The LMS's end date changes: followed again.
    column["endDateTime"] = "2030-12-24T10:00:00Z"
    await note(redis_url, course, registration)
    await follow_launched(sync, course)
    assert (await kube.get(ASSIGNMENTS, course, NAME))["spec"]["due"] == "2030-12-24T10:00:00Z"


async def test_a_launch_from_another_lms_course_links_nothing(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, sync: RosterSync, redis_url: str
) -> None:
    registration, _ = await deep_linked(kube, course, lms)
    for who, context in (("other-registration", "c1"), (registration, "c2")):
        await note(redis_url, course, who, context)
        assert await follow_launched(sync, course) == 0
    obj = await kube.get(ASSIGNMENTS, course, NAME)
    assert "lti" not in (obj.get("status") or {}) and obj["spec"]["due"] == "2030-12-07T23:59:00Z"
    assert lms.service_requests == []
    assert await sync.redis.hgetall(keyspace.lti_assignment_launches_key(course)) == {}
