"""Prometheus metrics of one gateway process (a registry per app, no module globals).

With `--workers N` every worker process has its own registry and answers /metrics with its
own numbers (the `worker` label tells them apart when scraped through the shared port).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, worker: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"worker": worker or str(os.getpid())}
        self.requests = Counter(
            "userland_gateway_requests", "Requests answered, by status class (2xx, 3xx, ...)",
            ["code_class", "worker"], registry=self.registry)
        self.latency = Histogram(
            "userland_gateway_request_duration_seconds",
            "Time to the response headers (for WebSockets: the whole session)",
            ["worker"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.upstream_errors = Counter(
            "userland_gateway_upstream_errors", "Upstream failures by kind (refused, timeout, ...)",
            ["kind", "worker"], registry=self.registry)
        self.websockets = Gauge(
            "userland_gateway_websockets_active", "WebSocket sessions open through the gateway",
            ["worker"], registry=self.registry)
        self._worker = labels["worker"]
        self._latency = self.latency.labels(worker=self._worker)
        self._ws = self.websockets.labels(worker=self._worker)
        self._classes = {c: self.requests.labels(code_class=c, worker=self._worker)
                         for c in ("1xx", "2xx", "3xx", "4xx", "5xx")}

    def observe(self, status: int, seconds: float, *, latency: bool = True) -> None:
        counter = self._classes.get(f"{status // 100}xx")
        if counter is not None:
            counter.inc()
        if latency:
            self._latency.observe(seconds)

    def upstream_error(self, kind: str) -> None:
        self.upstream_errors.labels(kind=kind, worker=self._worker).inc()

    def websocket_opened(self) -> None:
        self._ws.inc()

    def websocket_closed(self) -> None:
        self._ws.dec()

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data
