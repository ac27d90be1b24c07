"""Attack review of help in the lab (issue 20), over HTTP: what the first review's tests did not
try. Two gateway replicas and the end of a grant; a student's page using up the staff member's
handoffs; identity headers forged by staff and owner, and a staff signature carried to the web UI;
a student and a member of staff hammering the help forms. Real gateway replicas, web UI, Redis
and control plane (help_support.py); each test is the attack, and SECURITY.md says what it found.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import pytest
import redis.asyncio
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from tests.support import eventually
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import NAMESPACES, KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.platform.model.identity import verify_identity
from userland.platform.model.keyspace import HANDOFF_PREFIX, HELP_REQUEST_PREFIX, pattern
from userland.web.help_queue import ASKS_PER_WINDOW, JOINS_PER_WINDOW

from .conftest import SECRET, EchoFactory, GatewayFactory, World
from .help_support import HTML, ORIGIN_COOKIE, Lab, live_grants, origin_url, running_lab, text

ALICE = origin_url("alice")
CLOSED = (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR)
# What Chromium sends for an <img> (or fetch no-cors) that alice's page makes to the platform.
IMAGE_FROM_ALICE = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}


@pytest.fixture
async def lab(kube: KubeClient, namespace: str, redis_url: str, world: World, echo_factory: EchoFactory,
              gateway_factory: GatewayFactory) -> AsyncIterator[Lab]:
    async with running_lab(kube=kube, namespace=namespace, redis_url=redis_url, world=world,
                           echo_factory=echo_factory, gateway_factory=gateway_factory) as started:
        yield started


async def redis_keys(lab: Lab, pattern: str) -> list[bytes]:
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        return [key async for key in client.scan_iter(match=pattern)]
    finally:
        await client.aclose()


def on(gw: TestClient[Any, Any], origin: str, cookie: str, path: str = "/", **headers: str) -> Any:
    return gw.get(path, allow_redirects=False,
                  headers={"Host": urlsplit(origin).netloc, "Cookie": f"{ORIGIN_COOKIE}={cookie}", **headers})


async def websocket(gw: TestClient[Any, Any], origin: str, cookie: str) -> aiohttp.ClientWebSocketResponse:
    ws: aiohttp.ClientWebSocketResponse = await gw.ws_connect(
        "/ws", headers={"Host": urlsplit(origin).netloc, "Cookie": f"{ORIGIN_COOKIE}={cookie}",
                        "Origin": origin})
    return ws


async def test_ending_access_closes_staff_websockets_on_every_replica(
        lab: Lab, gateway_factory: GatewayFactory) -> None:
    """tina keeps a terminal open on each of two gateway replicas, and holds a handoff code she
    has not redeemed yet; alice ends access. Both terminals close, and a long request is cut
    before it ends by itself; neither replica lets the cookie, the code or a new WebSocket in
    afterwards. (How soon, against the 5 s bound: bench/help_bench.py's "end".)"""
    second = await gateway_factory(web_url=lab.web_url, namespaces=(lab.namespace,))

    async def routed() -> bool:
        response: aiohttp.ClientResponse = await on(second, ALICE, "none", **HTML)
        return response.status == 302
    await eventually(routed, timeout=20)
    await lab.ask("alice")
    assert (await lab.join("tina", "alice")).status == 303
    cookie = await lab.origin_cookie("tina", ALICE)
    sockets = [await websocket(lab.gw, ALICE, cookie), await websocket(second, ALICE, cookie)]
    for ws in sockets:
        await ws.send_str("whoami")
        assert "tina" in (await ws.receive(timeout=10)).data
    unredeemed = await lab.handoff("tina", ALICE)
    assert unredeemed.status == 302
    [grant] = await live_grants(lab)
    # And a long request in flight on the second replica (a download, a long poll).

    async def slow() -> str:
        response = await on(second, ALICE, cookie, "/slow?seconds=30")
        return f"{response.status} {await response.text()}"
    in_flight = asyncio.create_task(slow())

    async def arrived() -> bool:
        return any(r["path_qs"].startswith("/slow") for r in lab.echoes["alice"].requests)
    await eventually(arrived, timeout=10)

    ended = await lab.post("alice", "/me/help/end", {"course": lab.namespace, "grant": grant.id})
    assert ended.status == 303

    async def closed(ws: aiohttp.ClientWebSocketResponse) -> None:
        message = await ws.receive(timeout=60)
        while message.type not in CLOSED:  # nothing else is sent to it; just in case
            message = await ws.receive(timeout=60)
    await asyncio.gather(*(closed(ws) for ws in sockets))
    # The long request is cut, not answered "slow done" when its 30 s are up.
    with pytest.raises(aiohttp.ClientError):
        await in_flight

    reached = len(lab.echoes["alice"].requests)
    code_path = unredeemed.headers["Location"].split(".test", 1)[1]
    for gw in (lab.gw, second):
        page = await on(gw, ALICE, cookie, "/work", **HTML)
        assert page.status == 403 and "has ended" in await text(page)
        assert (await on(gw, ALICE, cookie, "/api/x")).status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await websocket(gw, ALICE, cookie)
    redeemed = await second.get(code_path, headers={"Host": "alice.ide.test"}, allow_redirects=False)
    assert redeemed.status == 403 and ORIGIN_COOKIE not in redeemed.cookies
    assert len(lab.echoes["alice"].requests) == reached


async def test_a_students_page_cannot_use_up_the_staff_members_handoffs(lab: Lab) -> None:
    """alice's page, running in tina's browser, adds images pointing at the platform's handoff
    (same site: tina's platform cookie goes along). Each one was a handoff code issued to tina:
    after 30 of them every environment tina opened said "Too many sign-ins" for a minute."""
    await lab.ask("alice")
    assert (await lab.join("tina", "alice")).status == 303
    # The worker's Redis is shared by its tests: codes an earlier test left (for their minute) are
    # not this test's.
    earlier = set(await redis_keys(lab, pattern(HANDOFF_PREFIX)))
    query = urlencode({"origin": ALICE, "next": "/"})
    for _ in range(40):
        image = await lab.gw.get(f"/auth/handoff?{query}", allow_redirects=False,
                                 headers={**lab.platform("tina"), **IMAGE_FROM_ALICE, "Accept": "image/*"})
        assert image.status == 403, image.status
    for mode, dest in (("cors", "empty"), ("same-origin", "empty"), ("no-cors", "script")):
        fetched = await lab.gw.get(f"/auth/handoff?{query}", allow_redirects=False, headers={
            **lab.platform("tina"), "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": mode,
            "Sec-Fetch-Dest": dest})
        assert fetched.status == 403, (mode, fetched.status)
    issued = set(await redis_keys(lab, pattern(HANDOFF_PREFIX))) - earlier
    assert issued == set()  # no code was issued for any of them
    # tina's own page load (a navigation, from the dashboard's link) still signs her in.
    navigation = await lab.gw.get(f"/auth/handoff?{query}", allow_redirects=False, headers={
        **lab.platform("tina"), "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
        "Sec-Fetch-Dest": "document"})
    assert navigation.status == 302 and navigation.headers["Location"].startswith(ALICE + "/__userland/")
    # A client that sends no fetch metadata (curl, an old browser) is not told apart.
    assert (await lab.handoff("tina", ALICE)).status == 302


async def test_staff_cannot_forge_the_identity_claim_nor_carry_it_to_the_web_ui(lab: Lab) -> None:
    """tina (helping alice) sends identity headers of her own making; alice does too on her own
    origin; alice's environment then replays the staff signature it received to the web UI,
    around the gateway. None of it works: the environment sees what the gateway signed, and the
    web UI refuses a signature made for environments."""
    await lab.ask("alice")
    assert (await lab.join("tina", "alice")).status == 303
    # tina's cookie on alice's origin is out of reach of alice's scripts there (HttpOnly).
    code = urlsplit((await lab.handoff("tina", ALICE)).headers["Location"])
    redeemed = await lab.gw.get(f"{code.path}?{code.query}", headers={"Host": code.netloc},
                                allow_redirects=False)
    morsel = redeemed.cookies[ORIGIN_COOKIE]
    assert morsel["httponly"] and morsel["samesite"] == "Lax" and not morsel["domain"], morsel
    cookie = morsel.value
    forged = {"X-User": "bob", "X-User-Owner": "bob", "X-User-Role": "admin",
              "X-User-Signature": "t=1,aud=env,v4=" + "0" * 64, "X-Forwarded-User": "teacher",
              "X_User_Owner": "bob", "x-user-teams": "org/staff"}
    seen = await on(lab.gw, ALICE, cookie, "/work", **forged)
    assert seen.status == 200
    received = await seen.json()
    headers = CIMultiDict((k, v) for k, v in received["headers"])
    who = verify_identity(headers, SECRET, audience="env")
    assert (who.login, who.owner, who.role) == ("tina", "alice", "assistant")
    assert headers.getall("X-User") == ["tina"] and headers.getall("X-User-Owner") == ["alice"]
    assert not {"X-Forwarded-User", "X_User_Owner", "X-User-Teams"} & set(headers)
    # Neither tina's origin cookie nor any platform cookie reaches the environment she works in.
    assert all(ORIGIN_COOKIE not in c and "userland_session" not in c for c in received["cookie_header"])

    # The owner cannot make herself staff (or raise a role) on her own environment either.
    own = await lab.origin_cookie("alice", ALICE)
    mine = await on(lab.gw, ALICE, own, "/work", **forged)
    mine_headers = CIMultiDict((k, v) for k, v in (await mine.json())["headers"])
    me = verify_identity(mine_headers, SECRET, audience="env")
    assert (me.login, me.owner, me.role) == ("alice", "", "")

    # alice's environment replays tina's signed headers to the web UI, around the gateway.
    replay = {k: v for k, v in headers.items() if k.lower().startswith("x-user")}
    async with aiohttp.ClientSession() as http:
        for path in ("/me", f"/courses/{lab.namespace}"):
            async with http.get(lab.web_url + path, headers={**replay, **HTML}, allow_redirects=False) as r:
                assert r.status == 401, (path, r.status)
    # Through the gateway the headers are stripped: the web UI sees alice, a student, as ever.
    platform = await lab.gw.get(f"/courses/{lab.namespace}", allow_redirects=False,
                                headers={**lab.platform("alice"), **replay, **HTML})
    assert platform.status == 404  # not staff of the course


async def test_a_student_spamming_help_keeps_one_request_and_staff_spamming_join_get_nothing(
        lab: Lab) -> None:
    """alice asks (and cancels) in a loop; tina presses Join on bob, who never asked, in a loop."""
    statuses = [(await lab.ask("alice", f"try {i}")).status for i in range(ASKS_PER_WINDOW + 5)]
    assert statuses[:ASKS_PER_WINDOW] == [303] * ASKS_PER_WINDOW
    assert set(statuses[ASKS_PER_WINDOW:]) == {429}
    dashboard = await lab.page("tina", f"/courses/{lab.namespace}")
    assert dashboard.count('data-student="alice"') == 1  # one open request, whatever she does
    for _ in range(10):
        cancelled = await lab.post("alice", "/me/help/cancel", {"course": lab.namespace})
        assert cancelled.status == 303
    assert await redis_keys(lab, pattern(HELP_REQUEST_PREFIX + lab.namespace + ":")) == []
    assert (await lab.ask("alice")).status == 429  # cancelling gave her no new asks
    tries = [(await lab.join("tina", "bob")).status for _ in range(10)]
    assert set(tries) == {403}
    assert await live_grants(lab) == []
    assert lab.echoes["bob"].requests == []


async def test_alices_page_cannot_post_to_bobs_environment_with_tinas_access(lab: Lab) -> None:
    """tina helps alice and bob. alice's page, in tina's browser, submits a form to bob's origin as
    a top-level navigation (fetch metadata says navigate/document: the rule that lets staff follow
    links), and opens a WebSocket to it. Both carry alice's Origin and are refused before bob's
    environment sees them; a link (a GET page load) is what staff may follow, as from the dashboard."""
    await lab.ask("alice")
    await lab.ask("bob")
    assert (await lab.join("tina", "alice")).status == 303
    assert (await lab.join("tina", "bob")).status == 303
    bob = origin_url("bob")
    cookie = await lab.origin_cookie("tina", bob)
    navigation = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document",
                  "Origin": ALICE}
    for method in ("POST", "PUT", "DELETE"):
        sent = await lab.gw.request(method, "/api/contents/work.py", allow_redirects=False, data="rm -rf ~",
                                    headers={"Host": urlsplit(bob).netloc,
                                             "Cookie": f"{ORIGIN_COOKIE}={cookie}", **navigation, **HTML})
        assert sent.status == 403, (method, sent.status)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await lab.gw.ws_connect("/ws", headers={"Host": urlsplit(bob).netloc, "Origin": ALICE,
                                                "Cookie": f"{ORIGIN_COOKIE}={cookie}"})
    assert refused.value.status == 403
    for dest in ("iframe", "image", "script", "empty"):
        embedded = await on(lab.gw, bob, cookie, "/secret", **{
            "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors" if dest != "iframe" else "navigate",
            "Sec-Fetch-Dest": dest})
        assert embedded.status == 403, (dest, embedded.status)
    assert lab.echoes["bob"].requests == []
    page_load = {k: v for k, v in navigation.items() if k != "Origin"}  # a GET navigation sends none
    link = await on(lab.gw, bob, cookie, "/", **page_load, **HTML)
    assert link.status == 200 and len(lab.echoes["bob"].requests) == 1


