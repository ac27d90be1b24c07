"""The gateway's Redis pool (platform/clients/redis_pool.py) against a real redis-server.

A test holds a connection by taking it from the pool as a command does (`take`, under the
request's anonymous mark when given) and gives it back when it says (`give_back`): the test knows
exactly how many connections are in use, for as long as it needs, whatever the machine's load
(a command that held one, such as a `BLPOP`, would give it back on Redis's clock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions
from redis.asyncio.connection import AbstractConnection

from userland.local.ports import free_port
from userland.platform.clients.redis_pool import PoolExhausted, anonymous_client, connect_redis
from userland.platform.clients.sessions import RedisSessionStore, SessionStoreBusy, SessionStoreUnavailable

WAIT = 0.3  # seconds the pools of these tests wait for a connection before PoolExhausted


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


async def take(client: redis.asyncio.Redis, name: str | None) -> AbstractConnection:
    """One of the pool's connections, taken as a command of client `name` takes it (in a task of
    its own, as a request's handler is: the anonymous mark stays there), held until `give_back`."""
    connection: AbstractConnection = await asyncio.create_task(
        as_client(name, client.connection_pool.get_connection()))
    return connection


async def give_back(client: redis.asyncio.Redis, *connections: AbstractConnection) -> None:
    for connection in connections:
        await client.connection_pool.release(connection)


async def test_a_full_pool_waits_instead_of_failing(pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    client = pool_of(max_connections=2, timeout=5)
    # Before (redis-py's default pool): the third command at once raised "Too many connections".
    results = await asyncio.gather(*(client.blpop(["userland-test:never"], timeout=0.3) for _ in range(6)))
    assert results == [None] * 6


async def test_a_waiting_command_gets_the_connection_given_back(
        pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    """The order of events, not seconds: the command waits while both connections are in use,
    and runs on the one given back."""
    client = pool_of(max_connections=2, timeout=60)
    first, second = await take(client, None), await take(client, None)
    waiting = asyncio.create_task(client.get("userland-test:x"))
    for _ in range(20):  # many turns of the event loop: it is still waiting, not failed
        await asyncio.sleep(0)
    assert not waiting.done()
    await give_back(client, first)
    assert await waiting is None
    await give_back(client, second)


async def test_a_pool_that_stays_full_is_busy_not_down(pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    client = pool_of(max_connections=2, timeout=WAIT)
    held = [await take(client, None), await take(client, None)]
    started = time.monotonic()
    with pytest.raises(PoolExhausted):
        await client.get("userland-test:x")
    # It waited for a connection first (a lower bound: no load makes it shorter), and gave up
    # while both were still in use (they are given back only below).
    assert time.monotonic() - started > WAIT - 0.05
    # The session store tells its callers "busy" (a 429), never "unavailable" (a 503).
    with pytest.raises(SessionStoreBusy):
        await RedisSessionStore(client, 60).load("x" * 43)
    await give_back(client, *held)
    assert await client.get("userland-test:x") is None  # free again
    # Counted for /metrics as "busy", not as Redis failing.
    stats = client.stats  # type: ignore[attr-defined]
    assert stats.errors == {"busy": 2}


async def test_anonymous_work_has_a_bounded_share_per_client_and_in_all(
        pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    client = pool_of(max_connections=8, timeout=WAIT, anonymous=2, per_client=1)
    mallory = await take(client, "mallory")
    # Mallory's second command waits for her one slot, then gives up: busy, for her only.
    with pytest.raises(PoolExhausted):
        await as_client("mallory", client.get("userland-test:x"))
    # Another client has its own slot; the two of them fill the anonymous share ...
    trudy = await take(client, "trudy")
    with pytest.raises(PoolExhausted):
        await as_client("eve", client.get("userland-test:x"))
    # ... while signed-in work has the rest of the pool, at once: with both anonymous slots still
    # taken (given back only below), a signed-in command that waited for one would end busy.
    signed_in = await asyncio.gather(*(as_client(None, client.get("userland-test:x")) for _ in range(5)))
    assert signed_in == [None] * 5
    await give_back(client, mallory, trudy)
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
        assert client.stats.errors == {"connection": 2}  # type: ignore[attr-defined]
    finally:
        await client.aclose()


async def test_round_trips_are_timed_a_pipeline_as_one(pool_of: Callable[..., redis.asyncio.Redis]) -> None:
    client = pool_of()
    began = time.perf_counter()
    await client.set("userland-test:timed", "1")
    assert await client.get("userland-test:timed") == b"1"
    async with client.pipeline(transaction=False) as pipe:
        pipe.get("userland-test:timed")
        pipe.delete("userland-test:timed")
        assert await pipe.execute() == [b"1", 1]
    with pytest.raises(redis.exceptions.ResponseError):
        await client.execute_command("NO-SUCH-COMMAND")
    spent = time.perf_counter() - began
    stats = client.stats  # type: ignore[attr-defined]
    # Four round trips timed, in seconds: their sum is some of the time they were made in.
    assert stats.latency.count == 4 and 0 < stats.latency.sum <= spent
    assert stats.errors == {"error": 1}
