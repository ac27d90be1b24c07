"""Prometheus metrics of one operator process, and the /healthz + /metrics HTTP server."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "userland_operator_reconciles_total",
            "Reconciles by kind and result",
            ["kind", "result"],
            registry=self.registry,
        )
        self.errors = Counter(
            "userland_operator_reconcile_errors_total",
            "Reconciles that failed",
            ["kind", "reason"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "userland_operator_reconcile_duration_seconds",
            "Reconcile duration",
            ["kind"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.queue_depth = Gauge(
            "userland_operator_queue_depth", "Keys waiting in the work queue", registry=self.registry
        )
        self.writes = Counter(
            "userland_operator_api_writes_total",
            "Write requests to the API server",
            ["verb", "kind"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "userland_operator_leader", "1 while this process holds the lease", registry=self.registry
        )
        self.objects = Gauge(
            "userland_operator_cached_objects",
            "Objects in the watch caches",
            ["kind"],
            registry=self.registry,
        )
        # Assignments (docs/assignments.md).
        self.assignment_pods = Counter(
            "userland_operator_assignment_worker_pods_total",
            "Worker Pods made for assignments, by kind of work (handout, collect, feedback)",
            ["kind"], registry=self.registry)
        self.assignment_fetches = Counter(
            "userland_operator_assignment_fetches_total",
            "Fetches of an assignment's source by the store, by result (ok, or the reason it failed)",
            ["result"], registry=self.registry)
        self.assignment_fetch_seconds = Histogram(
            "userland_operator_assignment_fetch_seconds", "Time to fetch an assignment's source (successes)",
            registry=self.registry, buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
        self.assignment_copy_delay = Histogram(
            "userland_operator_assignment_copy_delay_seconds",
            "How long after its moment (a deadline, collect now) each student's copy was taken",
            registry=self.registry, buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600))


def health_app(
    metrics: OperatorMetrics, healthy: Callable[[], tuple[bool, str]], refresh: Callable[[], None]
) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        ok, detail = healthy()
        return web.Response(status=200 if ok else 503, text=detail + "\n")

    async def metrics_view(_: web.Request) -> web.Response:
        refresh()
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_view)
    return app
