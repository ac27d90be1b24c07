"""Attack review (issue 7 follow-up): an environment's Set-Cookie with a Domain attribute.

alice's environment answers `Set-Cookie: x=1; Domain=ide.example.edu`: a browser stores that
cookie for every `*.ide.example.edu`, so it reaches bob's origin (cookie tossing into bob's
environment) and every other origin of alice's. The gateway makes every environment cookie
host-only: the Domain attribute is removed, the cookie itself still arrives.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import pytest
from aiohttp import CookieJar, WSMsgType
from yarl import URL

from tests.support import eventually

from .conftest import (
    IDE_HOST,
    PUBLIC_HOST,
    PUBLIC_URL,
    EchoFactory,
    GatewayFactory,
    Origins,
    World,
    origin_cookie,
)
from .test_hardening_upstream import ALICE_HOST, RawUpstream, _environment, raw_upstream

__all__ = ["raw_upstream"]  # the fixture, used by name below

DOMAIN_COOKIES = [
    f"toss=1; Domain={IDE_HOST}; Path=/",
    f"toss=1; Path=/; domain=.{IDE_HOST.upper()}",
    f"toss=1; Path=/;   Domain = {IDE_HOST} ; HttpOnly",
    "toss=1; Domain=localhost; Path=/",
    f"toss=1; Domain={ALICE_HOST}; Domain={IDE_HOST}; Path=/",
    "toss=1; Domain=; Path=/",
]


@pytest.mark.parametrize("set_cookie", DOMAIN_COOKIES)
async def test_an_environment_cannot_set_a_cookie_for_other_origins(
        world: World, gateway_factory: GatewayFactory, origins: Origins, raw_upstream: RawUpstream,
        set_cookie: str) -> None:
    upstream = await raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: "
                                  + set_cookie.encode() + b"\r\n\r\nok")
    await _environment(world, upstream)
    gw = await gateway_factory()
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))})
    assert resp.status == 200 and await resp.text() == "ok"
    [cookie] = resp.headers.getall("Set-Cookie")
    assert "domain" not in cookie.lower(), cookie
    assert cookie.startswith("toss=1")
    # What a browser makes of it: stored for alice's origin only, never sent to bob's.
    jar = CookieJar(unsafe=True)
    jar.update_cookies_from_headers([cookie], URL(f"http://{ALICE_HOST}/"))
    assert "toss" in jar.filter_cookies(URL(f"http://{ALICE_HOST}/"))
    assert "toss" not in jar.filter_cookies(URL(f"http://bob.{IDE_HOST}/"))
    assert "toss" not in jar.filter_cookies(URL(f"http://{IDE_HOST}/"))


# -- a session that ends takes its open connections with it ----------------------------------


async def test_signing_out_ends_the_sessions_open_websockets_and_streams(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        sessions: Any) -> None:
    """alice signs out (or an admin ends her session, on any replica): the terminal WebSocket
    she had open on her origin and her live web UI stream must not keep working for whoever
    holds that browser or that stolen cookie; bob's connections are untouched."""
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", await echo_factory("alice-env"))
    await world.environment("vscode", "bob", await echo_factory("bob-env"))
    web_ui = await echo_factory("web")
    gw = await gateway_factory(web_url=web_ui.url)
    alice = await sessions("alice")
    alice_origin = await origins.handoff(alice, f"http://{ALICE_HOST}")
    bob_origin = await origins.login("bob")

    def ws_headers(host: str, cookie: str) -> dict[str, str]:
        return {"Host": host, **origin_cookie(cookie), "Origin": f"http://{host}"}

    alice_ws = await gw.ws_connect("/ws", headers=ws_headers(ALICE_HOST, alice_origin))
    bob_ws = await gw.ws_connect("/ws", headers=ws_headers(f"bob.{IDE_HOST}", bob_origin))
    for ws, who in ((alice_ws, "alice-env"), (bob_ws, "bob-env")):
        await ws.send_str("hi")
        assert (await ws.receive(timeout=5)).data == f"{who}:hi"
    # A long-lived request to the web UI (a live dashboard) with her platform session.
    stream = asyncio.create_task(gw.get("/slow?seconds=30", headers={
        "Host": PUBLIC_HOST, "Cookie": f"userland_session={alice}"}))
    await eventually(lambda: any(r["path_qs"].startswith("/slow") for r in web_ui.requests))

    form = await gw.get("/auth/logout", headers={"Host": PUBLIC_HOST, "Cookie": f"userland_session={alice}"})
    csrf = re.search(r'name="csrf" value="([^"]+)"', await form.text())
    assert csrf is not None
    out = await gw.post("/auth/logout", data={"csrf": csrf.group(1)}, allow_redirects=False, headers={
        "Host": PUBLIC_HOST, "Cookie": f"userland_session={alice}", "Origin": PUBLIC_URL})
    assert out.status == 303

    async with asyncio.timeout(3):
        message = await alice_ws.receive()
    assert message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR), message
    async with asyncio.timeout(3):
        with pytest.raises(aiohttp.ClientError):
            response = await stream
            await response.read()
    # bob is not affected.
    await bob_ws.send_str("still")
    assert (await bob_ws.receive(timeout=5)).data == "bob-env:still"
    await bob_ws.close()
    await alice_ws.close()
