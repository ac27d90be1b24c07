"""Coalesced change notices: per course, which students changed since the last tick.

The watches call `changed(course, logins)` for every event they see; subscribers (the SSE
streams) receive the union of those logins at most once per tick, so 500 students starting at once
(5 objects each, several events per object) is one or a few messages per tick, not thousands.
`EVERYTHING` in a notice means "re-render every row" (a Template changed, a relist).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from userland.platform.quota import PerUserQuota

EVERYTHING = "*"


class Subscription:
    def __init__(self, course: str) -> None:
        self.course = course
        self.keys: set[str] = set()
        self._ready = asyncio.Event()
        self.closed = False

    def push(self, keys: set[str]) -> None:
        self.keys |= keys
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def next(self, timeout: float) -> set[str] | None:
        """The logins changed since the last call; empty on timeout; None once closed."""
        if not self.keys and not self.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
        self._ready.clear()
        if self.closed:
            return None
        keys, self.keys = self.keys, set()
        return keys


UserQuota = PerUserQuota  # live streams per user in this web UI process


class Notifier:
    def __init__(self, tick: float = 0.25) -> None:
        self.tick = tick
        self._pending: dict[str, set[str]] = {}
        self._subscribers: dict[str, set[Subscription]] = {}
        self._wake = asyncio.Event()
        self.ticks_sent = 0  # how many (course, tick) notices went out: the coalescing, measurable

    def changed(self, course: str, logins: Iterable[str]) -> None:
        if course not in self._subscribers:
            return  # nobody listens: nothing to remember
        self._pending.setdefault(course, set()).update(logins)
        self._wake.set()

    @contextlib.contextmanager
    def subscribe(self, course: str) -> Iterator[Subscription]:
        sub = Subscription(course)
        self._subscribers.setdefault(course, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._subscribers.get(course)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subscribers[course]
                    self._pending.pop(course, None)

    def subscribers(self, course: str) -> int:
        return len(self._subscribers.get(course, ()))

    def streams(self) -> int:
        """Subscriptions open in every course (the live streams, for /metrics)."""
        return sum(len(subs) for subs in self._subscribers.values())

    def close_all(self) -> None:
        """Shutdown: every stream ends cleanly."""
        for subs in self._subscribers.values():
            for sub in subs:
                sub.close()

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for course, keys in pending.items():
            if not keys:
                continue
            self.ticks_sent += 1
            for sub in self._subscribers.get(course, ()):
                sub.push(keys)

    async def run(self) -> None:
        """Deliver pending notices, at most one per tick, until cancelled.

        A change after a quiet tick goes out at once (a lone status change shows without
        delay); changes that follow within the tick wait for its end and go out together."""
        loop = asyncio.get_running_loop()
        last = -self.tick
        while True:
            await self._wake.wait()
            wait = last + self.tick - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._wake.clear()
            self.flush()
            last = loop.time()
