"""When a student last used their environment, measured where all their traffic passes.

What counts (docs/sleep.md): requests from the student's browser to their environment, except
GET/HEAD requests matching the Template's `activity.backgroundPaths` (what an open tab polls by
itself) and requests matching an entry of it with a method (what a tab saves by itself); and
WebSocket data frames the browser sends that are longer than `activity.quietFrameBytes`
(keep-alives and acknowledgements are not) and, for an app whose
protocol the gateway reads (`activity.webSocketProtocol`), hold a message that is not the app's
own background traffic. Never: ping/pong, and anything only the server sends.

Cost: a request that counts sets one timestamp in a dict. A flusher writes each environment's
newest time to Redis at most every `activity_redis_seconds`, and to the API server (the
Userland's `userland.dev/last-activity`) at most every `activity_api_seconds`, once for all
gateway replicas: a Redis lease (SET NX with that expiry) decides which replica writes, and it
writes the newest time any replica stored. Each interval is at most a quarter of the
Template's idleTimeout, so an environment in use is never put to sleep for want of a write.
Redis or the API server down: requests are forwarded as ever; the write is tried again later.

Waking: a counted request to a sleeping environment writes the annotation at once (`wake`),
once for many tabs and replicas (a short Redis NX key; without Redis, once per replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from userland.platform.clients.kube import USERLANDS, KubeClient, KubeError, NotFound
from userland.platform.model import naming
from userland.platform.model.keyspace import activity_key, activity_lease_key, wake_key
from userland.platform.model.models import Activity, parse_time
from userland.platform.model.objects import rfc3339
from userland.platform.model.settings import Settings
from userland.proxy.rules import vscode_frames

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, Userland name)
WAKE_DEDUP_SECONDS = 10


def counts_as_use(method: str, path: str, activity: Activity) -> bool:
    """Whether a request is the student using their environment (not a tab polling, or
    saving its own state: "PUT /lab/api/workspaces*")."""
    polling = method in ("GET", "HEAD")
    for pattern in activity.background_paths:
        if pattern.startswith("/"):
            if polling and fnmatch.fnmatchcase(path, pattern):
                return False
        else:
            pattern_method, _, path_pattern = pattern.partition(" ")
            if method == pattern_method and fnmatch.fnmatchcase(path, path_pattern):
                return False
    return True


def frame_counts(data: bytes | str, activity: Activity) -> bool:
    """Whether a data frame from the browser is the student using it."""
    if len(data) <= activity.quiet_frame_bytes:
        return False
    if activity.websocket_protocol == "vscode":
        return vscode_frames.counts_as_use(data if isinstance(data, bytes) else data.encode())
    return True


def intervals(settings: Settings, idle_timeout: int | None) -> tuple[float, float]:
    """(Redis, API) write intervals for an environment with this idleTimeout."""
    redis_every, api_every = settings.activity_redis_seconds, settings.activity_api_seconds
    if idle_timeout:
        quarter = max(1.0, idle_timeout / 4)
        redis_every, api_every = min(redis_every, quarter), min(api_every, quarter)
    return redis_every, api_every


@dataclass
class _Entry:
    used: float = 0.0  # newest use seen here (wall clock)
    idle_timeout: int | None = None
    redis_written: float = 0.0  # when this replica last wrote it to Redis (monotonic)
    redis_value: float = 0.0  # the use time it wrote then


class ActivityTracker:
    def __init__(self, settings: Settings, kube: KubeClient, redis: aioredis.Redis | None, *,
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic,
                 tick: float = 1.0) -> None:
        self.settings = settings
        self.kube = kube
        self.redis = redis
        self._wall = wall
        self._clock = clock
        self._tick = tick
        self._entries: dict[Key, _Entry] = {}
        self._woken: dict[Key, float] = {}  # local dedup of wakes when Redis is down
        # Counters for tests and benchmarks: writes that reached each store.
        self.redis_writes = 0
        self.api_writes = 0
        self.flushes = 0  # times flush() looked (tests wait on it instead of on time)

    # -- the per-request part: one dict write

    def touch(self, namespace: str, name: str, idle_timeout: int | None) -> None:
        entry = self._entries.get((namespace, name))
        if entry is None:
            entry = self._entries[(namespace, name)] = _Entry()
        entry.used = self._wall()
        entry.idle_timeout = idle_timeout

    @property
    def unwritten(self) -> int:
        """Environments used since this replica last wrote them."""
        return sum(1 for entry in self._entries.values() if entry.used > entry.redis_value)

    # -- waking

    async def wake(self, namespace: str, name: str) -> bool:
        """Ask the operator to wake it: one annotation write for many requests. True when
        this call wrote it."""
        key = (namespace, name)
        now = self._clock()
        if self._woken.get(key, -1e9) > now - WAKE_DEDUP_SECONDS:
            return False
        self._woken[key] = now
        if len(self._woken) > 10_000:
            self._woken = {k: t for k, t in self._woken.items() if t > now - WAKE_DEDUP_SECONDS}
        if self.redis is not None:
            try:
                first = await self.redis.set(wake_key(namespace, name), "1", nx=True,
                                             ex=WAKE_DEDUP_SECONDS)
            except Exception as err:
                log.warning("wake dedup unavailable", extra={"error": str(err)})
                first = True
            if not first:
                return False
        return await self._annotate(key, self._wall())

    # -- flushing

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._tick)
            await self.flush()

    async def flush(self, *, everything: bool = False) -> None:
        """Write what is due (`everything`: all that is newer than what was written, as at
        shutdown)."""
        self.flushes += 1
        now = self._clock()
        due: list[tuple[Key, _Entry, float]] = []
        for key, entry in list(self._entries.items()):
            if entry.used <= entry.redis_value:
                if now - entry.redis_written > 3600:
                    del self._entries[key]  # unused for an hour: forget it
                continue
            redis_every, api_every = intervals(self.settings, entry.idle_timeout)
            if everything or now - entry.redis_written >= redis_every:
                due.append((key, entry, api_every))
        if not due:
            return
        if self.redis is None:
            for key, entry, _ in due:
                self._mark(entry, now)
                await self._annotate(key, entry.used)
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for (ns, name), entry, api_every in due:
                    # The newest use any replica saw: a Lua-free max (GETs below read it back).
                    pipe.set(activity_key(ns, name), rfc3339(entry.used), get=True)
                    pipe.set(activity_lease_key(ns, name), "1", nx=True, ex=max(1, int(api_every)))
                results = await pipe.execute()
        except Exception as err:
            log.warning("activity not written to Redis", extra={"error": str(err), "environments": len(due)})
            return
        self.redis_writes += len(due)
        for index, (key, entry, _) in enumerate(due):
            previous, leased = results[2 * index], results[2 * index + 1]
            self._mark(entry, now)
            if leased:
                other = parse_time(previous.decode() if isinstance(previous, bytes) else previous)
                newest = max(entry.used, other.timestamp() if other else 0.0)
                await self._annotate(key, newest)

    @staticmethod
    def _mark(entry: _Entry, now: float) -> None:
        entry.redis_written = now
        entry.redis_value = entry.used

    async def _annotate(self, key: Key, used: float) -> bool:
        namespace, name = key
        # The one field the gateway writes: its RBAC allows patching Userlands, this code
        # never sends anything but this annotation.
        patch = {"metadata": {"annotations": {naming.ANNOTATION_LAST_ACTIVITY: rfc3339(used)}}}
        try:
            await self.kube.merge_patch(USERLANDS, namespace, name, patch)
        except NotFound:
            return False
        except KubeError as err:
            log.warning("activity not written to the API server",
                        extra={"userland": f"{namespace}/{name}", "error": str(err)})
            if self.redis is not None:
                with contextlib.suppress(Exception):
                    await self.redis.delete(activity_lease_key(namespace, name))
            return False
        self.api_writes += 1
        return True
