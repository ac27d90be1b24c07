"""Prometheus metrics of one gateway process (a registry per app, no module globals).

With `--workers N` every worker process has its own registry and answers /metrics with its
own numbers (the `worker` label tells them apart when scraped through the shared port).
What is counted on every request (requests by status class, the latency histogram) is kept in
plain numbers and handed to Prometheus only when it scrapes (`_RequestStats`): prometheus_client's
Counter and Histogram take a lock and walk the buckets per observation, a few percent of a
request's CPU. The rarer ones (upstream errors, open WebSockets) stay prometheus_client's own.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")


class _RequestStats:
    """Requests by status class and the latency histogram of one process, as plain numbers, for
    a Prometheus collector (one event loop thread updates them; a scrape reads them)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.classes = [0] * 6  # index: status // 100 (1-5 are exported)
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: over the largest bound
        self.latency_sum = 0.0

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("userland_gateway_requests",
                                       "Requests answered, by status class (2xx, 3xx, ...)",
                                       labels=["code_class", "worker"])
        for index, name in enumerate(_CLASSES, start=1):
            requests.add_metric([name, self.worker], self.classes[index])
        yield requests
        latency = HistogramMetricFamily("userland_gateway_request_duration_seconds",
                                        "Time to the response headers (for WebSockets: the whole session)",
                                        labels=["worker"])
        cumulative, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.buckets, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
        latency.add_metric([self.worker], buckets=cumulative, sum_value=self.latency_sum)
        yield latency


class _HelpStats:
    """Staff requests on students' origins by outcome (a handful of fixed outcomes)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.counts: dict[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("userland_gateway_help_requests",
                                     "Requests of staff on a student's origin by a help grant, by outcome",
                                     labels=["outcome", "worker"])
        for outcome in ("admitted", "ended", "embedded"):
            family.add_metric([outcome, self.worker], self.counts.get(outcome, 0))
        yield family


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, worker: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"worker": worker or str(os.getpid())}
        self._stats = _RequestStats(labels["worker"])
        self.registry.register(self._stats)  # type: ignore[arg-type]  # a collector: collect()
        self.upstream_errors = Counter(
            "userland_gateway_upstream_errors", "Upstream failures by kind (refused, timeout, ...)",
            ["kind", "worker"], registry=self.registry)
        self.websockets = Gauge(
            "userland_gateway_websockets_active", "WebSocket sessions open through the gateway",
            ["worker"], registry=self.registry)
        # Help in the lab (proxy/decision.py, proxy/grant_watch.py): requests of staff on a
        # student's origin by outcome (admitted; ended: the grant had ended; embedded: another
        # site's page asked), counted per request as plain numbers like the request counts, and
        # staff connections closed because their grant ended or ran out (rare: a Counter).
        self._help = _HelpStats(labels["worker"])
        self.registry.register(self._help)  # type: ignore[arg-type]  # a collector: collect()
        self.help_closed = Counter(
            "userland_gateway_help_connections_closed",
            "Staff connections closed because their help grant ended (ended) or ran out (expired)",
            ["reason", "worker"], registry=self.registry)
        self._worker = labels["worker"]
        self._ws = self.websockets.labels(worker=self._worker)

    def observe(self, status: int, seconds: float, *, latency: bool = True) -> None:
        stats = self._stats
        if 100 <= status < 600:
            stats.classes[status // 100] += 1
        if latency:
            stats.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            stats.latency_sum += seconds

    def upstream_error(self, kind: str) -> None:
        self.upstream_errors.labels(kind=kind, worker=self._worker).inc()

    def help_request(self, outcome: str) -> None:
        counts = self._help.counts
        counts[outcome] = counts.get(outcome, 0) + 1

    def help_connections_closed(self, reason: str, count: int) -> None:
        self.help_closed.labels(reason=reason, worker=self._worker).inc(count)

    def websocket_opened(self) -> None:
        self._ws.inc()

    def websocket_closed(self) -> None:
        self._ws.dec()

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data
