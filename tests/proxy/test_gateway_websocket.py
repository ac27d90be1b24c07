"""WebSockets through the in-process gateway: messages, pings and close codes both ways."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType

from tests.support import eventually
from userland.proxy.websocket import sendable_close_code

from .conftest import IDE_HOST, EchoFactory, GatewayFactory, InternalOf, Origins, World

ALICE_HOST = f"alice.{IDE_HOST}"


async def connect(gw: Any, session: str, **kwargs: Any) -> aiohttp.ClientWebSocketResponse:
    ws: aiohttp.ClientWebSocketResponse = await gw.ws_connect(
        "/ws", headers={"Host": ALICE_HOST, "Cookie": f"userland_origin={session}",
                        "Origin": f"http://{ALICE_HOST}", "X-User": "bob"},
        autoping=False, **kwargs)
    return ws


@pytest.fixture
async def setup(world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
                origins: Origins) -> tuple[Any, Any, str]:
    echo = await echo_factory("alice-upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    return gw, echo, await origins.login("alice")


async def test_text_binary_and_ping_both_ways(setup: tuple[Any, Any, str], internal_of: InternalOf) -> None:
    gw, echo, session = setup
    ws = await connect(gw, session, protocols=("echo.v1",))
    assert ws.protocol == "echo.v1"
    await ws.send_str("hello")
    assert (await ws.receive()).data == "alice-upstream:hello"
    await ws.send_bytes(b"\x00\x01\x02")
    msg = await ws.receive()
    assert (msg.type, msg.data) == (WSMsgType.BINARY, b"\x02\x01\x00")
    await ws.ping(b"are-you-there")
    msg = await ws.receive()
    assert (msg.type, msg.data) == (WSMsgType.PONG, b"are-you-there")
    await ws.send_str("whoami")
    assert json.loads((await ws.receive()).data) == {"upstream": "alice-upstream", "user": "alice"}
    handshake = echo.ws_handshakes[-1]
    assert handshake["x-user"] == "alice" and handshake["origin"] == f"http://{ALICE_HOST}"
    assert "userland_" not in handshake.get("cookie", "")
    metrics = await (await (await internal_of(gw)).get("/metrics")).text()
    assert 'userland_gateway_websockets_active{worker=' in metrics
    assert next(line for line in metrics.splitlines()
            if line.startswith("userland_gateway_websockets_active{")).endswith(" 1.0")
    await ws.close()


async def test_upstream_ping_reaches_the_client_and_the_pong_goes_back(setup: tuple[Any, Any, str]) -> None:
    gw, _, session = setup
    ws = await connect(gw, session)
    await ws.send_str("ping-me")
    msg = await ws.receive()
    assert (msg.type, msg.data) == (WSMsgType.PING, b"from-upstream")
    await ws.pong(msg.data)
    await ws.send_str("still-there")
    assert (await ws.receive()).data == "alice-upstream:still-there"
    await ws.close()


@pytest.mark.parametrize("code", [1000, 1001, 1008, 1011, 4000, 4999])
async def test_upstream_close_code_reaches_the_client(setup: tuple[Any, Any, str], code: int) -> None:
    gw, _, session = setup
    ws = await connect(gw, session)
    await ws.send_str(f"close:{code}:bye now")
    msg = await ws.receive()
    assert msg.type is WSMsgType.CLOSE
    assert (msg.data, msg.extra) == (code, "bye now")
    await ws.close()


@pytest.mark.parametrize("code", [1000, 1001, 1008, 3000, 4001])
async def test_client_close_code_reaches_the_upstream(setup: tuple[Any, Any, str], code: int) -> None:
    gw, echo, session = setup
    ws = await connect(gw, session)
    await ws.send_str("hi")
    await ws.receive()
    await ws.close(code=code, message=b"leaving")
    assert ws.close_code == code  # the gateway answered the close with the same code
    await eventually(lambda: echo.ws_closes)
    assert echo.ws_closes == [code]


async def test_websocket_without_session_is_refused_and_reaches_nothing(
        setup: tuple[Any, Any, str]) -> None:
    gw, echo, _ = setup
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await gw.ws_connect("/ws", headers={"Host": ALICE_HOST, "X-User": "alice",
                                            "Origin": f"http://{ALICE_HOST}"})
    assert err.value.status == 401
    assert echo.ws_handshakes == []


@pytest.mark.parametrize("origin", [
    f"http://bob.{IDE_HOST}",  # a page on a sibling subdomain (same site, so the cookie goes along)
    f"http://{IDE_HOST}",  # the bare Template host
    "http://userland.test",  # even the platform's own pages may not
    "http://evil.example",
    f"https://{ALICE_HOST}",  # another scheme is another origin
    f"http://{ALICE_HOST}:8443",  # and so is another port
    f"http://{ALICE_HOST}.evil.example",
    "null",  # sandboxed frames, data: URLs
    None,  # no Origin at all: no browser sends a WebSocket upgrade without one
])
async def test_cross_origin_websocket_is_refused_with_alices_cookie(
        setup: tuple[Any, Any, str], origin: str | None) -> None:
    """The attack: a page elsewhere opens `new WebSocket("ws://alice.ide.../ws")` in alice's
    browser, which sends her cookie along; the socket would act as alice."""
    gw, echo, session = setup
    headers = {"Host": ALICE_HOST, "Cookie": f"userland_origin={session}"}
    if origin is not None:
        headers["Origin"] = origin
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await gw.ws_connect("/ws", headers=headers)
    assert err.value.status == 403
    assert echo.ws_handshakes == []
    ws = await connect(gw, session)  # her own page's socket still opens
    await ws.send_str("hi")
    assert (await ws.receive()).data == "alice-upstream:hi"
    await ws.close()


@pytest.mark.parametrize(("received", "sent"), [
    (1000, 1000), (4321, 4321), (None, 1011), (1006, 1011), (1005, 1000), (1015, 1000), (999, 1000),
])
def test_sendable_close_code(received: int | None, sent: int) -> None:
    assert sendable_close_code(received) == sent