async def test_a_students_message_is_only_text_on_the_staff_pages(lab: Lab) -> None:
    """alice's one-line message is shown to staff (the help card, the helping page): markup in it
    stays text, on pages whose policy runs no inline script anyway."""
    attack = '<img src=x onerror="alert(1)"><script>fetch("/courses")</script>"\'><b>'
    assert (await lab.ask("alice", attack)).status == 303
    dashboard = await lab.get("tina", f"/courses/{lab.namespace}")
    raw = await dashboard.text()
    assert "&lt;img src=x onerror=" in raw and "<img src=x" not in raw and "<script>fetch" not in raw
    assert "script-src 'self'" in dashboard.headers["Content-Security-Policy"]
    assert (await lab.join("tina", "alice")).status == 303
    helping = await lab.get("tina", f"/courses/{lab.namespace}/help/alice")
    raw = await helping.text()
    assert helping.status == 200 and "&lt;img src=x onerror=" in raw
    assert "<img src=x" not in raw and "<script>fetch" not in raw


async def test_join_and_done_in_a_loop_is_refused_before_it_floods_the_api_server(lab: Lab) -> None:
    """An instructor of a course that lets instructors open any student's environments presses
    Join and Done on bob in a loop. Each round was a grant, an audit entry and two Events on bob's
    Userland (written to the API server), without end; now a member of staff makes at most
    JOINS_PER_WINDOW grants per window in a course, then gets a 429 page."""
    await lab.kube.merge_patch(NAMESPACES, None, lab.namespace, {"metadata": {"annotations": {
        "userland.dev/staff-access": "instructors"}}})

    async def offered() -> bool:
        return "Open as staff" in await lab.page("teacher", f"/courses/{lab.namespace}")
    await eventually(offered, timeout=20)
    token = lab.token("teacher")
    headers = lab.platform("teacher")
    statuses = []
    for _ in range(JOINS_PER_WINDOW + 5):
        joined = await lab.gw.post(f"/courses/{lab.namespace}/help/join", headers=headers,
                                   data={"csrf": token, "student": "bob"}, allow_redirects=False)
        statuses.append(joined.status)
        for grant in await live_grants(lab):
            done = await lab.gw.post(f"/courses/{lab.namespace}/help/done", headers=headers,
                                     data={"csrf": token, "grant": grant.id}, allow_redirects=False)
            assert done.status == 303
    assert statuses[:JOINS_PER_WINDOW] == [303] * JOINS_PER_WINDOW, statuses
    assert set(statuses[JOINS_PER_WINDOW:]) == {429}, statuses
    refused = await lab.gw.post(f"/courses/{lab.namespace}/help/join", headers={**headers, **HTML},
                                data={"csrf": token, "student": "bob"}, allow_redirects=False)
    assert refused.status == 429 and "Too many" in await text(refused)
    # Others are not held back by it: tina still joins alice, who asked.
    await lab.ask("alice")
    assert (await lab.join("tina", "alice")).status == 303


