"""How many sessions live in Redis: signed-in browsers (platform sessions) and students' origins
signed in (origin sessions), for /metrics.

Sessions are plain keys with a TTL (platform/model/keyspace.py), so counting them means walking the
keyspace with SCAN (never KEYS: SCAN returns in small steps and never blocks Redis). That costs
Redis work in proportion to its keys (about 1 ms per 10,000 here, docs/benchmarks.md), so it is
done at most once per `interval` per gateway process, in the background, and only when
Prometheus asks: a scrape gets the last count (none before the first) and starts a new one when
that is older than `interval`. A failed count keeps the previous one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import redis.asyncio
import redis.exceptions

from userland.platform.model.keyspace import ORIGIN_SESSION_PREFIX, SESSION_PREFIX, SESSIONS_PATTERN

log = logging.getLogger(__name__)

COUNT_INTERVAL = 60.0
# Keys per SCAN step: large steps make few round trips; each step is still a short Redis command.
SCAN_STEP = 1000


class SessionCensus:
    def __init__(self, client: redis.asyncio.Redis, *, interval: float = COUNT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.interval = interval
        self._clock = clock
        self.counts: tuple[int, int] | None = None
        self._counted_at = -float("inf")
        self._task: asyncio.Task[None] | None = None

    def __call__(self) -> tuple[int, int] | None:
        """The last count (platform, origin); starts a new one in the background when due."""
        due = self._clock() - self._counted_at >= self.interval
        if due and (self._task is None or self._task.done()):
            self._counted_at = self._clock()
            self._task = asyncio.get_running_loop().create_task(self._count())
        return self.counts

    async def count(self) -> tuple[int, int]:
        platform = origin = 0
        async for key in self.client.scan_iter(match=SESSIONS_PATTERN, count=SCAN_STEP):
            name = key.decode() if isinstance(key, bytes) else str(key)
            if name.startswith(SESSION_PREFIX):
                platform += 1
            elif name.startswith(ORIGIN_SESSION_PREFIX):
                origin += 1
        return platform, origin

    async def _count(self) -> None:
        try:
            self.counts = await self.count()
        except (redis.exceptions.RedisError, OSError) as err:
            log.info("sessions not counted", extra={"error": type(err).__name__})

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
