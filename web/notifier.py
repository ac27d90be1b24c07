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

from userland.platform.model.quota import PerUserQuota

EVERYTHING = "*"


class Subscription:
    def __init__(self, course: str, *more: str) -> None:
        self.course = course
        self.channels = (course, *more)
        self.keys: set[str] = set()
        # Which channels the keys came from (a student's /me listens on several courses).
        self.heard: set[str] = set()
        self._ready = asyncio.Event()
        self.closed = False

    def push(self, keys: set[str], channel: str = "") -> None:
        self.keys |= keys
        self.heard.add(channel or self.course)
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

    def take_heard(self) -> set[str]:
        """The channels heard from since the last call (read after `next`)."""
        heard, self.heard = self.heard, set()
        return heard


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
    def subscribe(self, course: str, *more: str) -> Iterator[Subscription]:
        """Notices of `course` (and of the `more` channels: one subscription for all of them)."""
        sub = Subscription(course, *more)
        for channel in sub.channels:
            self._subscribers.setdefault(channel, set()).add(sub)
        try:
            yield sub
        finally:
            for channel in sub.channels:
                subs = self._subscribers.get(channel)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subscribers[channel]
                        self._pending.pop(channel, None)

    def subscribers(self, course: str) -> int:
        return len(self._subscribers.get(course, ()))

    def streams(self) -> int:
        """Subscriptions open in every course (the live streams, for /metrics)."""
        return len({id(sub) for subs in self._subscribers.values() for sub in subs})

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
                sub.push(keys, course)

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
