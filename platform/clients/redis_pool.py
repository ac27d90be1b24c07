"""The gateway's Redis connections: a pool that waits instead of failing, and a bounded share of it
for requests that nobody has signed in for.

redis-py's asyncio pool holds at most `max_connections` and raises `ConnectionError` at once when
they are all in use; a flood of anonymous requests (random session cookies, login starts) used
them all, and the gateway took that for "Redis is down": 503 for everyone, the session cache off.
`WaitingPool` instead:
- waits for a free connection (FIFO, at most `timeout` seconds), and when the wait runs out
  raises `PoolExhausted`, which callers tell apart from Redis being unreachable (it is this
  process being busy: the store maps it to `SessionStoreBusy`, a 429, never a 503);
- gives the Redis work of anonymous requests only a bounded share: a request handler marks its
  client with `anonymous_client(...)` (the gateway does, for every request, until its session
  is known good), and every command issued while that mark is set first takes one of the
  client's `per_client` slots and one of the `anonymous` slots shared by all anonymous clients
  (so at least `max_connections - anonymous` connections always serve signed-in students and
  the gateway's own work); a client whose slots stay taken for `timeout` gets `PoolExhausted`
  too. The slots are FIFO: a signed-in student whose session is not known to this process yet
  (its first request after a restart) waits behind, never beside, a flood from their address.
Connections are counted per command (or pipeline, or script): the slot is given back with the
connection.

`MeasuredRedis` (the client `connect_redis` returns; the web UI's too) times every round trip,
waiting for a pooled connection included (what a request that needs Redis waits), and counts
failures by kind, in `client.stats` (platform/model/telemetry.py); the components export them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from userland.platform.model.telemetry import RedisStats

# Per gateway process. A session lookup takes well under a millisecond of a connection, so 64
# serve tens of thousands a second; the session cache answers most requests from memory anyway.
POOL_SIZE = 64
# Of those, what all anonymous requests together may use at once, and one client (address).
ANONYMOUS_SHARE = 16
PER_CLIENT_SHARE = 4
# How long a command waits for a connection (or its client's share) before PoolExhausted.
WAIT_SECONDS = 2.0

# Who the Redis work of the current request is for: a function giving the client's key (called
# only when a connection is actually needed), or None for signed-in and background work.
_ANONYMOUS: ContextVar[Callable[[], str] | None] = ContextVar("userland_redis_anonymous", default=None)


class PoolExhausted(redis.exceptions.ConnectionError):
    """No connection (or no slot of this client's share) came free in time: this process is busy,
    Redis itself is fine."""


def cancelling() -> bool:
    """Whether the current task is being cancelled. redis-py can turn the CancelledError it was
    interrupted with into a connection error: a loop that retries on errors asks this first, and
    stops instead of retrying for ever while its application's cleanup waits for it."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def anonymous_client(client_key: Callable[[], str] | None) -> None:
    """Mark the Redis work of the current task (an aiohttp request handler) as anonymous, for the
    client `client_key()` names; None: signed-in (or background) work, no share."""
    _ANONYMOUS.set(client_key)


class _Shares:
    """FIFO slots: `total` for every anonymous client together, `per_client` for each."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total = asyncio.Semaphore(total)
        self.per_client = per_client
        self.clients: dict[str, list[Any]] = {}  # client -> [its semaphore, holders and waiters]

    async def acquire(self, client: str) -> None:
        entry = self.clients.get(client)
        if entry is None:
            entry = self.clients[client] = [asyncio.Semaphore(self.per_client), 0]
        entry[1] += 1
        try:
            await entry[0].acquire()
            try:
                await self.total.acquire()
            except BaseException:
                entry[0].release()
                raise
        except BaseException:
            self._leave(client, entry)
            raise

    def release(self, client: str) -> None:
        self.total.release()
        entry = self.clients.get(client)
        if entry is not None:
            entry[0].release()
            self._leave(client, entry)

    def _leave(self, client: str, entry: list[Any]) -> None:
        entry[1] -= 1
        if entry[1] <= 0:
            self.clients.pop(client, None)


class WaitingPool(BlockingConnectionPool):
    """See the module docstring."""

    def __init__(self, *, max_connections: int = POOL_SIZE, timeout: float = WAIT_SECONDS,
                 anonymous: int = ANONYMOUS_SHARE, per_client: int = PER_CLIENT_SHARE,
                 **connection_kwargs: Any) -> None:
        super().__init__(max_connections=max_connections, timeout=timeout, **connection_kwargs)
        self.shares = _Shares(anonymous, per_client)

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        client_key = _ANONYMOUS.get()
        if client_key is None:
            return await self._connection(*args, **kwargs)
        client = client_key()
        try:
            async with asyncio.timeout(self.timeout):
                await self.shares.acquire(client)
        except TimeoutError:
            raise PoolExhausted("this client's share of the Redis connections stayed in use") from None
        try:
            connection = await self._connection(*args, **kwargs)
        except BaseException:
            self.shares.release(client)
            raise
        connection._userland_share = client  # type: ignore[attr-defined]  # given back on release
        return connection

    async def _connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        try:
            connection: AbstractConnection = await super().get_connection(  # type: ignore[no-untyped-call]
                *args, **kwargs)
        except redis.exceptions.ConnectionError as err:
            # redis-py raises ConnectionError("No connection available.") from the TimeoutError
            # of its wait; anything else (connect refused, timed out) is Redis being unreachable.
            if isinstance(err.__cause__, TimeoutError) and "No connection available" in str(err):
                raise PoolExhausted("every Redis connection of this process stayed in use") from err
            raise
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        client = getattr(connection, "_userland_share", None)
        if client is not None:
            connection._userland_share = None  # type: ignore[attr-defined]
        try:
            await super().release(connection)
        finally:
            if client is not None:
                self.shares.release(client)


def connect_redis(url: str, *, max_connections: int = POOL_SIZE, timeout: float = WAIT_SECONDS,
                  anonymous: int = ANONYMOUS_SHARE, per_client: int = PER_CLIENT_SHARE,
                  ) -> redis.asyncio.Redis:
    """The gateway's Redis client: a `WaitingPool` and a client that fails fast when Redis is gone.

    redis-py's default retries a failed connection 10 times with backoff (seconds per command);
    while Redis is down every request would hang that long before its 503. Here a command gets
    one immediate retry (enough for a pooled connection that went stale when Redis restarted)
    and short socket timeouts. No backoff: the session cache's invalidation channel must see a
    dead Redis at once (a backoff of 20 ms let a cached session through after Redis died)."""
    pool = WaitingPool.from_url(
        url, max_connections=max_connections, timeout=timeout, anonymous=anonymous, per_client=per_client,
        socket_connect_timeout=1.0, socket_timeout=2.0, health_check_interval=30, retry=Retry(NoBackoff(), 1))
    return MeasuredRedis.from_pool(pool)


# ----- measuring: the round trips and failures of a client, for /metrics -----


def error_kind(err: BaseException) -> str:
    """REDIS_ERROR_KINDS' name for a failure."""
    if isinstance(err, PoolExhausted):
        return "busy"
    if isinstance(err, redis.exceptions.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(err, redis.exceptions.ConnectionError | OSError):
        return "connection"
    return "error"


class MeasuredRedis(redis.asyncio.Redis):
    """`redis.asyncio.Redis` with `stats`: made with `from_url`/`from_pool` like its parent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stats = RedisStats()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        started = time.perf_counter()
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except (redis.exceptions.RedisError, OSError) as err:
            self.stats.errors[error_kind(err)] += 1
            raise
        finally:
            self.stats.latency.observe(time.perf_counter() - started)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return MeasuredPipeline(self.stats, self.connection_pool, self.response_callbacks, transaction,
                                shard_hint)


class MeasuredPipeline(Pipeline):
    """A pipeline whose `execute` (one round trip) counts in its client's stats."""

    def __init__(self, stats: RedisStats, *args: Any) -> None:
        super().__init__(*args)
        self._userland_stats = stats

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        started = time.perf_counter()
        try:
            return await super().execute(raise_on_error)
        except (redis.exceptions.RedisError, OSError) as err:
            self._userland_stats.errors[error_kind(err)] += 1
            raise
        finally:
            self._userland_stats.latency.observe(time.perf_counter() - started)