async def test_a_demoted_instructor_signing_in_again_does_not_get_back_in(lab: Lab) -> None:
    """gina teaches every course (USERLAND_INSTRUCTORS) and joins alice. The admin takes her off
    the list; she signs in again, now a student everywhere. Her grant was judged by the role she
    had at Join and runs on to its end: the handoff let her new session straight back into
    alice's environment. Now a grant lets in only the person as they were at Join (the session's
    role and teams); anyone else joins again, or not."""
    await lab.sign_in("gina", role="instructor")
    await lab.ask("alice")
    assert (await lab.join("gina", "alice")).status == 303
    assert (await lab.handoff("gina", ALICE)).status == 302
    await lab.sign_in("gina", role="student")  # the next login, with the new settings
    refused = await lab.handoff("gina", ALICE)
    assert refused.status == 403 and "This is alice's environment" in await text(refused)
    # Not only the role: teams too. tina is in the GitHub team org/tas when she joins bob; she
    # leaves it, and her next login (the gateway asks GitHub for her teams) has none.
    await sign_in_with_teams(lab, "tina", ("org/tas",))
    await lab.ask("bob")
    assert (await lab.join("tina", "bob")).status == 303
    assert (await lab.handoff("tina", origin_url("bob"))).status == 302
    await sign_in_with_teams(lab, "tina", ())
    assert (await lab.handoff("tina", origin_url("bob"))).status == 403


