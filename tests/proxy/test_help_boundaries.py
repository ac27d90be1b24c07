"""The boundaries of help grants, each as the attack it stops: staff of another course, a student
who did not ask, instructors without the course's leave, assistants ever without a request, a
removed assistant, a student trying to obtain or end someone's grant, a grant's course on a
host another course shares, and a grant that runs out with a terminal open. Real gateway, web
UI, Redis and control plane (help_support.py).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from aiohttp import WSMsgType
from aiohttp.test_utils import TestServer

from tests.support import eventually
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import NAMESPACES, KubeClient

from .conftest import EchoFactory, GatewayFactory, InternalOf, World
from .help_support import HTML, Lab, make_course, origin_url, start_lab, text

ALICE = origin_url("alice")
DB_HOST = "db.test"  # course B's Template host: alice is a student there too


@pytest.fixture
async def course_b(kube: KubeClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACES, None, name)


@pytest.fixture
async def lab(kube: KubeClient, namespace: str, course_b: str, redis_url: str, world: World,
              echo_factory: EchoFactory, gateway_factory: GatewayFactory) -> AsyncIterator[Lab]:
    servers: list[TestServer] = []
    try:
        # Course B: its own staff (sam), its own Template on db.test, alice as a student.
        await make_course(kube, course_b, instructors="prof", assistants="sam")
        other = World(kube, course_b)
        await other.template("db", host=DB_HOST)
        echo = await echo_factory("alice-db")
        await other.environment("db", "alice", echo)
        yield await start_lab(kube=kube, namespace=namespace, redis_url=redis_url, world=world,
                              echo_factory=echo_factory, gateway_factory=gateway_factory, servers=servers,
                              also_watch=(course_b,))
    finally:
        for server in servers:
            await server.close()


async def grants(lab: Lab, course: str | None = None) -> list[Any]:
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        return await GrantStore(client).live_in(course or lab.namespace)
    finally:
        await client.aclose()


async def test_staff_of_one_course_reach_nothing_in_another(lab: Lab, course_b: str) -> None:
    await lab.ask("alice", "help")
    assert (await lab.join("tina", "alice")).status == 303
    # tina is no staff of course B: its pages and its Join are "no such course" to her.
    assert (await lab.get("tina", f"/courses/{course_b}")).status == 404
    assert (await lab.post("tina", f"/courses/{course_b}/help/join", {"student": "alice"},
                           token_from=f"/courses/{lab.namespace}")).status == 404
    # Her grant is for alice in this course: alice's environment of course B stays closed.
    refused = await lab.handoff("tina", origin_url("alice", DB_HOST))
    assert refused.status == 403 and "This is alice's environment" in await text(refused)
    cookie = await lab.origin_cookie("tina", ALICE)
    other = await lab.on_origin(origin_url("alice", DB_HOST), cookie, "/", **HTML)
    assert other.status == 403
    assert await grants(lab, course_b) == []


async def test_a_student_who_did_not_ask_cannot_be_joined(lab: Lab) -> None:
    refused = await lab.join("tina", "bob")
    assert refused.status == 403 and "bob has not asked for help" in await text(refused)
    assert (await lab.join("teacher", "bob")).status == 403  # on-request: instructors too
    assert await grants(lab) == []
    assert (await lab.handoff("tina", origin_url("bob"))).status == 403
    # Asking, then taking it back, leaves nothing to join either.
    await lab.ask("bob", "never mind")
    taken_back = await lab.post("bob", "/me/help/cancel", {"course": lab.namespace})
    assert taken_back.status == 303
    assert (await lab.join("tina", "bob")).status == 403


async def test_instructors_open_anyone_only_where_the_course_allows_and_assistants_never(
        lab: Lab, kube: KubeClient) -> None:
    dashboard = await lab.page("teacher", f"/courses/{lab.namespace}")
    assert "Open as staff" not in dashboard
    await kube.merge_patch(NAMESPACES, None, lab.namespace, {"metadata": {"annotations": {
        "userland.dev/staff-access": "instructors"}}})

    async def offered() -> bool:
        return "Open as staff" in await lab.page("teacher", f"/courses/{lab.namespace}")
    await eventually(offered, timeout=20)
    assert "Open as staff" not in await lab.page("tina", f"/courses/{lab.namespace}")
    # An assistant, never without a request.
    assert (await lab.join("tina", "bob")).status == 403
    opened = await lab.join("teacher", "bob")
    assert opened.status == 303
    [grant] = await grants(lab)
    assert (grant.staff, grant.student, grant.basis) == ("teacher", "bob", "instructors")
    assert grant.role == "instructor"
    cookie = await lab.origin_cookie("teacher", origin_url("bob"))
    assert (await lab.on_origin(origin_url("bob"), cookie, "/")).status == 200
    # bob sees it, like any grant.
    assert "<strong>teacher</strong> (instructor) can open your environments" in await lab.page("bob", "/me")
    # The course goes back to on-request: a grant made without a request ends with it.
    await kube.merge_patch(NAMESPACES, None, lab.namespace, {"metadata": {"annotations": {
        "userland.dev/staff-access": "on-request"}}})

    async def refused() -> bool:
        try:
            return (await lab.on_origin(origin_url("bob"), cookie, "/")).status == 401
        except aiohttp.ServerDisconnectedError:
            # A request let in by the gateway's cached session just as the grant ended has its
            # connection closed (proxy/live.py): the grant is ending, not yet refused by the
            # cache. Ask again; only a 401 answers the question.
            return False
    await eventually(refused, timeout=30)
    assert await grants(lab) == []


async def test_a_removed_assistant_loses_access_and_their_terminal(lab: Lab, kube: KubeClient) -> None:
    await lab.ask("alice")
    assert (await lab.join("tina", "alice")).status == 303
    cookie = await lab.origin_cookie("tina", ALICE)
    ws = await lab.websocket(ALICE, cookie)
    await ws.send_str("ping")
    assert (await ws.receive()).data == "alice-upstream:ping"
    await kube.merge_patch(NAMESPACES, None, lab.namespace, {"metadata": {"annotations": {
        "userland.dev/assistants": ""}}})
    closed = await ws.receive(timeout=30)
    assert closed.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR)
    refused = await lab.on_origin(ALICE, cookie, "/", **HTML)
    assert refused.status == 403 and "has ended" in await text(refused)
    assert await grants(lab) == []
    audit = await lab.page("teacher", f"/courses/{lab.namespace}/audit")
    assert "ended: no longer course staff" in audit


async def test_a_student_can_neither_obtain_nor_end_a_grant(lab: Lab) -> None:
    await lab.ask("alice")
    # bob (a student) and mallory (signed in, no course at all) find no course to join from.
    for login in ("bob", "mallory"):
        tried = await lab.post(login, f"/courses/{lab.namespace}/help/join", {"student": "alice"},
                               token_from=None)
        assert tried.status == 404
    assert (await lab.join("tina", "alice")).status == 303
    [grant] = await grants(lab)
    # bob posts alice's grant id to "end access" (he cannot know it; say he guessed): nothing ends.
    assert (await lab.post("bob", "/me/help/end", {"course": lab.namespace, "grant": grant.id})).status == 303
    assert [g.id for g in await grants(lab)] == [grant.id]
    # Nor can an assistant end another's access (instructors can).
    await lab.sign_in("sam")  # an assistant of course B only
    assert (await lab.post("sam", f"/courses/{lab.namespace}/help/done", {"grant": grant.id},
                           token_from=None)).status == 404
    # bob's own request, session or cookie never opens alice's origin.
    assert (await lab.handoff("bob", ALICE)).status == 403


async def test_help_forms_need_the_platforms_own_origin_and_token(lab: Lab) -> None:
    await lab.ask("alice")
    headers = {**lab.platform("tina")}
    no_token = await lab.gw.post(f"/courses/{lab.namespace}/help/join", headers=headers,
                                 data={"student": "alice"}, allow_redirects=False)
    assert no_token.status == 403
    from_alice = await lab.post("tina", f"/courses/{lab.namespace}/help/join", {"student": "alice"},
                                token_from=f"/courses/{lab.namespace}", origin=ALICE)
    assert from_alice.status == 403  # alice's page posting it in tina's browser
    assert await grants(lab) == []


async def test_a_grant_that_runs_out_closes_the_terminal_and_refuses_what_follows(
        lab: Lab, internal_of: InternalOf) -> None:
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        # Made as the web UI makes one, but for a few seconds (the course limit is at least 5 min).
        grant, _ = await GrantStore(client).create(course=lab.namespace, student="alice", staff="tina",
                                                   role="assistant", basis="request", seconds=4)
    finally:
        await client.aclose()
    cookie = await lab.origin_cookie("tina", ALICE)
    ws = await lab.websocket(ALICE, cookie)
    await ws.send_str("ping")
    assert (await ws.receive()).data == "alice-upstream:ping"
    closed = await ws.receive(timeout=30)
    assert closed.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR)
    assert time.time() >= grant.expires - 0.5  # closed because it ran out, not before
    metrics = await (await (await internal_of(lab.gw)).get("/metrics")).text()
    closed_line = r'^userland_gateway_help_connections_closed_total\{reason="expired",worker="[^"]*"\} 1\.0$'
    assert re.search(closed_line, metrics, re.M), metrics
    refused = await lab.on_origin(ALICE, cookie, "/", **HTML)
    assert refused.status == 403 and "has ended" in await text(refused)
    at = datetime.fromtimestamp(grant.expires, UTC).strftime("%H:%M")
    assert f"Your time to help ran out at {at} UTC." in await text(refused)
    assert (await lab.handoff("tina", ALICE)).status == 403
