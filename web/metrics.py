"""Prometheus metrics of one web UI process, served on its internal listener.

Pages by route (the router's pattern, such as `/courses/{ns}`: never a course's or a login's
name), their latency and answers; live dashboard streams open (server-sent events); staff
actions by course, action and outcome (what web/actions.py reports per environment); the
courses the UI can read; and the platform layer's figures (the API client, the course watches,
Redis). docs/metrics.md says what each answers. Pages are counted in plain numbers and handed
to Prometheus at scrape time, as the gateway does.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from userland.platform.exposition import histogram_family
from userland.platform.telemetry import PlainHistogram

# Seconds to render a page: from the watch cache, milliseconds (README "Benchmarks"); a roster
# upload of 500 students a few seconds.
PAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METHODS = frozenset({"GET", "HEAD", "POST"})
_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
# A live stream lasts as long as the page stays open: counted, kept out of the latency.
STREAM_ROUTE = "/courses/{ns}/stream"


def route_of(request: web.Request) -> str:
    """The router's pattern for the request (bounded by the code), "unmatched" for a 404."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


class WebMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.answers: Tally[tuple[str, str, str]] = Tally()  # route, method, class
        self.latency: dict[tuple[str, str], PlainHistogram] = {}
        self.actions = Counter("userland_web_actions",
                               "What staff did to environments, per environment, by course, action (add, "
                               "start, restart, suspend, resume, remove) and outcome",
                               ["course", "action", "outcome"], registry=self.registry)
        self.sources: dict[str, Callable[[], Any]] = {}
        self.registry.register(_Collector(self))  # type: ignore[arg-type]

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"  # a client chooses the method: bounded here
        index = status // 100
        self.answers[(route, method, _CLASSES[index - 1] if 1 <= index <= 5 else "other")] += 1
        if route != STREAM_ROUTE:
            histogram = self.latency.get((route, method))
            if histogram is None:
                histogram = self.latency[(route, method)] = PlainHistogram(PAGE_BUCKETS)
            histogram.observe(seconds)

    def actions_done(self, course: str, action: str, outcomes: Iterable[str]) -> None:
        for outcome, count in Tally(outcomes).items():
            self.actions.labels(course, action, outcome).inc(count)

    def attach(self, **sources: Callable[[], Any]) -> None:
        """Scrape-time sources: `streams()` (live streams open), `courses()` (course watch
        statuses), `platform` (a PlatformCollector, registered)."""
        platform = sources.pop("platform", None)
        if platform is not None:
            self.registry.register(platform())
        self.sources.update(sources)

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data


class _Collector:
    def __init__(self, metrics: WebMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        family = CounterMetricFamily("userland_web_requests", "Requests by route, method and status class",
                                     labels=["route", "method", "code_class"])
        for (route, method, code_class), count in sorted(m.answers.items()):
            family.add_metric([route, method, code_class], count)
        yield family
        yield histogram_family("userland_web_request_duration_seconds",
                               "Time to answer a page, by route and method (live streams not included)",
                               [([route, method], h) for (route, method), h in sorted(m.latency.items())],
                               ["route", "method"])
        if (streams := m.sources.get("streams")) is not None:
            gauge = GaugeMetricFamily("userland_web_streams_open",
                                      "Live class dashboards open (server-sent event streams)")
            gauge.add_metric([], streams())
            yield gauge
        if (courses := m.sources.get("courses")) is not None:
            gauge = GaugeMetricFamily("userland_web_courses",
                                      "Courses the web UI watches, by status (ready, degraded: some objects "
                                      "unreadable, not_set_up: no RBAC yet, starting)", labels=["status"])
            counted = Tally(courses())
            for status in ("ready", "degraded", "not_set_up", "starting"):
                gauge.add_metric([status], counted.get(status, 0))
            yield gauge


async def metrics_page(request: web.Request) -> web.Response:
    metrics = request.app[WEB_METRICS]
    return web.Response(body=metrics.render(), headers={"Content-Type": metrics.content_type})


WEB_METRICS = web.AppKey("userland_web_metrics", WebMetrics)
