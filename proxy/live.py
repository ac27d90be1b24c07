"""Forwarded requests in flight, by the session they were let in with, so that a session that
ends also ends its open connections.

A WebSocket (a terminal, an IDE's channel) or a long response (the web UI's live dashboard)
was checked against its session once, when it opened; without this it kept working after the
session ended: after sign-out, after an admin ended it, on a cookie that was stolen and then
revoked. Sessions end through the session store, which publishes the SHA-256 of the ended
cookie id on the invalidation channel (platform/clients/sessions.py, auth/origin_sessions.py); every
gateway replica's session cache hears it (proxy/session_cache.py) and calls `end`, which
closes the client connection of every request let in with that cookie. The upstream side
follows: the WebSocket pumps and the streamed body see the client gone and close theirs.
The session cache marks each request with the digest of the session it let in
(`SESSION_DIGEST`), so tracking costs no cookie parsing or hashing of its own.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger(__name__)

# Set by the session cache on a request it let in: the digest of that session's cookie id.
SESSION_DIGEST = web.RequestKey("userland_session_digest", str)
RECENT_SECONDS = 10.0


def cookie_digest(cookie_id: str) -> str:
    """What the invalidation channel carries for a cookie id (never the id itself)."""
    return hashlib.sha256(cookie_id.encode()).hexdigest()


class LiveConnections:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._open: dict[str, dict[int, web.Request]] = {}  # digest -> id(request) -> request
        # Digests ended in the last RECENT_SECONDS: a request whose session lookup was in flight
        # while its session ended is closed as soon as it is tracked.
        self._ended: dict[str, float] = {}
        self._clock = clock

    def __len__(self) -> int:
        return sum(len(requests) for requests in self._open.values())

    def add(self, request: web.Request) -> str | None:
        """Track `request` (until `discard`); the digest it is tracked under, None when it came
        with no session. No context manager: no generator per request on the gateway's hot path."""
        digest: str | None = request.get(SESSION_DIGEST)
        if not digest:
            return None
        ended = self._ended.get(digest)
        if ended is not None and ended > self._clock() - RECENT_SECONDS and request.transport is not None:
            request.transport.close()
        self._open.setdefault(digest, {})[id(request)] = request
        return digest

    def discard(self, digest: str, request: web.Request) -> None:
        requests = self._open.get(digest)
        if requests is not None:
            requests.pop(id(request), None)
            if not requests:
                del self._open[digest]

    def end(self, digest: str) -> int:
        """Close the client connection of every request let in with this cookie digest."""
        now = self._clock()
        self._ended[digest] = now
        if len(self._ended) > 1000:
            self._ended = {d: t for d, t in self._ended.items() if t > now - RECENT_SECONDS}
        requests = self._open.pop(digest, {})
        for request in requests.values():
            transport = request.transport
            if transport is not None:
                transport.close()
        if requests:
            log.info("session ended: connections closed", extra={"event": "session.connections_closed",
                                                                 "count": len(requests)})
        return len(requests)
