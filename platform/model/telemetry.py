"""Figures the platform layer keeps as plain numbers, for the components to export.

The Kubernetes client (platform/clients/kube.py), the informers (platform/clients/informer.py) and the Redis
client (platform/clients/redis_pool.py) count what they do here, with no Prometheus import: the
platform layer stays light, and each component hands these numbers to Prometheus when it is
scraped (platform/clients/exposition.py). Updating one is an integer addition and, for a histogram, a
bisect: cheap enough for every request.

Every key is bounded by the code, never by the data: verbs, resource kinds, HTTP status codes,
reasons. No login, no object name (docs/metrics.md).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

# Seconds. API requests and Redis commands: from a millisecond to the client's own timeouts.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PlainHistogram:
    """A histogram as plain numbers: a count per bucket (not cumulative), the sum, the count."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = REQUEST_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: over the largest bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound counts in that bound's bucket (le is inclusive).
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs as Prometheus exposes them, "+Inf" last."""
        pairs, running = [], 0
        for bound, count in zip((*self.bounds, None), self.counts, strict=True):
            running += count
            pairs.append(("+Inf" if bound is None else repr(float(bound)), running))
        return pairs


def http_code(status: int) -> str:
    """The `code` label of a request: its HTTP status, or "none" when no answer came."""
    return str(status) if status else "none"


@dataclass
class KubeStats:
    """Requests of one KubeClient: count by (verb, resource kind, code), latency by verb.

    Verbs are Kubernetes' own: get, list, create, update, patch, delete, watch. A watch is
    counted when it starts (its code: the answer to the request); its length is no latency.
    """

    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    latency: dict[str, PlainHistogram] = field(default_factory=dict)

    def record(self, verb: str, kind: str, status: int, seconds: float | None) -> None:
        self.requests[(verb, kind, http_code(status))] += 1
        if seconds is not None:
            histogram = self.latency.get(verb)
            if histogram is None:
                histogram = self.latency[verb] = PlainHistogram()
            histogram.observe(seconds)


@dataclass
class WatchStats:
    """One informer's watches (all its namespaces together)."""

    # By why the watch ended and was started again (platform/clients/informer.py): timeout (the server
    # ended it on its timeoutSeconds: normal, resumed from the last version), expired (410 Gone,
    # the version is too old: a relist follows), stalled (nothing arrived for too long: a relist
    # follows), error (the request failed: resumed after a backoff).
    restarts: Counter[str] = field(default_factory=Counter)
    relists: int = 0


# Why a Redis command failed: connection (refused, reset, unreachable), timeout, busy (no
# connection of this process's pool came free in time: platform/clients/redis_pool.py; Redis itself may
# be fine), error (Redis answered with an error).
REDIS_ERROR_KINDS = ("connection", "timeout", "busy", "error")


@dataclass
class RedisStats:
    """Commands (a pipeline counts as one round trip) of one Redis client."""

    latency: PlainHistogram = field(default_factory=PlainHistogram)
    errors: Counter[str] = field(default_factory=Counter)  # by REDIS_ERROR_KINDS
