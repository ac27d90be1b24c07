"""Open connections of staff let in by help grants, closed when their grant ends or runs out.

A member of staff's WebSocket (a terminal, an IDE's channel) was checked against its grant
once, when it opened. Ending a grant publishes its origin sessions on the sessions'
invalidation channel, and proxy/live.py closes their connections at once on every replica that
hears it. This is the check that does not depend on hearing it:
- every `INTERVAL` seconds, connections whose grant's time has run out are closed (the grant's
  end is known here: no Redis needed);
- every `CHECK_SECONDS`, one pipelined round trip asks Redis which of the grants with open
  connections here are still live; the others' connections are closed. A failed check closes
  them too (fail closed: a gateway that cannot tell must not keep staff in).
So a grant's end reaches every replica's open connections within CHECK_SECONDS + one round trip
even if a published message is lost (a subscription reconnecting). It costs nothing while no
member of staff has a connection open here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from userland.platform.clients.redis_pool import cancelling
from userland.platform.model.grants import Grant

log = logging.getLogger(__name__)

INTERVAL = 0.5
CHECK_SECONDS = 2.0


class LiveGrants(Protocol):
    async def which_live(self, grant_ids: list[str]) -> dict[str, bool]: ...

    async def record(self, grant_id: str) -> Grant | None: ...

    async def live_for(self, course: str, student: str, staff: str) -> Grant | None: ...


class GrantWatch:
    def __init__(self, store: LiveGrants | None, *, clock: Callable[[], float] = time.time,
                 on_close: Callable[[str, int], None] | None = None,
                 interval: float = INTERVAL, check_seconds: float = CHECK_SECONDS) -> None:
        self._store = store
        self._clock = clock
        self._on_close = on_close  # (reason, connections closed): the metrics
        self._interval = interval
        self._check_seconds = check_seconds
        self._grants: dict[str, Grant] = {}
        # grant id -> its requests in flight here. Sets that empty stay until the next sweep (a
        # staff member's requests come and go many times a second: no churn per request).
        self._open: dict[str, dict[int, web.Request]] = {}  # (requests are unhashable: by id)
        self._last_check = 0.0

    def __len__(self) -> int:
        return sum(len(requests) for requests in self._open.values())

    def add(self, request: web.Request, grant: Grant) -> None:
        requests = self._open.get(grant.id)
        if requests is None:
            requests = self._open[grant.id] = {}
            self._grants[grant.id] = grant
        requests[id(request)] = request

    def discard(self, request: web.Request, grant: Grant) -> None:
        requests = self._open.get(grant.id)
        if requests is not None:
            requests.pop(id(request), None)

    def _close(self, grant_id: str, reason: str) -> int:
        requests = self._open.pop(grant_id, {})
        grant = self._grants.pop(grant_id, None)
        for request in requests.values():
            if request.transport is not None:
                request.transport.close()
        if requests:
            log.info("help grant over: staff connections closed", extra={
                "event": "help.connections_closed", "reason": reason, "count": len(requests),
                "course": grant.course if grant else "", "login": grant.staff if grant else ""})
            if self._on_close is not None:
                self._on_close(reason, len(requests))
        return len(requests)

    async def sweep(self) -> int:
        """One pass: close what ran out, and (every CHECK_SECONDS) what Redis says has ended."""
        for grant_id in [g for g, requests in self._open.items() if not requests]:
            del self._open[grant_id]  # nothing of it in flight here any more
            self._grants.pop(grant_id, None)
        if not self._open:
            return 0
        now = self._clock()
        closed = 0
        for grant_id, grant in list(self._grants.items()):
            if not grant.live(now):
                closed += self._close(grant_id, "expired")
        if self._store is None or not self._open or now - self._last_check < self._check_seconds:
            return closed
        self._last_check = now
        ids = list(self._open)
        try:
            live = await self._store.which_live(ids)
        except Exception as err:  # Redis unreachable: nobody can say they are still in
            if cancelling():
                # redis-py can turn a cancellation into a connection error: stop, do not loop.
                raise asyncio.CancelledError from err
            log.warning("help grants could not be checked; staff connections closed",
                        extra={"error": type(err).__name__})
            live = {}
        for grant_id in ids:
            if not live.get(grant_id, False):
                closed += self._close(grant_id, "ended")
        return closed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sweep()
            except Exception:  # never let the watch die: it is the backstop
                if cancelling():
                    raise asyncio.CancelledError from None
                log.exception("help grant watch failed a pass")