async def sign_in_with_teams(lab: Lab, login: str, teams: tuple[str, ...]) -> None:
    """A platform session as a login makes it when the gateway reads the user's GitHub teams."""
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        lab.cookies[login] = await RedisSessionStore(client, 3600).save(Session(
            login=login, github_id=4242, role="student", csrf=secrets.token_urlsafe(32), created=time.time(),
            teams=teams))
    finally:
        await client.aclose()


async def test_a_handoff_code_and_cookie_from_a_grant_that_ran_out_are_worthless(lab: Lab) -> None:
    """tina's grant runs out by time (nobody pressed anything; the web UI has not even recorded
    it yet). A code she got a moment before, redeemed after, and her cookie: refused."""
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        grant, _ = await GrantStore(client).create(course=lab.namespace, student="alice", staff="tina",
                                                   role="assistant", basis="request", seconds=3)
    finally:
        await client.aclose()
    cookie = await lab.origin_cookie("tina", ALICE)
    assert (await on(lab.gw, ALICE, cookie, "/work")).status == 200
    code = await lab.handoff("tina", ALICE)
    assert code.status == 302
    await asyncio.sleep(max(0.0, grant.expires - time.time()) + 0.2)
    target = urlsplit(code.headers["Location"])
    redeemed = await lab.gw.get(f"{target.path}?{target.query}", headers={"Host": target.netloc},
                                allow_redirects=False)
    assert redeemed.status == 403 and ORIGIN_COOKIE not in redeemed.cookies
    page = await on(lab.gw, ALICE, cookie, "/work", **HTML)
    assert page.status == 403 and "has ended" in await text(page)
    assert (await lab.handoff("tina", ALICE)).status == 403
