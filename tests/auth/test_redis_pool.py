"""The gateway's Redis pool (platform/redis_pool.py) against a real redis-server.

Commands that hold a connection for a while are `BLPOP` on an empty list (Redis answers after
its timeout), so a test knows exactly how many connections are in use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions

from tests.support import eventually
from userland.local.controlplane import free_port
from userland.platform.redis_pool import PoolExhausted, anonymous_client, connect_redis
from userland.platform.sessions import RedisSessionStore, SessionStoreBusy, SessionStoreUnavailable

HOLD = 1.5  # seconds a BLPOP holds its connection (under the client's 2 s read timeout)


@pytest.fixture
async def pool_of(redis_url: str) -> AsyncIterator[Callable[..., redis.asyncio.Redis]]:
    clients: list[redis.asyncio.Redis] = []

    def make(**kwargs: Any) -> redis.asyncio.Redis:
        client = connect_redis(redis_url, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


async def as_client(name: str | None, work: Awaitable[Any]) -> Any:
    """`work` as the Redis work of a request from anonymous client `name` (None: signed in)."""
    anonymous_client(None if name is None else (lambda: name))
    return await work


def hold(client: redis.asyncio.Redis, name: str | None) -> asyncio.Task[Any]:
    return asyncio.create_task(as_client(name, client.blpop(["userland-test:never"], timeout=HOLD)))


@pytest.fixture
async def blocked(redis_url: str) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    """`await blocked(n)`: wait until Redis holds n more blocked clients than when the test began
    (the holds have their connections: Redis itself says so)."""
    observer = redis.asyncio.from_url(redis_url)

    async def count() -> int:
        return int((await observer.info("clients"))["blocked_clients"])

    baseline = await count()

    async def wait(more: int) -> None:
        await eventually(lambda: _at_least(count(), baseline + more), timeout=HOLD)

    yield wait
    await observer.aclose()


async def _at_least(value: Awaitable[int], wanted: int) -> bool:
    return await value >= wanted


async def test_a_full_pool_waits_instead_of_failing(pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    client = pool_of(max_connections=2, timeout=5)
    # Before (redis-py's default pool): the third command at once raised "Too many connections".
    results = await asyncio.gather(*(client.blpop(["userland-test:never"], timeout=0.3) for _ in range(6)))
    assert results == [None] * 6


async def test_a_pool_that_stays_full_is_busy_not_down(pool_of: Callable[..., redis.asyncio.Redis],
                                                       blocked: Callable[[int], Awaitable[None]]) -> None:
    client = pool_of(max_connections=2, timeout=0.3)
    held = [hold(client, None), hold(client, None)]
    await blocked(2)
    started = time.monotonic()
    with pytest.raises(PoolExhausted):
        await client.get("userland-test:x")
    assert 0.25 < time.monotonic() - started < HOLD
    # The session store tells its callers "busy" (a 429), never "unavailable" (a 503).
    with pytest.raises(SessionStoreBusy):
        await RedisSessionStore(client, 60).load("x" * 43)
    await asyncio.gather(*held)
    assert await client.get("userland-test:x") is None  # free again


async def test_anonymous_work_has_a_bounded_share_per_client_and_in_all(
        pool_of: Callable[..., redis.asyncio.Redis], blocked: Callable[[int], Awaitable[None]]) -> None:
    client = pool_of(max_connections=8, timeout=0.3, anonymous=2, per_client=1)
    mallory = hold(client, "mallory")
    await blocked(1)
    # Mallory's second command waits for her one slot, then gives up: busy, for her only.
    with pytest.raises(PoolExhausted):
        await as_client("mallory", client.get("userland-test:x"))
    # Another client has its own slot; the two of them fill the anonymous share ...
    trudy = hold(client, "trudy")
    await blocked(2)
    with pytest.raises(PoolExhausted):
        await as_client("eve", client.get("userland-test:x"))
    # ... while signed-in work has the rest of the pool, at once.
    started = time.monotonic()
    signed_in = await asyncio.gather(*(as_client(None, client.get("userland-test:x")) for _ in range(5)))
    assert signed_in == [None] * 5
    assert time.monotonic() - started < 0.25
    await asyncio.gather(mallory, trudy)
    assert await as_client("eve", client.get("userland-test:x")) is None
    assert client.connection_pool.shares.clients == {}  # type: ignore[attr-defined]


async def test_a_dead_redis_is_unavailable_not_busy(pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        with pytest.raises(redis.exceptions.ConnectionError) as caught:
            await client.get("x")
        assert not isinstance(caught.value, PoolExhausted)
        with pytest.raises(SessionStoreUnavailable):
            await RedisSessionStore(client, 60).load("x" * 43)
    finally:
        await client.aclose()
