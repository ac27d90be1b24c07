"""A short-lived in-process cache of session lookups (one Redis round trip saved per request).

A browser IDE sends bursts of requests with one cookie; asking Redis for every one of them
was a fifth of the gateway's CPU time. The cache keeps a *found* session for at most
`SESSION_CACHE_TTL` seconds (1 s) after Redis returned it, keyed by the cookie id. What that
means for revocation, exactly:
- a logout through this gateway process drops the entry at once (`forget`);
- a session deleted or expired in Redis by anyone else (another replica's logout, an admin,
  the TTL) is refused by this process at most 1 s later;
- with Redis unreachable, a session seen in the last second keeps working for the rest of
  that second; every other request fails closed (503) as before.
Unknown cookies and store errors are never cached. The cookie id taken out of a Cookie header
is remembered per header value (up to `max_headers` of them): parsing the Cookie header with
http.cookies cost about a tenth of a request's CPU, and a browser sends the same one each time
(headers over 4 KiB are not remembered). The cache holds at most `max_entries` ids (expired
ones are swept when it is full; if it is still full it starts over).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from userland.proxy.gateway import SessionLike, SessionLookup

SESSION_CACHE_TTL = 1.0


class SessionCache:
    def __init__(self, lookup: SessionLookup, cookie: str, *, ttl: float = SESSION_CACHE_TTL,
                 max_entries: int = 10_000, max_headers: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lookup = lookup
        self._cookie = cookie
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[float, SessionLike]] = {}
        self._max_headers = max_headers
        self._ids: dict[str, str | None] = {}

    def __len__(self) -> int:
        return len(self._entries)

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

    async def __call__(self, request: web.Request) -> SessionLike | None:
        cookie_id = self._cookie_id(request)
        if not cookie_id:
            return await self._lookup(request)
        now = self._clock()
        entry = self._entries.get(cookie_id)
        if entry is not None:
            if entry[0] > now:
                return entry[1]
            del self._entries[cookie_id]
        session = await self._lookup(request)
        if session is not None:
            if len(self._entries) >= self._max:
                self._sweep(now)
            self._entries[cookie_id] = (now + self._ttl, session)
        return session

    def forget(self, request: web.Request) -> None:
        """Drop the entry of this request's cookie (it is logging out)."""
        cookie_id = self._cookie_id(request)
        if cookie_id:
            self._entries.pop(cookie_id, None)

    def _sweep(self, now: float) -> None:
        self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
        if len(self._entries) >= self._max:
            self._entries.clear()
