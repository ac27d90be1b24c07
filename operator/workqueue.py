"""A level-triggered work queue of keys, as controller-runtime has.

- A key waits in the queue at most once, however many events named it (deduplicated).
- A key is never processed by two workers at once; if it is added while being processed,
  it is queued again when that processing ends (nothing is lost, nothing runs twice at once).
- `retry(key)` puts it back after an exponential backoff per key; `forget(key)` resets it.
- `add_after(key, delay)` for scheduled checks (debounced: an earlier due time wins).
- `add(key, low=True)` for the periodic resync: such keys wait behind every key an event
  named, so a resync of thousands never delays a student's new environment.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.2, max_delay: float = 60.0) -> None:
        # Entries are (priority, sequence, key); a key upgraded to high priority leaves a
        # stale low entry behind, skipped when popped (the key is no longer in _queued).
        self._queue: asyncio.PriorityQueue[tuple[int, int, K]] = asyncio.PriorityQueue()
        self._queued: dict[K, int] = {}
        self._sequence = 0
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._due: dict[K, float] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    @property
    def depth(self) -> int:
        return len(self._queued)

    def add(self, key: K, *, low: bool = False) -> None:
        priority = 1 if low else 0
        if key in self._active:
            self._dirty.add(key)
        elif self._queued.get(key, 2) > priority:
            self._queued[key] = priority
            self._sequence += 1
            self._queue.put_nowait((priority, self._sequence, key))

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if key in self._timers:
            if self._due[key] <= due:
                return
            self._timers[key].cancel()
        self._due[key] = due
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self._due.pop(key, None)
        self.add(key)

    def retry(self, key: K) -> float:
        """Schedule `key` again after its backoff; returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay: float = min(self.base_delay * (2**failures), self.max_delay)
        delay *= 0.8 + 0.4 * random.random()  # jitter: retries of many keys spread out
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> K:
        while True:
            _, _, key = await self._queue.get()
            if self._queued.pop(key, None) is not None:
                self._active.add(key)
                return key

    def done(self, key: K) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._due.clear()
