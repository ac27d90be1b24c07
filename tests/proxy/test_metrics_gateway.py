"""The gateway's figures against what happened, in-process with the real control plane, Redis and
echo upstreams, read from its internal listener as Prometheus reads them (docs/metrics.md):
refusals by kind, the platform's own failures (the SLI) apart from an environment's own 5xx
and from the designed 503 of one still waking, open connections, Redis round trips and its
connection state, sessions counted in Redis, the API client's and the watches' figures."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.support import eventually
from tests.support.metrics import Samples, parse, value
from userland.auth.origin_sessions import OriginSessions
from userland.local.controlplane import ControlPlane, free_port
from userland.local.redisserver import redis_server
from userland.platform.clients.sessions import RedisSessionStore, Session

from .conftest import (
    IDE_HOST,
    PUBLIC_URL,
    SECRET,
    EchoFactory,
    GatewayFactory,
    InternalOf,
    Origins,
    World,
    origin_cookie,
)

ALICE_HOST = f"alice.{IDE_HOST}"
HTML = {"Accept": "text/html"}
Gateway = TestClient[web.Request, web.Application]


async def samples(internal: Gateway) -> Samples:
    return parse(await (await internal.get("/metrics")).text())


def get(found: Samples, name: str, **labels: str) -> float:
    return value(found, name, **{"worker": "0", **labels})


async def test_refusals_by_kind_and_failures_apart_from_answers(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        internal_of: InternalOf, namespace: str) -> None:
    echo = await echo_factory("alice-upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    await world.userland("vscode", "bob", ready=False)
    await world.userland("vscode", "carl")
    await world.service("vscode", "carl", upstream=f"http://127.0.0.1:{free_port()}")  # nobody listens
    gw = await gateway_factory()
    internal = await internal_of(gw)
    alice = origin_cookie(await origins.login("alice"))
    bob = origin_cookie(await origins.login("bob"))
    carl = origin_cookie(await origins.login("carl"))
    dora = origin_cookie(await origins.login("dora", f"http://dora.{IDE_HOST}"))

    async def status(host: str, path: str = "/", **headers: str) -> int:
        resp = await gw.get(path, headers={"Host": host, **headers}, allow_redirects=False)
        await resp.read()
        return resp.status

    assert await status(ALICE_HOST, **alice) == 200
    assert await status(ALICE_HOST, **HTML) == 302  # nobody signed in: on to the sign-in
    assert await status(ALICE_HOST, "/api") == 401
    assert await status(ALICE_HOST, **bob, **HTML) == 403  # bob at alice's origin
    assert await status(f"dora.{IDE_HOST}", **dora, **HTML) == 403  # dora has no environment
    resp = await gw.post("/api", headers={"Host": ALICE_HOST, **alice, "Origin": "http://evil.example"})
    assert resp.status == 403  # from another site
    assert await status(ALICE_HOST, Cookie=f"{alice['Cookie']}; {alice['Cookie']}") == 400  # twice
    assert await status(f"bob.{IDE_HOST}", "/api", **bob) == 503  # still starting: the designed 503
    assert await status(f"bob.{IDE_HOST}", **bob, **HTML) == 200  # its waking page
    assert await status(f"carl.{IDE_HOST}", **carl, **HTML) == 502  # the platform failed carl
    found = await samples(internal)
    for kind, reason, count in (("auth", "no_session", 2), ("auth", "not_yours", 1),
                                ("auth", "no_environment", 1), ("origin", "cross_site", 1),
                                ("origin", "cookie_twice", 1), ("limits", "busy", 0)):
        assert get(found, "userland_gateway_refusals_total", kind=kind, reason=reason) == count, reason
    # Only carl's 502 is the platform's own failure; bob's 503 says "wait", by design.
    assert get(found, "userland_gateway_requests_total", code_class="5xx") == 2
    assert get(found, "userland_gateway_failed_requests_total") == 1
    assert get(found, "userland_gateway_upstream_errors_total", kind="refused") == 1
    assert get(found, "userland_gateway_waiting_answers_total", course=namespace) == 2
    # The platform's parts: the API client's requests and the watches.
    platform = {"component": "gateway"}
    assert get(found, "userland_kube_requests_total", verb="list", resource="Userland", code="200",
               **platform) >= 1
    assert get(found, "userland_watch_healthy", resource="Service", **platform) == 1
    assert get(found, "userland_redis_command_duration_seconds_count", **platform) >= 1
    await eventually(lambda: _redis_connected(internal, 1), timeout=20)


async def test_an_environment_s_own_5xx_is_not_the_platform_s_failure(
        world: World, gateway_factory: GatewayFactory, origins: Origins, internal_of: InternalOf) -> None:
    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="the student's app crashed on this request")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", broken)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        await world.template("vscode", host=IDE_HOST)
        await world.userland("vscode", "alice")
        await world.service("vscode", "alice", upstream=f"http://127.0.0.1:{server.port}")
        gw = await gateway_factory()
        internal = await internal_of(gw)
        alice = origin_cookie(await origins.login("alice"))
        resp = await gw.get("/", headers={"Host": ALICE_HOST, **alice})
        assert resp.status == 500
        found = await samples(internal)
        assert get(found, "userland_gateway_requests_total", code_class="5xx") == 1
        assert get(found, "userland_gateway_failed_requests_total") == 0
    finally:
        await server.close()


async def test_redis_down(world: World, gateway_factory: GatewayFactory, internal_of: InternalOf,
                          tmp_path: Path) -> None:
    await world.template("vscode", host=IDE_HOST)
    with redis_server(tmp_path) as own_redis:
        gw = await gateway_factory(ns_redis_url=own_redis)
        internal = await internal_of(gw)
        # Up once its subscription is (a moment after the gateway starts).
        await eventually(lambda: _redis_connected(internal, 1), timeout=20)
        before = get(await samples(internal), "userland_redis_errors_total", kind="connection",
                     component="gateway")
    # Redis stopped: the subscription notices within a second or two; lookups fail, closed.
    await eventually(lambda: _redis_connected(internal, 0), timeout=20)
    resp = await gw.get("/", headers={"Host": ALICE_HOST, "Cookie": "userland_origin=" + "x" * 43, **HTML})
    assert resp.status == 503
    found = await samples(internal)
    assert get(found, "userland_redis_errors_total", kind="connection", component="gateway") > before
    assert get(found, "userland_gateway_failed_requests_total") == 1


async def _redis_connected(internal: Gateway, wanted: float) -> bool:
    return get(await samples(internal), "userland_gateway_redis_connected") == wanted


async def test_sessions_are_counted_in_redis(world: World, gateway_factory: GatewayFactory,
                                            internal_of: InternalOf, tmp_path: Path) -> None:
    await world.template("vscode", host=IDE_HOST)
    with redis_server(tmp_path) as own_redis:
        client = redis.asyncio.from_url(own_redis)
        store = RedisSessionStore(client, 3600)
        origin_sessions = OriginSessions(client, 3600)
        for login in ("ann", "bob", "cat"):
            cookie = await store.save(Session(login=login, github_id=1, role="student", csrf="c",
                                              created=time.time()))
            if login != "cat":  # ann and bob opened their environment: an origin session each
                origin = f"http://{login}.{IDE_HOST}"
                assert await origin_sessions.redeem(await origin_sessions.issue_code(cookie, origin, "/"),
                                                    origin)
        gw = await gateway_factory(ns_redis_url=own_redis)
        internal = await internal_of(gw)

        async def counted() -> tuple[float, float] | None:
            found = await samples(internal)
            platform = get(found, "userland_gateway_sessions", kind="platform")
            origin = get(found, "userland_gateway_sessions", kind="origin")
            return (platform, origin) if platform else None

        assert await eventually(counted) == (3, 2)
        await client.aclose()


async def _internal_text(http: aiohttp.ClientSession, port: int) -> str | None:
    try:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            return await resp.text() if resp.status == 200 else None
    except aiohttp.ClientError:
        return None


@pytest.mark.slow
async def test_userland_gateway_counts_open_connections_and_refusals_below_aiohttp(
        world: World, control_plane: ControlPlane, namespace: str, redis_url: str, tmp_path: Path) -> None:
    """The real `userland gateway` (its GatewayRunner counts connections), and `--no-metrics`."""
    await world.template("vscode", host=IDE_HOST)
    env = {**os.environ, "USERLAND_IDENTITY_SECRET": SECRET, "USERLAND_PUBLIC_URL": PUBLIC_URL,
           "USERLAND_REDIS_URL": redis_url, "USERLAND_NAMESPACES": namespace,
           "USERLAND_UPSTREAM_MODE": "local", "USERLAND_COOKIE_SECURE": "false",
           "USERLAND_MAX_HEADER_BYTES": "4096"}
    processes = []
    ports = {}
    try:
        for name, extra in (("on", []), ("off", ["--no-metrics"])):
            port, internal = free_port(), free_port()
            log = (tmp_path / f"{name}.log").open("wb")
            processes.append(await asyncio.create_subprocess_exec(
                str(Path(sys.executable).parent / "userland"), "gateway", "--listen", f"127.0.0.1:{port}",
                "--kubeconfig", str(control_plane.kubeconfig), "--grace", "0", *extra,
                env={**env, "USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{internal}"}, stdout=log, stderr=log))
            ports[name] = (port, internal)
        async with aiohttp.ClientSession() as http:
            port, internal = ports["on"]
            await eventually(lambda: _internal_text(http, internal), timeout=60)
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            await eventually(lambda: _samples_when(http, internal, "userland_gateway_connections_open",
                                                   lambda v: v == 3), timeout=20)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8000 + b"\r\n\r\n")
            assert (await reader.read(1024)).startswith(b"HTTP/1.1 431")
            writer.close()
            found = await eventually(lambda: _samples_when(
                http, internal, "userland_gateway_refusals_total", lambda v: v == 1, kind="limits",
                reason="header_size"), timeout=20)
            for _, held_writer in held:
                held_writer.close()
            await eventually(lambda: _samples_when(http, internal, "userland_gateway_connections_open",
                                                   lambda v: v == 0), timeout=20)
            assert found
            # Without metrics: the page is empty, the gateway serves all the same.
            port, internal = ports["off"]
            await eventually(lambda: _healthy(http, internal), timeout=60)
            async with http.get(f"http://127.0.0.1:{internal}/metrics") as resp:
                assert resp.status == 200 and await resp.text() == ""
    finally:
        for process in processes:
            if process.returncode is None:
                process.terminate()
                await process.wait()


async def _healthy(http: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def _samples_when(http: aiohttp.ClientSession, port: int, name: str, wanted: Any, **labels: str) -> Any:
    text = await _internal_text(http, port)
    if text is None:
        return None
    found = parse(text)
    return found if wanted(get(found, name, **labels)) else None
