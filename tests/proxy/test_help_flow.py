"""Help in the lab, end to end over HTTP: a student asks, a member of staff joins and works in
the student's environment as themselves (signed), the student sees it and ends it, and every
way back in afterwards is refused. Real gateway, web UI, Redis and control plane (help_support.py).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from aiohttp import WSMsgType
from multidict import CIMultiDict

from tests.support import eventually
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import EVENTS, KubeClient
from userland.platform.model.identity import verify_identity

from .conftest import SECRET, EchoFactory, GatewayFactory, InternalOf, World
from .help_support import HTML, Lab, live_grants, origin_url, running_lab, text

ALICE = origin_url("alice")


@pytest.fixture
async def lab(kube: KubeClient, namespace: str, redis_url: str, world: World, echo_factory: EchoFactory,
              gateway_factory: GatewayFactory) -> AsyncIterator[Lab]:
    async with running_lab(kube=kube, namespace=namespace, redis_url=redis_url, world=world,
                           echo_factory=echo_factory, gateway_factory=gateway_factory) as started:
        yield started


async def test_alice_asks_tina_joins_works_as_herself_and_alice_ends_it(lab: Lab, kube: KubeClient,
                                                                      internal_of: InternalOf) -> None:
    # Before anyone asks, tina's way into alice's environment is the "not yours" page.
    refused = await lab.handoff("tina", ALICE)
    assert refused.status == 403 and "This is alice's environment" in await text(refused)

    asked = await lab.ask("alice", "my loop never ends")
    assert asked.status == 303
    me = await lab.page("alice", "/me")
    assert "You asked for help" in me and "my loop never ends" in me

    # The course's staff see her in the queue, with her message and a Join button.
    dashboard = await lab.page("tina", f"/courses/{lab.namespace}")
    assert 'data-student="alice"' in dashboard and "my loop never ends" in dashboard
    joined = await lab.join("tina", "alice")
    assert joined.status == 303 and joined.headers["Location"] == f"/courses/{lab.namespace}/help/alice"
    helping = await lab.page("tina", joined.headers["Location"])
    assert "Helping alice" in helping and f'href="{ALICE}/"' in helping
    # The request left the queue; she is listed as being helped, by tina.
    dashboard = await lab.page("tina", f"/courses/{lab.namespace}")
    assert "Nobody is waiting for help" in dashboard and 'data-staff="tina"' in dashboard

    # tina opens alice's environment: the environment is told who she is, signed.
    cookie = await lab.origin_cookie("tina", ALICE)
    seen = await lab.on_origin(ALICE, cookie, "/work")
    assert seen.status == 200
    headers = CIMultiDict((k, v) for k, v in (await seen.json())["headers"])
    assert (await seen.json())["upstream"] == "alice-upstream"
    who = verify_identity(headers, SECRET, audience="env")
    assert (who.login, who.owner, who.role) == ("tina", "alice", "assistant")
    ws = await lab.websocket(ALICE, cookie)
    await ws.send_str("whoami")
    assert json.loads((await ws.receive()).data) == {"upstream": "alice-upstream", "user": "tina"}

    # alice sees tina on /me, and ends it.
    me = await lab.page("alice", "/me")
    assert "<strong>tina</strong> (assistant) can open your environments" in me
    grant = (await live_grants(lab))[0]
    ended = await lab.post("alice", "/me/help/end", {"course": lab.namespace, "grant": grant.id})
    assert ended.status == 303

    # tina's open WebSocket is closed by the gateway, and nothing of hers gets in any more.
    closed = await ws.receive(timeout=30)
    reached = len(lab.echoes["alice"].requests)
    assert closed.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR)
    page = await lab.on_origin(ALICE, cookie, "/work", **HTML)
    assert page.status == 403 and "Your access to alice's environment has ended" in await text(page)
    # Who ended it, and when (the grant's record: the time as the gateway's pages say it, UTC).
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        record = await GrantStore(client).record(grant.id)
    finally:
        await client.aclose()
    assert record is not None and record.ended is not None and record.ended_by == "alice"
    at = datetime.fromtimestamp(record.ended, UTC).strftime("%H:%M")
    assert f"alice ended your access at {at} UTC." in await text(page)
    assert page.headers["Clear-Site-Data"] == '"cache", "storage", "executionContexts"'
    assert page.cookies["userland_origin"].value == ""  # the origin's cookie is deleted
    background = await lab.on_origin(ALICE, cookie, "/api/x")
    assert background.status == 401 and "Clear-Site-Data" in background.headers
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await lab.websocket(ALICE, cookie)
    assert err.value.status == 401
    again = await lab.handoff("tina", ALICE)
    assert again.status == 403
    assert len(lab.echoes["alice"].requests) == reached  # none of it reached her environment

    # The gateway counted them: let in, and refused because the grant had ended.
    metrics = await (await (await internal_of(lab.gw)).get("/metrics")).text()
    line = r'^userland_gateway_help_requests_total\{outcome="(\w+)",worker="[^"]*"\} (\S+)$'
    counted = dict(re.findall(line, metrics, re.M))
    assert float(counted["admitted"]) >= 2 and float(counted["ended"]) >= 3, counted

    # So did the web UI, by course: one ask, one grant on request after a wait, one end by her.
    web = await lab.web_metrics()
    course = f'course="{lab.namespace}"'
    assert f"userland_web_help_asks_total{{{course}}} 1.0" in web
    assert f'userland_web_help_grants_total{{basis="request",{course}}} 1.0' in web
    assert f'userland_web_help_ends_total{{{course},end="student"}} 1.0' in web
    assert f"userland_web_help_wait_seconds_count{{{course}}} 1.0" in web

    # alice sees who had access; the course's audit log and the Userland's Events say it too.
    me = await lab.page("alice", "/me")
    assert "Who had access" in me and "tina, assistant" in me and "ended by you" in me
    audit = await lab.page("teacher", f"/courses/{lab.namespace}/audit")
    assert "tina (assistant) can open alice" in audit and "ended by alice, the student" in audit
    joins = await lab.page("teacher", f"/courses/{lab.namespace}/audit?action=help_join")
    assert "Joined to help" in joins and "Help access ended" not in joins.split("<tbody>", 1)[1]

    async def events() -> list[str]:
        found = await kube.list(EVENTS, lab.namespace)
        return [e["reason"] for e in found["items"] if e["involvedObject"]["name"] == "ide-alice"]
    assert await eventually(lambda: _has(events, {"HelpAccessGranted", "HelpAccessEnded"}))


async def _has(events: Any, wanted: set[str]) -> bool:
    return wanted <= set(await events())


async def test_a_handoff_code_made_during_the_grant_is_worthless_after_it(lab: Lab) -> None:
    await lab.ask("alice")
    assert (await lab.join("tina", "alice")).status == 303
    first = await lab.handoff("tina", ALICE)
    assert first.status == 302  # a code, not yet redeemed (the browser stopped here)
    grant = (await live_grants(lab))[0]
    ended = await lab.post("tina", f"/courses/{lab.namespace}/help/done", {"grant": grant.id},
                           token_from=f"/courses/{lab.namespace}")
    assert ended.status == 303
    target = first.headers["Location"].split(".test", 1)[1]
    redeemed = await lab.gw.get(target, headers={"Host": "alice.ide.test"}, allow_redirects=False)
    assert redeemed.status == 403 and "expired" in await text(redeemed)
    assert "userland_origin" not in redeemed.cookies


async def test_an_origin_cookie_from_a_grant_never_opens_another_students_origin(lab: Lab) -> None:
    await lab.ask("alice")
    await lab.ask("bob")
    assert (await lab.join("tina", "alice")).status == 303
    cookie = await lab.origin_cookie("tina", ALICE)
    bob = await lab.on_origin(origin_url("bob"), cookie, "/", **HTML)
    assert bob.status == 403 and "This is bob's environment" in await text(bob)
    assert lab.echoes["bob"].requests == []
    # Nor can tina sign in on bob's origin: bob asked, but nobody joined him.
    assert (await lab.handoff("tina", origin_url("bob"))).status == 403


async def test_pressing_join_twice_gives_one_grant_and_two_staff_cannot_both_take_a_request(lab: Lab) -> None:
    await lab.ask("alice")
    results = await asyncio.gather(lab.join("tina", "alice"), lab.join("teacher", "alice"))
    statuses = sorted(r.status for r in results)
    assert statuses == [303, 403], statuses  # one took the request, the other is told who did
    grants = await live_grants(lab)
    assert len(grants) == 1
    winner = grants[0].staff
    loser = "teacher" if winner == "tina" else "tina"
    refused = await lab.join(loser, "alice")
    assert refused.status == 403 and f"{winner} is already helping alice" in await text(refused)
    again = await lab.join(winner, "alice")  # a second click: the same grant
    assert again.status == 303
    assert [g.id for g in await live_grants(lab)] == [grants[0].id]
