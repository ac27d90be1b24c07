"""The session cache fails closed (issue 7 part 7): with Redis gone no cached session passes,
and a logout on one replica is refused by every other at once.

Real: a redis-server of this test's own (so it can be killed), two gateway apps sharing it,
the control plane, and an echo upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.support import eventually
from userland.local.redisserver import redis_server
from userland.platform.sessions import RedisSessionStore, Session
from userland.proxy.app import SESSION_CACHE

from .conftest import PUBLIC_HOST, EchoFactory, GatewayFactory, World

IDE_HOST = "ide.test"
COOKIE = "userland_session"


@pytest.fixture
def own_redis() -> Iterator[tuple[str, Path]]:
    state = Path(tempfile.mkdtemp(prefix="userland-redis-killable-"))
    with redis_server(state) as url:
        yield url, state


def _port_closed(url: str) -> bool:
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    try:
        with socket.create_connection(("127.0.0.1", port), 0.2):
            return False
    except OSError:
        return True


async def _save(url: str, login: str) -> str:
    client = redis.asyncio.from_url(url)
    for _ in range(100):
        with contextlib.suppress(redis.exceptions.ConnectionError):
            await client.ping()
            break
        await asyncio.sleep(0.05)
    try:
        return await RedisSessionStore(client, 3600).save(Session(
            login=login, github_id=7, role="student", csrf="csrf-token", created=time.time()))
    finally:
        await client.aclose()


async def test_with_redis_gone_a_cached_session_gets_503_at_once(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
        own_redis: tuple[str, Path]) -> None:
    url, state = own_redis
    echo = await echo_factory("alice")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    cookie_id = await _save(url, "alice")
    gw = await gateway_factory(ns_redis_url=url, web_url=echo.url)
    cache = gw.app[SESSION_CACHE]  # type: ignore[index]
    await eventually(lambda: getattr(cache, "serving", True))  # (base commit: no such flag)
    headers = {"Host": PUBLIC_HOST, "Cookie": f"{COOKIE}={cookie_id}"}
    assert (await gw.get("/", headers=headers)).status == 200  # the session is cached now
    assert len(cache) == 1
    os.kill(int((state / "redis.pid").read_text()), signal.SIGKILL)
    await eventually(lambda: _port_closed(url))
    # The gateway learns it when the channel's connection closes: one turn of its event loop.
    await asyncio.sleep(0.02)
    killed = time.monotonic()
    statuses = []
    while time.monotonic() - killed < 1.2:  # longer than the cache's TTL
        statuses.append((await gw.get("/", headers=headers, allow_redirects=False)).status)
    assert set(statuses) == {503}, statuses
    assert len(echo.requests) == 1


async def test_a_failed_redis_check_ends_every_cached_session(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
        own_redis: tuple[str, Path]) -> None:
    """Without the channel noticing (a network partition): the first failed lookup is enough."""
    url, state = own_redis
    echo = await echo_factory("alice")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    cookie_id = await _save(url, "alice")
    gw = await gateway_factory(ns_redis_url=url, web_url=echo.url)
    cache = gw.app[SESSION_CACHE]  # type: ignore[index]
    await eventually(lambda: getattr(cache, "serving", True))  # (base commit: no such flag)
    headers = {"Host": PUBLIC_HOST, "Cookie": f"{COOKIE}={cookie_id}"}
    assert (await gw.get("/", headers=headers)).status == 200  # cached
    pid = int((state / "redis.pid").read_text())
    os.kill(pid, signal.SIGSTOP)  # Redis hangs: connections stay open, nothing answers
    try:
        other = {"Host": PUBLIC_HOST, "Cookie": f"{COOKIE}={'b' * 43}"}
        assert (await gw.get("/", headers=other, allow_redirects=False)).status == 503
        assert (await gw.get("/", headers=headers, allow_redirects=False)).status == 503
    finally:
        os.kill(pid, signal.SIGCONT)
    assert len(echo.requests) == 1


async def test_a_logout_on_one_replica_is_refused_by_the_other_at_once(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
        own_redis: tuple[str, Path]) -> None:
    url, _ = own_redis
    echo = await echo_factory("alice")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    cookie_id = await _save(url, "alice")
    one = await gateway_factory(ns_redis_url=url, web_url=echo.url)
    two = await gateway_factory(ns_redis_url=url, web_url=echo.url)
    for gw in (one, two):
        await eventually(lambda gw=gw: getattr(gw.app[SESSION_CACHE], "serving", True))  # type: ignore[misc]
    headers = {"Host": PUBLIC_HOST, "Cookie": f"{COOKIE}={cookie_id}"}
    for gw in (one, two):
        assert (await gw.get("/", headers=headers)).status == 200  # cached on both
    resp = await one.post("/auth/logout", data={"csrf": "csrf-token"},
                          headers={"Host": PUBLIC_HOST, "Cookie": f"{COOKIE}={cookie_id}"},
                          allow_redirects=False)
    assert resp.status == 303  # on through the student's origins (their Clear-Site-Data)
    await asyncio.sleep(0.05)  # the invalidation's way through Redis (the cache's TTL is 1 s)
    resp = await two.get("/", headers=headers, allow_redirects=False)
    # Signed out: the web UI gets the request without any identity.
    assert resp.status == 200 and len(echo.requests) == 3
    assert not [v for k, v in echo.requests[-1]["headers"] if k.lower() == "x-user"]


async def test_the_cache_serves_again_once_redis_is_back(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """After a Redis restart the cache comes back on by itself (and sessions were lost with Redis)."""
    from userland.local.controlplane import free_port

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"

    def start() -> None:
        import subprocess
        subprocess.run(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--daemonize", "yes", "--pidfile", str(tmp_path / "r.pid"),
                        "--dir", str(tmp_path), "--logfile", str(tmp_path / "r.log")], check=True)

    start()
    try:
        echo = await echo_factory("alice")
        await world.template("vscode", host=IDE_HOST)
        await world.environment("vscode", "alice", echo)
        gw = await gateway_factory(ns_redis_url=url, web_url=echo.url)
        cache: Any = gw.app[SESSION_CACHE]  # type: ignore[index]
        await eventually(lambda: getattr(cache, "serving", True))  # (base commit: no such flag)
        os.kill(int((tmp_path / "r.pid").read_text()), signal.SIGKILL)
        await eventually(lambda: not cache.serving, timeout=5)
        (tmp_path / "r.pid").unlink(missing_ok=True)
        start()
        cookie_id = await _save(url, "alice")
        await eventually(lambda: cache.serving, timeout=10)
        headers = {"Host": PUBLIC_HOST, "Cookie": f"{COOKIE}={cookie_id}"}
        assert (await gw.get("/", headers=headers)).status == 200
        assert len(cache) == 1
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((tmp_path / "r.pid").read_text()), signal.SIGKILL)


# -- the cache's rules, without the network ---------------------------------------------------


class _Lookup:
    """A lookup that can fail, or have its session cleared while it is in flight."""

    def __init__(self, cache_ref: list[Any]) -> None:
        self.cache_ref = cache_ref
        self.calls = 0
        self.down = False
        self.clear_during: str | None = None

    async def __call__(self, request: Any) -> Session | None:
        self.calls += 1
        if self.down:
            from userland.platform.sessions import SessionStoreUnavailable
            raise SessionStoreUnavailable("down")
        if self.clear_during is not None:
            import hashlib
            self.cache_ref[0].invalidate(hashlib.sha256(self.clear_during.encode()).hexdigest())
        return Session(login="alice", github_id=1, role="student", csrf="c", created=0.0)


def _request(cookie_id: str) -> Any:
    from aiohttp.test_utils import make_mocked_request
    return make_mocked_request("GET", "/", headers={"Cookie": f"{COOKIE}={cookie_id}"})


async def test_a_session_cleared_while_its_lookup_is_in_flight_is_not_kept() -> None:
    from userland.proxy.session_cache import SessionCache

    ref: list[Any] = []
    lookup = _Lookup(ref)
    cache = SessionCache(lookup, COOKIE, ttl=60)
    ref.append(cache)
    lookup.clear_during = "abc"
    assert await cache(_request("abc")) is not None  # answered...
    assert len(cache) == 0  # ...but not kept
    lookup.clear_during = None
    await cache(_request("abc"))
    await cache(_request("abc"))
    assert lookup.calls == 2 and len(cache) == 1  # looked up once more, then kept


async def test_one_failed_lookup_empties_the_cache_and_stops_serving_until_one_succeeds() -> None:
    from userland.platform.sessions import SessionStoreUnavailable
    from userland.proxy.session_cache import SessionCache

    lookup = _Lookup([])
    cache = SessionCache(lookup, COOKIE, ttl=60)
    await cache(_request("abc"))
    assert len(cache) == 1 and cache.serving
    lookup.down = True
    with pytest.raises(SessionStoreUnavailable):
        await cache(_request("other"))
    assert len(cache) == 0 and not cache.serving
    with pytest.raises(SessionStoreUnavailable):
        await cache(_request("abc"))  # was cached: asks Redis again, and fails closed
    lookup.down = False
    assert await cache(_request("abc")) is not None
    assert cache.serving
