"""Attack review of issue 17: internal endpoints chosen by a client-controlled Host.

`/healthz`, `/metrics` and `/auth/verify` answered on the public listener for "internal" hosts
(an IP address, a name without dots, `*.svc`), and the client says what the host is: `Host:
gateway`, no Host at all (HTTP/1.0: aiohttp then takes the listening address, an IP), or an
absolute-form request line (`GET http://gateway/metrics HTTP/1.1`: aiohttp takes the target's
host over the Host header). Anyone on the internet read the metrics (who is active, how many
WebSockets, error rates) and could probe forward-auth. Now they are served on a listener of
their own (USERLAND_INTERNAL_LISTEN), and the public listener answers a request whose target
is not a path, or that has no Host, with a 400: the route comes from the Host header only.

Real: the gateway app served by `GatewayRunner` (what `userland gateway` runs) on a loopback
port, its internal app on another, the control plane and Redis behind them, an echo upstream,
and raw TCP clients that write exactly the bytes of each attack.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from userland.platform.clients.kube import KubeClient
from userland.proxy.app import RUNNER_KWARGS, create_app, create_internal_app
from userland.proxy.connections import ConnectionLimits, GatewayRunner

from .conftest import IDE_HOST, PUBLIC_HOST, EchoFactory, Origins, World, gateway_settings

ALICE_HOST = f"alice.{IDE_HOST}"
Send = Callable[[int, bytes], Awaitable[bytes]]


@pytest.fixture
async def ports(kube: KubeClient, namespace: str, redis_url: str) -> AsyncIterator[tuple[int, int]]:
    """(public port, internal port) of one gateway process, as `userland gateway` serves it."""
    settings = gateway_settings(namespace, redis_url)
    app = create_app(settings, kube=kube)
    public = GatewayRunner(app, limits=ConnectionLimits.from_settings(settings), **RUNNER_KWARGS)
    await public.setup()
    await web.TCPSite(public, "127.0.0.1", 0).start()
    internal = web.AppRunner(create_internal_app(app), access_log=None)
    await internal.setup()
    await web.TCPSite(internal, "127.0.0.1", 0).start()
    try:
        yield public.addresses[0][1], internal.addresses[0][1]
    finally:
        await internal.cleanup()
        await public.cleanup()


async def send(port: int, request: bytes) -> bytes:
    """One request as raw bytes on a new connection; the whole answer (the server closes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


METRICS_MARK = b"userland_gateway_requests_total"

# Every way a client could make the public listener think a request is for an internal host.
ATTACKS = {
    "Host: gateway": b"GET /metrics HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n",
    "Host: the pod address": b"GET /metrics HTTP/1.1\r\nHost: 10.1.2.3:8080\r\nConnection: close\r\n\r\n",
    "Host: a Service name": b"GET /metrics HTTP/1.1\r\nHost: userland-gateway.userland-system.svc\r\n"
                            b"Connection: close\r\n\r\n",
    "Host: localhost": b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    "empty Host": b"GET /metrics HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n",
    "HTTP/1.0 without Host": b"GET /metrics HTTP/1.0\r\n\r\n",
    "absolute-form naming an internal host": b"GET http://gateway/metrics HTTP/1.1\r\n"
                                             b"Host: userland.test\r\nConnection: close\r\n\r\n",
    "absolute-form naming the pod address": b"GET http://127.0.0.1/metrics HTTP/1.1\r\n"
                                            b"Host: userland.test\r\nConnection: close\r\n\r\n",
    "absolute-form forward-auth": b"GET http://10.0.0.1/auth/verify HTTP/1.1\r\nHost: userland.test\r\n"
                                  b"Connection: close\r\n\r\n",
    "authority-form": b"CONNECT gateway:80 HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n",
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_the_public_listener_never_serves_internal_endpoints(ports: tuple[int, int],
                                                                   attack: str) -> None:
    public, _ = ports
    answer = await send(public, ATTACKS[attack])
    # Before: 200 with the metrics (or health, or forward-auth's 401) for all but the empty Host.
    assert status(answer) in (400, 404), answer[:200]
    assert METRICS_MARK not in answer and answer.rsplit(b"\r\n\r\n", 1)[-1] != b"ok\n"
    assert b"not signed in" not in answer


async def test_the_internal_listener_serves_them(ports: tuple[int, int]) -> None:
    public, internal = ports
    await send(public, b"GET / HTTP/1.1\r\nHost: nowhere.example\r\nConnection: close\r\n\r\n")
    metrics = await send(internal, b"GET /metrics HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
    assert status(metrics) == 200 and METRICS_MARK in metrics
    health = await send(internal, b"GET /healthz HTTP/1.1\r\nHost: 10.1.2.3\r\nConnection: close\r\n\r\n")
    assert status(health) == 200 and health.endswith(b"ok\n")
    verify = await send(internal, b"GET /auth/verify HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status(verify) == 401


async def test_an_absolute_form_target_never_routes_otherwise_than_the_host_header(
        ports: tuple[int, int], world: World, echo_factory: EchoFactory, origins: Origins) -> None:
    """alice's browser (or a script holding her cookie) cannot be routed by the request line to
    another host than the one its Host header names, nor the other way round."""
    public, _ = ports
    await world.template("vscode", host=IDE_HOST)
    alice_env = await echo_factory("alice-env")
    await world.environment("vscode", "alice", alice_env)
    cookie = await origins.login("alice")
    head = f"Cookie: userland_origin={cookie}\r\nConnection: close\r\n\r\n".encode()
    # Her own origin by its Host header, in origin-form: her environment answers (once the
    # routing cache has it from its watches).
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        answer = await send(public, f"GET /x HTTP/1.1\r\nHost: {ALICE_HOST}\r\n".encode() + head)
        if status(answer) == 200 or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert status(answer) == 200 and b'"upstream": "alice-env"' in answer
    for target, host in ((f"http://{ALICE_HOST}/x", PUBLIC_HOST), (f"http://{PUBLIC_HOST}/x", ALICE_HOST),
                         (f"http://{ALICE_HOST}/x", ALICE_HOST), (f"http://{ALICE_HOST}:80/x", ALICE_HOST)):
        answer = await send(public, f"GET {target} HTTP/1.1\r\nHost: {host}\r\n".encode() + head)
        assert status(answer) == 400, (target, host, answer[:200])
    assert len(alice_env.requests) == 1
