"""A short-lived in-process cache of session lookups (one Redis round trip saved per request).

A browser IDE sends bursts of requests with one cookie; asking Redis for every one of them
was a fifth of the gateway's CPU time. The cache keeps a *found* session for at most
`SESSION_CACHE_TTL` seconds (1 s) after Redis returned it, keyed by the cookie id, and only
while it can be sure Redis is there and would say the same. Exactly:
- it serves entries only while its subscription to the sessions' invalidation channel
  (`keyspace.INVALIDATION_CHANNEL`) is up and answering its pings (every
  `PING_INTERVAL`); when that connection fails, or any session lookup fails, every entry is
  dropped and nothing is served from memory until Redis answers again. So with Redis down
  every protected request gets a 503, cached or not;
- a session cleared anywhere through the session store (a logout on any replica, an admin) is
  published on that channel (as the SHA-256 of its cookie id, never the id) and dropped here
  at once; a logout through this process also drops it directly (`forget`);
- a session that merely expires in Redis (its TTL) is refused here at most 1 s later.
Without a Redis client (unit tests) there is no channel: entries live for the TTL and the
lookup-failure rule still holds.
Store errors are never cached. Against floods of made-up cookies (issue 17):
- an unknown cookie id is remembered as unknown for `NEGATIVE_TTL` seconds (5 s): asking again
  costs no Redis round trip (ids are random 256-bit values made when a session is saved, so one
  that is unknown now cannot become valid later);
- a lookup of a cookie this process has not seen valid within `KNOWN_SECONDS` is anonymous Redis
  work: it takes a slot of its client's bounded share of the Redis connections first
  (platform/clients/redis_pool.py), so no address, and no number of them, can take the connections the
  signed-in students' lookups need. A cookie found valid (and the rest of its request) is not
  anonymous work; nor is a known cookie's lookup, so a student whose session this process has
  seen never waits behind a flood from their own address (a campus NAT);
- a lookup that could not get a connection in time (`SessionStoreBusy`) is not a Redis failure:
  it refuses that request only (429) and the cache keeps serving.
The cookie id taken out of a Cookie header
is remembered per header value (up to `max_headers` of them): parsing the Cookie header with
http.cookies cost about a tenth of a request's CPU, and a browser sends the same one each time
(headers over 4 KiB are not remembered). The cache holds at most `max_entries` ids (expired
ones are swept when it is full; if it is still full it starts over).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import redis.asyncio
from aiohttp import web

from userland.platform.clients.redis_pool import anonymous_client, cancelling
from userland.platform.clients.sessions import SessionStoreBusy, SessionStoreUnavailable
from userland.platform.model.keyspace import INVALIDATION_CHANNEL
from userland.proxy.live import SESSION_DIGEST

log = logging.getLogger(__name__)

# The kind of session a cache holds: the platform's `Session` or a student origin's
# `OriginSession`. Typed, so the gateway reads each one's fields by name (never by duck typing).
S = TypeVar("S")
SessionLookup = Callable[[web.Request], Awaitable[S | None]]

SESSION_CACHE_TTL = 1.0
# How long a cookie id Redis did not know is answered "unknown" from memory.
NEGATIVE_TTL = 5.0
# How long after a cookie was last found valid its lookups are not anonymous work.
KNOWN_SECONDS = 3600.0
# How often the invalidation subscription is pinged (when it is quiet that long); this many pings
# without an answer, each waited for that long, mean Redis is gone.
PING_INTERVAL = 0.5
MISSED_PINGS = 3


# How long shutdown waits for the invalidation listener to stop.
LISTENER_STOP_SECONDS = 5.0


def _digest(cookie_id: str) -> str:
    return hashlib.sha256(cookie_id.encode()).hexdigest()


class SessionCache(Generic[S]):
    def __init__(self, lookup: SessionLookup[S], cookie: str, *, ttl: float = SESSION_CACHE_TTL,
                 max_entries: int = 10_000, max_headers: int = 1024,
                 clock: Callable[[], float] = time.monotonic,
                 redis_client: redis.asyncio.Redis | None = None,
                 negative_ttl: float = NEGATIVE_TTL, max_known: int = 20_000) -> None:
        self._lookup = lookup
        self._cookie = cookie
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[float, S, str]] = {}
        self._negative_ttl = negative_ttl
        self._unknown: dict[str, float] = {}  # cookie id -> until when it is answered unknown
        self._known: dict[str, float] = {}  # cookie id -> until when its lookups are not anonymous
        self._max_known = max_known
        self._by_digest: dict[str, str] = {}
        self._max_headers = max_headers
        self._ids: dict[str, str | None] = {}
        self._redis = redis_client
        # Serving from memory needs the invalidation channel up (when there is one) and the
        # latest lookup to have succeeded.
        self._subscribed = redis_client is None
        self._lookups_ok = True
        # Bumped whenever entries are dropped wholesale: a lookup that started before must
        # not store what it found.
        self._epoch = 0
        self._invalidated: dict[str, float] = {}  # digest -> when, for lookups in flight
        self._listener: asyncio.Task[None] | None = None
        # Called with each published digest: the gateway ends that session's open connections.
        self.on_invalidate: list[Callable[[str], object]] = []

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def serving(self) -> bool:
        """Whether entries may be served from memory right now."""
        return self._subscribed and self._lookups_ok

    def _cookie_id(self, request: web.Request) -> str | None:
        """`request.cookies.get(cookie)`, remembered per Cookie header value (aiohttp parses
        the first Cookie header too)."""
        raw = request.headers.get("Cookie")
        if raw is None:
            return None
        try:
            return self._ids[raw]
        except KeyError:
            pass
        cookie_id = request.cookies.get(self._cookie)
        if len(raw) > 4096:  # not remembered: bounded memory, whatever clients send
            return cookie_id
        if len(self._ids) >= self._max_headers:
            self._ids.clear()
        self._ids[raw] = cookie_id
        return cookie_id

    async def __call__(self, request: web.Request) -> S | None:
        cookie_id = self._cookie_id(request)
        if not cookie_id:
            return await self._lookup(request)
        now = self._clock()
        entry = self._entries.get(cookie_id)
        if entry is not None:
            if entry[0] > now and self.serving:
                request[SESSION_DIGEST] = entry[2]
                anonymous_client(None)  # signed in: the rest of the request is not anonymous work
                return entry[1]
            self._drop(cookie_id)
        unknown = self._unknown.get(cookie_id)
        if unknown is not None:
            if unknown > now:
                return None
            del self._unknown[cookie_id]
        if self._known.get(cookie_id, 0.0) > now:
            anonymous_client(None)  # seen valid lately: never queued behind a flood
        epoch = self._epoch
        try:
            session = await self._lookup(request)
        except SessionStoreBusy:
            raise  # this process was busy, Redis is fine: nothing else changes
        except SessionStoreUnavailable:
            self._lookups_ok = False
            self._drop_all()
            raise
        self._lookups_ok = True
        if session is None:
            self._remember_unknown(cookie_id, now)
            return None
        anonymous_client(None)
        self._remember_known(cookie_id, now)
        digest = request[SESSION_DIGEST] = _digest(cookie_id)
        if epoch == self._epoch and self._subscribed:
            invalidated = self._invalidated.get(digest)
            if invalidated is not None and invalidated >= now:
                return session  # cleared while this lookup was in flight: answer, don't keep
            if len(self._entries) >= self._max:
                self._sweep(now)
            self._entries[cookie_id] = (now + self._ttl, session, digest)
            self._by_digest[digest] = cookie_id
        return session

    def _remember_unknown(self, cookie_id: str, now: float) -> None:
        if len(self._unknown) >= self._max:
            self._unknown = {k: t for k, t in self._unknown.items() if t > now}
            if len(self._unknown) >= self._max:
                self._unknown.clear()  # a flood of made-up ids: they were never going to repeat
        self._unknown[cookie_id] = now + self._negative_ttl

    def _remember_known(self, cookie_id: str, now: float) -> None:
        if cookie_id not in self._known and len(self._known) >= self._max_known:
            self._known = {k: t for k, t in self._known.items() if t > now}
            if len(self._known) >= self._max_known:
                self._known.clear()
        self._known[cookie_id] = now + KNOWN_SECONDS

    def forget(self, request: web.Request) -> None:
        """Drop the entry of this request's cookie (it is logging out)."""
        cookie_id = self._cookie_id(request)
        if cookie_id:
            self._drop(cookie_id)
            self._known.pop(cookie_id, None)
            self._invalidated[_digest(cookie_id)] = self._clock()

    def invalidate(self, digest: str) -> None:
        """Drop the entry whose cookie id has this SHA-256 (a published invalidation)."""
        now = self._clock()
        self._invalidated[digest] = now
        if len(self._invalidated) > 1000:
            horizon = now - 10 * self._ttl
            self._invalidated = {d: t for d, t in self._invalidated.items() if t > horizon}
        cookie_id = self._by_digest.pop(digest, None)
        if cookie_id is not None:
            self._entries.pop(cookie_id, None)
            self._known.pop(cookie_id, None)
        for callback in self.on_invalidate:
            callback(digest)

    def _drop(self, cookie_id: str) -> None:
        entry = self._entries.pop(cookie_id, None)
        if entry is not None:
            self._by_digest.pop(entry[2], None)

    def _drop_all(self) -> None:
        self._epoch += 1
        self._entries.clear()
        self._by_digest.clear()

    def forget_all(self) -> None:
        """Drop every entry: a sign-out ends origin sessions whose cookies it cannot name."""
        self._drop_all()

    def _sweep(self, now: float) -> None:
        self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
        self._by_digest = {v[2]: k for k, v in self._entries.items()}
        if len(self._entries) >= self._max:
            self._drop_all()

    # -- the invalidation channel

    async def running(self, _: web.Application | None = None) -> AsyncIterator[None]:
        """For `app.cleanup_ctx`: listen for invalidations while the application runs."""
        if self._redis is not None:
            self._listener = asyncio.create_task(self._listen(self._redis))
        try:
            yield
        finally:
            if self._listener is not None:
                self._listener.cancel()
                still_running = (await asyncio.wait([self._listener], timeout=LISTENER_STOP_SECONDS))[1]
                if still_running:  # never seen since _listen re-raises swallowed cancellations; never hang
                    log.error("session invalidation listener did not stop; left behind")
                self._listener = None

    async def _listen(self, client: redis.asyncio.Redis) -> None:
        backoff = 0.1
        while True:
            try:
                await self._subscription(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of the channel: stop serving from memory
                if cancelling():
                    # redis-py can turn the CancelledError it was interrupted with into a
                    # connection error; retrying would then sleep and loop for ever while
                    # the application's cleanup waits for this task.
                    raise asyncio.CancelledError from exc
                if self._subscribed:
                    log.warning("session invalidation channel lost; session cache off",
                                extra={"error": type(exc).__name__})
            self._subscribed = False
            self._drop_all()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def _subscription(self, client: redis.asyncio.Redis) -> None:
        pubsub: Any = client.pubsub()
        try:
            await pubsub.subscribe(INVALIDATION_CHANNEL)
            # Pings sent since Redis last said anything. Counted, not timed since the last answer:
            # a gateway whose event loop lags (a flood saturating it, a descheduled process) lets
            # seconds pass between two turns of this loop, and took that for Redis not answering:
            # the cache went off, and every request asked Redis, under the very flood it was for.
            unanswered = 0
            while True:
                if cancelling():
                    # redis-py swallowed the cancellation it was interrupted with (its read
                    # returned as if its own timeout had run out) and the loop went on, answered by
                    # every ping: the gateway's cleanup gave up on it and the event loop's close
                    # waited for it for ever. The task still says it is being cancelled.
                    raise asyncio.CancelledError
                message = await pubsub.get_message(timeout=PING_INTERVAL)
                if message is not None:
                    unanswered = 0
                    kind = message.get("type")
                    if kind == "subscribe" and not self._subscribed:
                        self._subscribed = True
                        log.info("session invalidation channel up; session cache on")
                    elif kind == "message":
                        data = message.get("data")
                        self.invalidate(data.decode() if isinstance(data, bytes) else str(data))
                    continue
                if unanswered >= MISSED_PINGS:
                    raise TimeoutError("no answer to pings on the invalidation channel")
                await pubsub.ping()
                unanswered += 1
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
