"""Attacks and defects on the upstream side (issue 7 parts 4 and 7), against the real gateway:
a planted session cookie hidden behind bytes aiohttp drops on write, nameless cookies, and a
response that ends by closing the connection (PHP's built-in server). Upstreams are real TCP
servers: raw asyncio ones that write exactly the bytes under test, and `php -S` when installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSServerHandshakeError

from userland.local.ports import free_port

from .conftest import IDE_HOST, EchoFactory, GatewayFactory, InternalOf, Origins, World, origin_cookie

ALICE_HOST = f"alice.{IDE_HOST}"  # alice's own origin


RawUpstream = Callable[[bytes], Awaitable[str]]


@pytest.fixture
async def raw_upstream() -> AsyncIterator[RawUpstream]:
    """A TCP server that reads one request head and writes `response` byte for byte, then closes."""
    servers: list[asyncio.Server] = []

    async def make(response: bytes) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(response)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield make
    for server in servers:
        server.close()
        await server.wait_closed()


async def _environment(world: World, upstream: str, user: str = "alice") -> None:
    if not hasattr(world, "_made"):
        await world.template("vscode", host=IDE_HOST)
        world._made = True  # type: ignore[attr-defined]
    await world.userland("vscode", user)
    await world.service("vscode", user, upstream=upstream)


PLANTS = [
    b"userland_session\xff=planted; Path=/",       # aiohttp drops the undecodable byte on write
    b"userland_session\x01=planted; Path=/",       # a control character
    b"userland_session=pla\x7fnted; Path=/",       # DEL in the value
]


@pytest.mark.parametrize("set_cookie", PLANTS)
async def test_invalid_header_bytes_give_a_502_page_never_a_planted_cookie(
        world: World, gateway_factory: GatewayFactory, origins: Origins, raw_upstream: RawUpstream,
        set_cookie: bytes, internal_of: InternalOf) -> None:
    upstream = await raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: " + set_cookie
                                  + b"\r\n\r\nok")
    await _environment(world, upstream)
    gw = await gateway_factory()
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **origin_cookie(await origins.login("alice")),
                                      "Accept": "text/html"})
    assert resp.status == 502
    assert "Set-Cookie" not in resp.headers
    assert "Traceback" not in await resp.text()
    metrics = await (await internal_of(gw)).get("/metrics")
    assert 'userland_gateway_upstream_errors_total{kind="invalid"' in await metrics.text()


SNEAKY = [
    "userland_session =planted",
    " userland_session=planted",
    "\tuserland_session=planted",
    "Userland_Session=planted",
    "__Host-userland_session=planted; Secure; Path=/",
    "__Secure-userland_session=planted; Secure",
    "__HOST-__secure-userland_session=planted",
    "userland_login=planted; Path=/auth/",
    "userland_origin=planted; Path=/",
    "__Host-userland_origin=planted; Secure; Path=/",
    "=userland_session=planted",           # nameless: the browser sends back userland_session=planted
    "userland_session",                    # no '=' at all: a nameless cookie with that value
    "userland_session\u00e9=planted",       # valid UTF-8, but not a token character
]


@pytest.mark.parametrize("set_cookie", SNEAKY)
async def test_platform_cookie_spellings_are_dropped_and_the_page_still_arrives(
        world: World, gateway_factory: GatewayFactory, origins: Origins, raw_upstream: RawUpstream,
        set_cookie: str) -> None:
    upstream = await raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: app=1\r\n"
                                  b"Set-Cookie: " + set_cookie.encode() + b"\r\n\r\nok")
    await _environment(world, upstream)
    gw = await gateway_factory()
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))})
    assert resp.status == 200 and await resp.text() == "ok"
    assert resp.headers.getall("Set-Cookie") == ["app=1"]


async def test_websocket_handshake_never_carries_a_platform_cookie_upstream(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    echo = await echo_factory("ws")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    session = await origins.login("alice")
    # A browser holding a cookie planted as `userland_session\xff` sends it back with the raw byte
    # (aiohttp's client writer drops it, so the gateway sees `userland_session`).
    raw = f"app=1; userland_origin={session}; userland_session\udcff={session}; __Host-userland_session=x"
    async with gw.ws_connect("/ws", headers={"Host": ALICE_HOST, "Cookie": raw,
                                             "Origin": f"http://{ALICE_HOST}"}) as ws:
        await ws.send_str("hi")
        assert (await ws.receive()).data == "ws:hi"
    seen = echo.ws_handshakes[-1]
    assert session not in str(seen)
    assert seen["cookie"] == "app=1"
    # The origin cookie's own name twice (`userland_origin\xff` arrives as `userland_origin`) is
    # refused outright (tests/proxy/test_attack_cookie_twice.py): nothing reaches the upstream.
    with pytest.raises(WSServerHandshakeError) as refused:
        await gw.ws_connect("/ws", headers={"Host": ALICE_HOST, "Origin": f"http://{ALICE_HOST}",
                                            "Cookie": f"{raw}; userland_origin\udcff={session}"})
    assert refused.value.status == 400 and len(echo.ws_handshakes) == 1


# -- responses that end when the connection closes ---------------------------------------------


async def test_a_body_delimited_by_connection_close_is_read_to_the_end(
        world: World, gateway_factory: GatewayFactory, origins: Origins, raw_upstream: RawUpstream) -> None:
    body = b"<html>" + b"phpMyAdmin " * 20_000 + b"</html>"
    upstream = await raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n"
                                  + body)
    await _environment(world, upstream)
    gw = await gateway_factory()
    headers = {"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))}
    for _ in range(2):  # the connection is not pooled: the second request works the same
        resp = await gw.get("/index.php", headers=headers)
        assert resp.status == 200
        assert await resp.read() == body


@pytest.fixture
def php_server(tmp_path: Path) -> Any:
    php = shutil.which("php")
    if php is None:
        pytest.fail("php-cli is not installed (apt-get install -y php-cli)")
    (tmp_path / "index.php").write_text("<?php echo str_repeat('php says hello ', 5000); ?>")
    port = free_port()
    process = subprocess.Popen([php, "-S", f"127.0.0.1:{port}", "-t", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("php -S did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(5)


async def test_php_builtin_server_pages_arrive_whole(
        world: World, gateway_factory: GatewayFactory, origins: Origins, php_server: str) -> None:
    await _environment(world, php_server)
    gw = await gateway_factory()
    headers = {"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))}
    resp = await gw.get("/index.php", headers=headers)
    assert resp.status == 200
    assert await resp.text() == "php says hello " * 5000
