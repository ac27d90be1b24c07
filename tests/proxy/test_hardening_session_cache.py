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
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.support import eventually
from userland.local.redisserver import redis_server
from userland.platform.clients.redis_pool import connect_redis
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.proxy.app import SESSION_CACHE
from userland.proxy.session_cache import MISSED_PINGS, PING_INTERVAL, SessionCache

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
        own_redis: tuple[str, Path], caplog: pytest.LogCaptureFixture) -> None:
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
    with caplog.at_level("WARNING", logger="userland.proxy.session_cache"):
        os.kill(int((state / "redis.pid").read_text()), signal.SIGKILL)
        await eventually(lambda: _port_closed(url))
        # The gateway learns it when the channel's connection closes (not from pings going
        # unanswered, which take three intervals): waited for, not guessed at by a sleep.
        await eventually(lambda: not cache.serving)
    lost = [r for r in caplog.records if r.getMessage().startswith("session invalidation channel lost")]
    # (Each of the gateway's caches, platform and origin sessions, has its channel.)
    assert lost and {getattr(r, "error", None) for r in lost} == {"ConnectionError"}, lost
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
    # The invalidation's way through Redis, waited for: the other replica drops the entry when it
    # hears of it (one that merely ran out of its 1 s TTL would stay until it is next looked up).
    await eventually(lambda: len(two.app[SESSION_CACHE]) == 0)  # type: ignore[index]
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
        await eventually(lambda: not cache.serving)
        (tmp_path / "r.pid").unlink(missing_ok=True)
        start()
        cookie_id = await _save(url, "alice")
        await eventually(lambda: cache.serving)
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
            from userland.platform.clients.sessions import SessionStoreUnavailable
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
    from userland.platform.clients.sessions import SessionStoreUnavailable
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


@contextlib.asynccontextmanager
async def listening_cache(url: str) -> AsyncIterator[SessionCache[Session]]:
    """A session cache on its invalidation channel to the Redis at `url`, serving."""
    async def lookup(_: object) -> None:
        return None

    client = connect_redis(url)
    cache: SessionCache[Session] = SessionCache(lookup, COOKIE, redis_client=client)
    lifetime = cache.running()
    await lifetime.__anext__()
    try:
        await eventually(lambda: cache.serving)
        yield cache
    finally:
        with contextlib.suppress(StopAsyncIteration):
            await lifetime.__anext__()
        await client.aclose()


def _lost(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Why each "channel lost" said so (its error's kind)."""
    return [str(getattr(r, "error", "")) for r in caplog.records
            if r.getMessage().startswith("session invalidation channel lost")]


@pytest.mark.redis  # its own redis-server
async def test_a_redis_that_stops_answering_pings_turns_the_cache_off(
        own_redis: tuple[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    """Redis hangs (a partition: its connections stay open, nothing answers): the channel's
    pings go unanswered, and the cache stops serving from memory by itself, no lookup needed."""
    url, state = own_redis
    async with listening_cache(url) as cache:
        pid = int((state / "redis.pid").read_text())
        with caplog.at_level("WARNING", logger="userland.proxy.session_cache"):
            os.kill(pid, signal.SIGSTOP)
            try:
                await eventually(lambda: not cache.serving)
            finally:
                os.kill(pid, signal.SIGCONT)
        assert _lost(caplog) == ["TimeoutError"]


@pytest.mark.redis  # its own redis-server
async def test_a_gateway_whose_event_loop_lags_keeps_its_cache_while_redis_answers(
        own_redis: tuple[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    """A flood saturates the gateway: its event loop turns seconds apart. Redis answers every
    ping all the while, so the cache stays on (it went off: the time since the last answer was
    the gateway's own lag, and every request then asked Redis, under the very flood)."""
    url, _ = own_redis
    observer = redis.asyncio.from_url(url)
    try:
        async with listening_cache(url) as cache:
            with caplog.at_level("WARNING", logger="userland.proxy.session_cache"):
                # The loop stalls for longer than the unanswered pings take, as a saturated one does.
                time.sleep(PING_INTERVAL * MISSED_PINGS + 1.5)  # noqa: ASYNC251
                pings = await _pings(observer)
                # Then runs: the channel pings again and hears the answers (Redis counts them).
                await eventually(lambda: _more_pings(observer, pings + 2))
                assert cache.serving
            assert _lost(caplog) == []
    finally:
        await observer.aclose()


async def _pings(observer: redis.asyncio.Redis) -> int:
    return int((await observer.info("commandstats")).get("cmdstat_ping", {}).get("calls", 0))


async def _more_pings(observer: redis.asyncio.Redis, wanted: int) -> bool:
    return await _pings(observer) >= wanted
