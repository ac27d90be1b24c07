"""Resource exhaustion without logging in, and malformed requests (issue 7 parts 5 and 6).

Real: the gateway app served by `GatewayRunner` (what `userland gateway` runs) on a loopback
port, the control plane and Redis behind it, echo upstreams, and raw TCP clients that write
exactly the bytes of each attack. Limits are set small (settings) so each attack is quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import WSServerHandshakeError, web

from tests.support import eventually
from userland.platform.clients.kube import KubeClient
from userland.proxy.app import RUNNER_KWARGS, create_app
from userland.proxy.connections import ConnectionLimits, GatewayRunner

from .conftest import EchoFactory, GatewayFactory, Origins, World, gateway_settings

IDE_HOST = "ide.test"
ALICE_HOST = f"alice.{IDE_HOST}"  # alice's own origin


class Served:
    def __init__(self, runner: GatewayRunner, port: int) -> None:
        self.runner = runner
        self.port = port

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


ServeFactory = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve(kube: KubeClient, namespace: str, redis_url: str) -> AsyncIterator[ServeFactory]:
    runners: list[GatewayRunner] = []

    async def make(**extra: Any) -> Served:
        settings = gateway_settings(namespace, redis_url, **extra)
        runner = GatewayRunner(create_app(settings, kube=kube),
                               limits=ConnectionLimits.from_settings(settings), **RUNNER_KWARGS)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return Served(runner, runner.addresses[0][1])

    yield make
    for runner in runners:
        await runner.cleanup()


async def read_answer(reader: asyncio.StreamReader, timeout: float = 30.0) -> bytes:
    """Everything the server writes until it closes the connection."""
    return await asyncio.wait_for(reader.read(), timeout)


async def test_an_endless_request_head_is_cut_at_the_limit_with_431(serve: ServeFactory) -> None:
    served = await serve(max_header_bytes=64 * 1024)
    reader, writer = await served.open()
    writer.write(b"GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    sent = 0
    with contextlib.suppress(ConnectionError):
        for _ in range(40):  # 40 x 8 KiB header lines = 320 KiB, never finished
            writer.write(b"X-Filler: " + b"a" * 8180 + b"\r\n")
            await writer.drain()
            sent += 8192
    answer = await read_answer(reader)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert served.runner.counts.refused["header_size"] == 1
    writer.close()


async def test_a_head_sent_slowly_is_cut_after_the_header_timeout(serve: ServeFactory) -> None:
    served = await serve(header_timeout_seconds=0.5, keepalive_timeout_seconds=30)
    reader, writer = await served.open()
    writer.write(b"GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    lines = 0

    async def trickle() -> None:
        nonlocal lines
        with contextlib.suppress(ConnectionError):
            for i in range(100):
                writer.write(b"X-Slow-%d: 1\r\n" % i)  # one header line every 0.1 s, never ending
                await writer.drain()
                lines += 1
                await asyncio.sleep(0.1)
    trickling = asyncio.create_task(trickle())
    answer = await read_answer(reader)
    # Cut while the head was still coming: the timeout counts from its start, not from its last
    # line (a per-read timeout would have waited for all 100 lines, and 0.5 s past them).
    assert not trickling.done() and lines < 100, lines
    trickling.cancel()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert served.runner.counts.refused["header_timeout"] == 1
    writer.close()


async def test_idle_connections_are_closed_after_the_keepalive_timeout(serve: ServeFactory) -> None:
    served = await serve(keepalive_timeout_seconds=0.5)
    silent_reader, silent = await served.open()  # never sends a byte
    reader, writer = await served.open()
    writer.write(b"GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # one request, then idle
    answer = await read_answer(reader, timeout=5)
    assert answer.startswith(b"HTTP/1.1 404 ") and b"Nothing is served at this address." in answer
    assert await read_answer(silent_reader, timeout=5) == b""
    writer.close()
    silent.close()


async def test_connections_per_client_address_are_capped(serve: ServeFactory) -> None:
    served = await serve(max_connections_per_client=5)
    held = [await served.open() for _ in range(5)]
    reader, writer = await served.open()
    answer = await read_answer(reader)
    assert answer.startswith(b"HTTP/1.1 429 ")
    assert served.runner.counts.refused["connections"] == 1
    # The held ones still work, and closing one makes room for a new one.
    r0, w0 = held[0]
    w0.write(b"GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert (await read_answer(r0)).startswith(b"HTTP/1.1 404 ")

    async def served_again() -> bool:  # the gateway frees the place once it has seen the close
        r_new, w_new = await served.open()
        w_new.write(b"GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = await read_answer(r_new)
        w_new.close()
        assert answer.startswith((b"HTTP/1.1 404 ", b"HTTP/1.1 429 ")), answer
        return answer.startswith(b"HTTP/1.1 404 ")
    await eventually(served_again, timeout=10)
    for _, w in held[1:]:
        w.close()
    writer.close()


BAD_HEADS = [
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Secret\x01Name: hunter2-top-secret\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Token: hunter2-top-secret\x00\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n hunter2-top-secret\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: hunter2-top-secret\r\n\r\n",
]


@pytest.mark.parametrize("head", BAD_HEADS)
async def test_malformed_headers_get_400_and_one_log_line_without_their_contents(
        serve: ServeFactory, caplog: pytest.LogCaptureFixture, head: bytes) -> None:
    served = await serve()
    caplog.set_level(logging.DEBUG)
    reader, writer = await served.open()
    writer.write(head)
    answer = await read_answer(reader)
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
    assert b"hunter2" not in answer
    writer.close()
    await asyncio.sleep(0.05)
    records = [r for r in caplog.records if r.name.startswith(("aiohttp", "userland"))]
    assert not [r for r in records if r.levelno >= logging.WARNING or r.exc_info]
    refused = [r for r in records if getattr(r, "event", "") == "gateway.bad_request"]
    assert len(refused) == 1
    assert "hunter2" not in caplog.text
    assert served.runner.counts.refused["bad_request"] == 1


async def test_bodies_and_keep_alive_are_not_taken_for_oversized_heads(
        serve: ServeFactory, world: World, echo_factory: EchoFactory, origins: Origins) -> None:
    echo = await echo_factory("alice")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    served = await serve(max_header_bytes=4096)
    session = await origins.login("alice")
    body = os.urandom(3 * 1024 * 1024)
    connector = aiohttp.TCPConnector(limit=1)  # one connection, kept alive between requests
    async with aiohttp.ClientSession(connector=connector) as http:
        for _ in range(3):
            async with http.post(f"http://127.0.0.1:{served.port}/upload", data=body,
                                 headers={"Host": ALICE_HOST, "Cookie": f"userland_origin={session}",
                                          "Origin": f"http://{ALICE_HOST}"}) as resp:
                seen = await resp.json()
                assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
            async with http.get(f"http://127.0.0.1:{served.port}/x", headers={
                    "Host": ALICE_HOST, "Cookie": f"userland_origin={session}"}) as resp:
                assert resp.status == 200
    assert served.runner.counts.refused == {"connections": 0, "header_size": 0, "header_timeout": 0,
                                            "bad_request": 0}


async def test_websockets_per_user_are_capped(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", await echo_factory("alice"))
    await world.environment("vscode", "bob", await echo_factory("bob"))
    gw = await gateway_factory(max_websockets_per_user=3)
    alice = {"Host": ALICE_HOST, "Cookie": f"userland_origin={await origins.login('alice')}",
             "Origin": f"http://{ALICE_HOST}"}
    bob = {"Host": f"bob.{IDE_HOST}", "Cookie": f"userland_origin={await origins.login('bob')}",
           "Origin": f"http://bob.{IDE_HOST}"}
    opened = [await gw.ws_connect("/ws", headers=alice) for _ in range(3)]
    with pytest.raises(WSServerHandshakeError) as refused:
        await gw.ws_connect("/ws", headers=alice)
    assert refused.value.status == 429
    other = await gw.ws_connect("/ws", headers=bob)  # another student is not affected
    await other.send_str("hi")
    assert (await other.receive()).data == "bob:hi"
    await opened[0].close()

    async def room_again() -> Any:  # once the gateway has seen the close
        try:
            return await gw.ws_connect("/ws", headers=alice)
        except WSServerHandshakeError as err:
            assert err.status == 429
            return None
    again = await eventually(room_again, timeout=10)
    await again.send_str("hi")
    assert (await again.receive()).data == "alice:hi"
    for ws in [*opened[1:], other, again]:
        await ws.close()


def test_connections_are_counted_per_ipv4_address_and_per_ipv6_64() -> None:
    from userland.proxy.connections import client_key

    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key("") == ""
