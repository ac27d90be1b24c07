"""The session cache: what it saves, and that revocation stays correct (session_cache.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from tests.support import eventually
from userland.platform.clients.sessions import Session, SessionStoreBusy, SessionStoreUnavailable
from userland.platform.model.keyspace import session_key
from userland.proxy.session_cache import SESSION_CACHE_TTL, SessionCache

from .conftest import IDE_HOST, PUBLIC_HOST, EchoFactory, GatewayFactory, Origins, World, origin_cookie

ALICE_HOST = "alice.ide.test"  # alice's origin under the Template host
COOKIE = "userland_session"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def session(login: str) -> Session:
    return Session(login=login, github_id=1, role="student", csrf="c", created=0.0)


def request_with(cookie_id: str | None) -> web.Request:
    headers = {"Cookie": f"{COOKIE}={cookie_id}; other=1"} if cookie_id else {}
    return make_mocked_request("GET", "/", headers=headers)


class Lookup:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.calls = 0
        self.down = False

    async def __call__(self, request: web.Request) -> Session | None:
        self.calls += 1
        if self.down:
            raise SessionStoreUnavailable("down")
        return self.sessions.get(request.cookies.get(COOKIE, ""))


async def test_found_sessions_are_kept_for_the_ttl_only() -> None:
    lookup, clock = Lookup(), Clock()
    cache = SessionCache(lookup, COOKIE, ttl=1.0, clock=clock)
    lookup.sessions["abc"] = session("alice")
    assert (await cache(request_with("abc"))).login == "alice"  # type: ignore[union-attr]
    assert (await cache(request_with("abc"))).login == "alice"  # type: ignore[union-attr]
    assert lookup.calls == 1
    del lookup.sessions["abc"]  # revoked elsewhere
    clock.now += 0.5
    assert await cache(request_with("abc")) is not None  # still inside the second
    clock.now += 0.6
    assert await cache(request_with("abc")) is None  # refused after at most the TTL
    assert lookup.calls == 2


async def test_unknown_cookies_are_remembered_briefly_missing_cookies_and_errors_never() -> None:
    lookup, clock = Lookup(), Clock()
    cache = SessionCache(lookup, COOKIE, ttl=1.0, clock=clock, negative_ttl=5.0)
    assert await cache(request_with("nope")) is None
    assert await cache(request_with("nope")) is None  # no second Redis round trip
    assert lookup.calls == 1
    clock.now += 5.1
    assert await cache(request_with("nope")) is None  # asked again once the 5 s are over
    assert lookup.calls == 2
    assert await cache(request_with(None)) is None
    assert await cache(request_with(None)) is None
    assert lookup.calls == 4 and len(cache) == 0
    lookup.down = True
    with pytest.raises(SessionStoreUnavailable):
        await cache(request_with("abc"))
    lookup.down = False
    lookup.sessions["abc"] = session("alice")
    assert await cache(request_with("abc")) is not None


async def test_a_flood_of_made_up_cookies_keeps_the_negative_cache_bounded() -> None:
    lookup, clock = Lookup(), Clock()
    cache = SessionCache(lookup, COOKIE, ttl=1.0, clock=clock, max_entries=100)
    for i in range(1000):
        assert await cache(request_with(f"made-up-{i}")) is None
    assert len(cache._unknown) <= 100


async def test_a_busy_store_refuses_that_request_only_and_the_cache_keeps_serving() -> None:
    """`SessionStoreBusy` (this process could not get a Redis connection in time) is not Redis
    being down: the cached sessions keep being served (before: any failed lookup ended them)."""
    class Busy(Lookup):
        busy = False

        async def __call__(self, request: web.Request) -> Session | None:
            if self.busy:
                self.calls += 1
                raise SessionStoreBusy("pool in use")
            return await super().__call__(request)

    lookup, clock = Busy(), Clock()
    cache = SessionCache(lookup, COOKIE, ttl=1.0, clock=clock)
    lookup.sessions["abc"] = session("alice")
    assert await cache(request_with("abc")) is not None
    lookup.busy = True
    with pytest.raises(SessionStoreBusy):
        await cache(request_with("made-up"))
    assert cache.serving and len(cache) == 1
    assert (await cache(request_with("abc"))).login == "alice"  # type: ignore[union-attr]


async def test_forget_and_the_size_bound() -> None:
    lookup, clock = Lookup(), Clock()
    cache = SessionCache(lookup, COOKIE, ttl=1.0, max_entries=3, clock=clock)
    for i in range(5):
        lookup.sessions[f"id{i}"] = session(f"user{i}")
        await cache(request_with(f"id{i}"))
    assert len(cache) <= 3
    cache.forget(request_with("id4"))
    del lookup.sessions["id4"]
    assert await cache(request_with("id4")) is None


async def test_logout_through_the_gateway_is_refused_at_once(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        origins: Origins) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    platform_cookie = await sessions("alice")
    cookie = {"Cookie": f"{COOKIE}={platform_cookie}"}
    origin = origin_cookie(await origins.handoff(platform_cookie, f"http://{ALICE_HOST}"))
    assert (await gw.get("/", headers={"Host": ALICE_HOST, **origin})).status == 200  # now cached
    resp = await gw.post("/auth/logout", data={"csrf": "csrf-token"},
                         headers={"Host": PUBLIC_HOST, **cookie}, allow_redirects=False)
    assert resp.status == 303
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **origin}, allow_redirects=False)
    assert resp.status == 401
    assert len(echo.requests) == 1


async def test_a_session_deleted_in_redis_is_refused_within_the_ttl(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        redis_url: str, origins: Origins) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    cookie_id = await sessions("alice")
    headers = {"Host": ALICE_HOST, **origin_cookie(await origins.handoff(cookie_id, f"http://{ALICE_HOST}"))}
    assert (await gw.get("/", headers=headers)).status == 200
    # The session was cached during that request (the gateway runs in this process, on this
    # clock): its entry runs out SESSION_CACHE_TTL after the lookup began, so by this moment + TTL.
    cached_by = time.monotonic()
    client = redis.asyncio.from_url(redis_url)
    try:
        await client.delete(session_key(cookie_id))  # another replica's logout, an admin...
    finally:
        await client.aclose()
    statuses: list[tuple[float, int]] = []  # (when the request was sent, its status)

    async def refused() -> bool:
        sent = time.monotonic()
        statuses.append((sent, (await gw.get("/", headers=headers, allow_redirects=False)).status))
        return statuses[-1][1] == 401

    await eventually(refused, interval=0.02)
    # Answered from memory only while the entry lasted: every request sent after it ran out was
    # refused (a loaded machine sends fewer requests in that time, never a later 200).
    assert {status for _, status in statuses[:-1]} <= {200}, statuses
    assert all(sent < cached_by + SESSION_CACHE_TTL for sent, status in statuses if status == 200), (
        cached_by, statuses)


async def test_cookie_ids_are_remembered_per_cookie_header_and_bounded() -> None:
    lookup = Lookup()
    lookup.sessions["abc"] = session("alice")
    lookup.sessions["def"] = session("bob")
    cache = SessionCache(lookup, COOKIE, clock=Clock(), max_headers=2)
    assert cache._cookie_id(request_with("abc")) == "abc"
    assert cache._cookie_id(request_with("abc")) == "abc"
    assert cache._cookie_id(request_with("def")) == "def"
    assert cache._cookie_id(make_mocked_request("GET", "/", headers={"Cookie": "other=1"})) is None
    assert cache._cookie_id(make_mocked_request("GET", "/")) is None
    assert len(cache._ids) <= 2
    assert (await cache(request_with("abc"))) == session("alice")
    assert (await cache(request_with("def"))) == session("bob")
    long_header = make_mocked_request("GET", "/", headers={"Cookie": f"{COOKIE}=abc; pad={'x' * 5000}"})
    assert cache._cookie_id(long_header) == "abc" and all(len(k) <= 4096 for k in cache._ids)


class _SwallowingPubSub:
    """A pubsub whose wait turns the task's cancellation into a connection error, as redis-py
    can when it is interrupted mid-read (seen here: the cleanup of a gateway waited for ever), or
    (`quietly`) swallows it, its read returning nothing as when its own timeout ran out (redis-py
    8 on Python 3.11, about one cancellation in 30 against a real Redis under load); `reading` is
    set once a read waits."""

    def __init__(self, reading: asyncio.Event, quietly: bool = False) -> None:
        self.reading = reading
        self.quietly = quietly

    async def subscribe(self, *_: object) -> None:
        return None

    async def get_message(self, timeout: float) -> dict[str, str] | None:
        self.reading.set()
        try:
            await asyncio.sleep(timeout if self.quietly else 3600)
        except asyncio.CancelledError:
            if self.quietly:
                return None
            raise ConnectionError("connection lost while reading") from None
        return {"type": "pong"} if self.quietly else None  # Redis answers every ping

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class _SwallowingRedis:
    def __init__(self, quietly: bool = False) -> None:
        self.reading = asyncio.Event()
        self.quietly = quietly

    def pubsub(self) -> _SwallowingPubSub:
        return _SwallowingPubSub(self.reading, self.quietly)


@pytest.mark.parametrize("quietly", [False, True], ids=["as-an-error", "quietly"])
async def test_the_invalidation_listener_stops_even_when_redis_swallows_the_cancellation(
        quietly: bool) -> None:
    async def lookup(_: object) -> None:
        return None

    swallowing = _SwallowingRedis(quietly)
    cache = SessionCache(lookup, "c", redis_client=swallowing)  # type: ignore[arg-type]
    lifetime = cache.running()
    await lifetime.__anext__()
    await asyncio.wait_for(swallowing.reading.wait(), 30)  # the listener is inside get_message now
    listener = cache._listener
    assert listener is not None
    with contextlib.suppress(StopAsyncIteration):
        await lifetime.__anext__()
    # Without the fix the listener took the error for a lost connection, slept and retried for
    # ever, and the cleanup gave up on it after its bound.
    assert listener.done() and listener.cancelled()
