"""One conformance suite for every SessionStore implementation (memory, real Redis)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from tests.support import eventually, free_port
from userland.platform.clients.sessions import (
    MemorySessionStore,
    RedisSessionStore,
    Session,
    SessionStore,
    SessionStoreUnavailable,
    connect_redis,
)
from userland.platform.model.keyspace import SESSION_PREFIX, session_key

TTL = 60


def make_session(login: str = "alice", **overrides: object) -> Session:
    values: dict[str, object] = {"login": login, "github_id": 42, "role": "student", "csrf": "c" * 43,
                                 "created": time.time(), "name": "Alice", "avatar_url": "https://x/a.png"}
    values.update(overrides)
    return Session(**values)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest,
                auth_redis: redis.asyncio.Redis) -> AsyncIterator[SessionStore]:
    if request.param == "memory":
        yield MemorySessionStore(TTL)
    else:
        yield RedisSessionStore(auth_redis, TTL)


async def test_save_then_load_returns_the_same_session(store: SessionStore) -> None:
    session = make_session(role="instructor")
    cookie_id = await store.save(session)
    assert await store.load(cookie_id) == session


async def test_cookie_ids_are_random_256_bit_tokens(store: SessionStore) -> None:
    ids = {await store.save(make_session()) for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 43 for i in ids)  # token_urlsafe(32): 32 random bytes


async def test_unknown_empty_and_garbage_ids_load_none(store: SessionStore) -> None:
    await store.save(make_session())
    for cookie_id in ("", "nope", "x" * 5000, "é" * 10):
        assert await store.load(cookie_id) is None


async def test_clear_forgets_only_that_session(store: SessionStore) -> None:
    one, two = await store.save(make_session("one")), await store.save(make_session("two"))
    await store.clear(one)
    assert await store.load(one) is None
    loaded = await store.load(two)
    assert loaded is not None and loaded.login == "two"
    await store.clear(one)  # clearing twice is fine
    await store.clear("never-existed")


async def test_sessions_expire_after_the_ttl(auth_redis: redis.asyncio.Redis) -> None:
    now = [1000.0]
    memory = MemorySessionStore(TTL, clock=lambda: now[0])
    cookie_id = await memory.save(make_session())
    now[0] += TTL - 1
    assert await memory.load(cookie_id) is not None
    now[0] += 1
    assert await memory.load(cookie_id) is None

    store = RedisSessionStore(auth_redis, TTL)
    cookie_id = await store.save(make_session())
    assert TTL - 2 <= await auth_redis.ttl(session_key(cookie_id)) <= TTL
    short = RedisSessionStore(auth_redis, 1)
    cookie_id = await short.save(make_session())
    await eventually(lambda: _gone(short, cookie_id), timeout=10)  # Redis expires it after a second


async def _gone(store: RedisSessionStore, cookie_id: str) -> bool:
    return await store.load(cookie_id) is None


async def test_redis_keeps_only_a_hash_of_the_cookie_id(auth_redis: redis.asyncio.Redis) -> None:
    cookie_id = await RedisSessionStore(auth_redis, TTL).save(make_session())
    keys = [k.decode() for k in await auth_redis.keys("*")]
    assert keys == [SESSION_PREFIX + hashlib.sha256(cookie_id.encode()).hexdigest()]
    assert cookie_id.encode() not in await auth_redis.get(keys[0])


async def test_a_corrupt_record_loads_as_none(auth_redis: redis.asyncio.Redis) -> None:
    store = RedisSessionStore(auth_redis, TTL)
    cookie_id = await store.save(make_session())
    wrong_role = b'{"login": "a", "role": "root", "github_id": 1, "csrf": "x", "created": 1}'
    for junk in (b"not json", b"[]", wrong_role):
        await auth_redis.set(session_key(cookie_id), junk)
        assert await store.load(cookie_id) is None


@pytest.fixture
async def dead_redis() -> AsyncIterator[redis.asyncio.Redis]:
    # Nothing listens on this port: every command fails to connect.
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0")
    yield client
    await client.aclose()


class DroppingRedis:
    """An address where Redis was: every connection is accepted and closed at once (a server
    going down, a proxy with nothing behind it); `connections` counts them."""

    def __init__(self) -> None:
        self.connections = 0

    async def _drop(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._drop, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    async def __aexit__(self, *_: object) -> None:
        self._server.close()
        await self._server.wait_closed()


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_an_unreachable_store_raises_session_store_unavailable(
        kind: str, dead_redis: redis.asyncio.Redis) -> None:
    store: SessionStore
    if kind == "memory":
        memory = MemorySessionStore(TTL)
        memory.available = False
        store = memory
    else:
        store = RedisSessionStore(dead_redis, TTL)
    with pytest.raises(SessionStoreUnavailable):
        await store.save(make_session())
    with pytest.raises(SessionStoreUnavailable):
        await store.load("a" * 43)
    with pytest.raises(SessionStoreUnavailable):
        await store.clear("a" * 43)


async def test_a_store_whose_redis_is_gone_fails_fast_asking_twice_not_retrying_for_long() -> None:
    """No long retry loop per request (a client retrying with a backoff kept every request waiting
    seconds for its 503): a command is tried once more at once (a pooled connection gone stale
    when Redis restarted), then fails. Counted in connections, not seconds: at most two tries of
    the command, each connecting at most twice (redis-py retries a connection's handshake too)."""
    dropping = DroppingRedis()
    async with dropping as url:
        client = connect_redis(url)
        try:
            store = RedisSessionStore(client, TTL)
            with pytest.raises(SessionStoreUnavailable):
                await store.save(make_session())
            assert 1 <= dropping.connections <= 4
            with pytest.raises(SessionStoreUnavailable):
                await store.load("a" * 43)
            assert 2 <= dropping.connections <= 8
        finally:
            await client.aclose()
