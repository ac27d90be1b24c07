"""The platform layer's figures as Prometheus metrics: one collector every component registers.

platform/model/telemetry.py keeps them as plain numbers in the Kubernetes clients, the informers and
the Redis clients; this is the one module of the platform that speaks Prometheus, so kube.py,
informer.py and the rest never import prometheus_client. Each component (operator, gateway,
web UI, the local runner) registers a `PlatformCollector` naming the clients and informers it
has; the metric names are the same everywhere and the scrape's `job` tells the components
apart (docs/metrics.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import KubeClient
from userland.platform.model.telemetry import REDIS_ERROR_KINDS, PlainHistogram, RedisStats

# prometheus_client adds a `_created` series (the start time) beside every counter and histogram
# by default: twice the series for nothing the dashboards or rules read (Prometheus' own
# `resets` and `rate` handle restarts). Off for the whole process, every component imports this.
disable_created_metrics()  # type: ignore[no-untyped-call]


def histogram_family(name: str, documentation: str, series: Iterable[tuple[list[str], PlainHistogram]],
                     labels: list[str]) -> HistogramMetricFamily:
    """A Prometheus histogram family from plain histograms, one per label value list."""
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for values, histogram in series:
        family.add_metric(values, buckets=histogram.cumulative(), sum_value=histogram.sum)
    return family


def merged(histograms: Iterable[PlainHistogram]) -> PlainHistogram | None:
    """Several plain histograms with the same bounds as one (None when there are none)."""
    total: PlainHistogram | None = None
    for histogram in histograms:
        if total is None:
            total = PlainHistogram(histogram.bounds)
        total.counts = [a + b for a, b in zip(total.counts, histogram.counts, strict=True)]
        total.sum += histogram.sum
    return total


class PlatformCollector:
    """Kubernetes API requests, watches and Redis round trips of one process.

    Each argument is a function returning what exists at scrape time (a web UI adds informers
    as courses appear); `labels` are added to every series: `component` (operator, gateway, web,
    runner: dashboards tell them apart without depending on how a site names its scrape jobs),
    and the gateway's `worker`."""

    def __init__(self, *, kube: Callable[[], Iterable[KubeClient]] = tuple,
                 informers: Callable[[], Iterable[Informer]] = tuple,
                 redis: Callable[[], Iterable[Any]] = tuple,
                 labels: Mapping[str, str] | None = None) -> None:
        self._kube = kube
        self._informers = informers
        self._redis = redis
        self._labels = dict(labels or {})

    def collect(self) -> Iterator[Metric]:
        extra_names, extra_values = list(self._labels), list(self._labels.values())
        yield from self._kube_families(extra_names, extra_values)
        yield from self._watch_families(extra_names, extra_values)
        stats = [s for s in (getattr(c, "stats", None) for c in self._redis()) if isinstance(s, RedisStats)]
        if stats:
            yield from self._redis_families(stats, extra_names, extra_values)

    def _kube_families(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        clients = list(self._kube())
        requests: Counter[tuple[str, str, str]] = Counter()
        for client in clients:
            requests.update(client.stats.requests)
        family = CounterMetricFamily("userland_kube_requests",
                                     "Requests to the Kubernetes API server by verb, resource kind and "
                                     "answer (HTTP status; none: no answer)",
                                     labels=["verb", "resource", "code", *names])
        for (verb, kind, code), count in sorted(requests.items()):
            family.add_metric([verb, kind, code, *values], count)
        yield family
        verbs = sorted({verb for client in clients for verb in client.stats.latency})
        series = []
        for verb in verbs:
            histogram = merged(c.stats.latency[verb] for c in clients if verb in c.stats.latency)
            if histogram is not None:
                series.append(([verb, *values], histogram))
        yield histogram_family("userland_kube_request_duration_seconds",
                               "Time to the API server's whole answer, by verb (watches not included)",
                               series, ["verb", *names])

    def _watch_families(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        informers = list(self._informers())
        restarts: Counter[tuple[str, str]] = Counter()
        relists: Counter[str] = Counter()
        healthy: dict[str, int] = {}
        for informer in informers:
            kind = informer.resource.kind
            for reason, count in informer.watch_stats.restarts.items():
                restarts[(kind, reason)] += count
            relists[kind] += informer.watch_stats.relists
            healthy[kind] = min(healthy.get(kind, 1), 1 if informer.healthy else 0)
        family = CounterMetricFamily("userland_watch_restarts",
                                     "Watches started again, by resource kind and why the last one ended "
                                     "(timeout: normal; expired, stalled: a relist follows; error)",
                                     labels=["resource", "reason", *names])
        for (kind, reason), count in sorted(restarts.items()):
            family.add_metric([kind, reason, *values], count)
        yield family
        family = CounterMetricFamily("userland_watch_relists",
                                     "Full lists of a resource kind (at start, and after a watch expired "
                                     "or stalled)", labels=["resource", *names])
        for kind, count in sorted(relists.items()):
            family.add_metric([kind, *values], count)
        yield family
        gauge = GaugeMetricFamily("userland_watch_healthy",
                                  "1 while every watch of this resource kind works; 0 while one fails",
                                  labels=["resource", *names])
        for kind, ok in sorted(healthy.items()):
            gauge.add_metric([kind, *values], ok)
        yield gauge

    def _redis_families(self, stats: list[RedisStats], names: list[str],
                        values: list[str]) -> Iterator[Metric]:
        histogram = merged(s.latency for s in stats)
        assert histogram is not None
        yield histogram_family("userland_redis_command_duration_seconds",
                               "Redis round trips (a command, or a pipeline), waiting for a pooled "
                               "connection included", [(values, histogram)], names)
        family = CounterMetricFamily("userland_redis_errors",
                                     "Redis commands that failed, by kind (connection, timeout, busy: no "
                                     "pooled connection came free in time, error: Redis refused it)",
                                     labels=["kind", *names])
        for kind in REDIS_ERROR_KINDS:
            family.add_metric([kind, *values], sum(s.errors[kind] for s in stats))
        yield family
