"""A fair limit on how fast environments wake from sleep (or resume).

"Start all" for a class of 300, a lecture's schedule, or 300 students arriving at once would
otherwise scale 300 Deployments up in one burst: the API server, the scheduler and the node
take them better as a steady stream. A token bucket (`rate` per second, up to `burst` at once)
lets environments through in the order they asked (first come, first served): each waits for
its place in the line, and one that leaves the line before its turn (it fell asleep again, was
suspended or removed) takes no token, so nobody behind it waits for nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable


class WakeRate:
    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 on_turn: Callable[[Hashable, float], None] | None = None) -> None:
        """`on_turn(key, seconds)`: called when a key's turn comes, with how long it waited in
        the line (0 for one let through at once), for /metrics."""
        if rate <= 0 or burst < 1:
            raise ValueError("the wake rate must be positive and the burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._on_turn = on_turn
        self._tokens = float(burst)
        self._updated = clock()
        self._line: dict[Hashable, float] = {}  # keys waiting, in the order they asked: since when

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    def wait(self, key: Hashable) -> float:
        """0 when `key` may wake now (it takes a token and leaves the line); otherwise about how
        many seconds until its turn (ask again then)."""
        self._refill()
        self._line.setdefault(key, self._updated)
        position = 0
        for waiting in self._line:  # a few hundred at most: a class
            if waiting == key:
                break
            position += 1
        if self._tokens >= position + 1 - 1e-9:  # (float: a refill of exactly one token)
            self._tokens -= 1.0
            joined = self._line.pop(key)
            if self._on_turn is not None:
                self._on_turn(key, self._updated - joined)
            return 0.0
        return max(0.01, (position + 1 - self._tokens) / self.rate)

    def done(self, key: Hashable) -> None:
        """`key` no longer wants to wake (asleep again, suspended, gone): it leaves the line."""
        self._line.pop(key, None)

    def is_waiting(self, key: Hashable) -> bool:
        return key in self._line

    @property
    def waiting(self) -> int:
        return len(self._line)

    def keys(self) -> Iterable[Hashable]:
        """The keys waiting, first in line first."""
        return list(self._line)
