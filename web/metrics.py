"""Prometheus metrics of one web UI process, served on its internal listener.

Pages by route (the router's pattern, such as `/courses/{ns}`: never a course's or a login's
name), their latency and answers; live dashboard streams open (server-sent events); staff
actions by course, action and outcome (what web/actions.py reports per environment); the
courses the UI can read; help in the lab by course (students asking, staff given access and how
long the student waited for them, access ending and why); and the platform layer's figures
(the API client, the course watches, Redis). docs/metrics.md says what each answers. Pages are
counted in plain numbers and handed to Prometheus at scrape time, as the gateway does.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from userland.platform.clients.exposition import histogram_family
from userland.platform.model.telemetry import PlainHistogram

# Seconds to render a page: from the watch cache, milliseconds (README "Benchmarks"); a roster
# upload of 500 students a few seconds.
PAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METHODS = frozenset({"GET", "HEAD", "POST"})
_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
# A live stream lasts as long as the page stays open: counted, kept out of the latency.
STREAM_ROUTE = "/courses/{ns}/stream"
# Help in the lab: seconds from a student asking to a member of staff joining them (a lab
# session's minutes), and the few ways access ends (web/help_records.py's reasons, grouped:
# staff removed, the course's policy or the course itself gone are "revoked").
HELP_WAIT_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
HELP_BASES = ("request", "instructors")
HELP_ENDS = ("done", "student", "expired", "revoked")


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
        # Help in the lab, as plain numbers by course (rare events; every watched course's series
        # exist from the start at 0, so a course where nobody has asked yet shows 0, not nothing).
        self.help_asks: Tally[str] = Tally()
        self.help_grants: Tally[tuple[str, str]] = Tally()  # (course, basis)
        self.help_ends: Tally[tuple[str, str]] = Tally()  # (course, end)
        self.help_wait: dict[str, PlainHistogram] = {}
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

    def help_asked(self, course: str) -> None:
        self.help_asks[course] += 1

    def help_granted(self, course: str, basis: str, waited: float | None) -> None:
        """A member of staff given access; `waited`: seconds since the student asked (None when
        opened without a request)."""
        self.help_grants[(course, basis if basis in HELP_BASES else "request")] += 1
        if waited is not None:
            self._help_wait(course).observe(max(0.0, waited))

    def help_ended(self, course: str, reason: str) -> None:
        end = reason if reason in HELP_ENDS else "done" if reason == "ended" else "revoked"
        self.help_ends[(course, end)] += 1

    def _help_wait(self, course: str) -> PlainHistogram:
        histogram = self.help_wait.get(course)
        if histogram is None:
            histogram = self.help_wait[course] = PlainHistogram(HELP_WAIT_BUCKETS)
        return histogram

    def attach(self, **sources: Callable[[], Any]) -> None:
        """Scrape-time sources: `streams()` (live streams open), `courses()` (course watch
        statuses), `course_names()` (the courses watched: their help series exist at 0),
        `platform` (a PlatformCollector, registered)."""
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
        yield from _help_families(m)


def _help_families(m: WebMetrics) -> Iterator[Metric]:
    names = m.sources.get("course_names")
    courses = sorted({*(names() if names is not None else ()), *m.help_asks,
                      *(c for c, _ in m.help_grants), *(c for c, _ in m.help_ends), *m.help_wait})
    asks = CounterMetricFamily("userland_web_help_asks", "Students who asked for help, by course",
                               labels=["course"])
    grants = CounterMetricFamily("userland_web_help_grants",
                                 "Staff given access to a student's environments, by course and basis "
                                 "(request: the student asked; instructors: opened unasked)",
                                 labels=["course", "basis"])
    ends = CounterMetricFamily("userland_web_help_ends",
                               "Staff access that ended, by course and how (done: staff pressed Done; "
                               "student: ended by the student; expired; revoked: staff removed, the "
                               "course's policy or the course gone)", labels=["course", "end"])
    for course in courses:
        asks.add_metric([course], m.help_asks.get(course, 0))
        for basis in HELP_BASES:
            grants.add_metric([course, basis], m.help_grants.get((course, basis), 0))
        for end in HELP_ENDS:
            ends.add_metric([course, end], m.help_ends.get((course, end), 0))
    yield asks
    yield grants
    yield ends
    yield histogram_family("userland_web_help_wait_seconds",
                           "Seconds from a student asking for help to a member of staff joining them",
                           [([course], m.help_wait.get(course) or PlainHistogram(HELP_WAIT_BUCKETS))
                            for course in courses], ["course"])


async def metrics_page(request: web.Request) -> web.Response:
    metrics = request.app[WEB_METRICS]
    return web.Response(body=metrics.render(), headers={"Content-Type": metrics.content_type})


WEB_METRICS = web.AppKey("userland_web_metrics", WebMetrics)
