"""Prometheus metrics of one gateway process (a registry per app, no module globals).

What is counted on every request (requests by status class, the latency histogram, the
platform's own failures) is kept in plain numbers and handed to Prometheus only when it
scrapes (`_RequestStats`): prometheus_client's Counter and Histogram take a lock and walk the
buckets per observation, a few percent of a request's CPU. Refusals are a dict increment (an
unauthenticated flood is all refusals). The rest is read at scrape time from the parts that
know it (`attach`): open connections and the connection-level refusals from the server, whether
the Redis invalidation channel is up from the session cache, sign-ins from the auth routes,
handoffs from the origin endpoints, the number of sessions from Redis (at most once a minute,
proxy/session_census.py), the API client's, watches' and Redis client's figures from the
platform layer. The rarer events by course (wakes asked, waiting pages) stay prometheus_client's own.

`worker` is the worker's number (0 with `--workers 1`): with `--workers N` every worker process
has its own registry and answers /metrics with its own numbers on the shared port
(docs/metrics.md: scrape one worker per pod, as deploy/ runs it, or sum by worker).
`NullGatewayMetrics` counts nothing (`userland gateway --no-metrics`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from userland.platform.clients.exposition import PlatformCollector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")

# Why a request (or a connection) was refused -> the kind of refusal.
# auth: nobody signed in where it is needed, someone else's origin, no environment here;
# origin: from another site, or a platform cookie planted twice;
# limits: the flood defences (SECURITY.md) and a busy Redis share.
REFUSALS: Mapping[str, str] = {
    "no_session": "auth", "not_yours": "auth", "no_environment": "auth",
    "cross_site": "origin", "cookie_twice": "origin",
    "connections": "limits", "header_size": "limits", "header_timeout": "limits", "bad_request": "limits",
    "websockets": "limits", "login_rate": "limits", "handoff_rate": "limits", "busy": "limits",
}
# Counted by the server below aiohttp (proxy/connections.py ConnectionCounts.refused).
CONNECTION_REFUSALS = ("connections", "header_size", "header_timeout", "bad_request")
# UpstreamError kinds (proxy/upstream.py, upstream_client.py, websocket.py): every series exists
# from the start, at 0, so "no errors" is a zero on a panel, not "no data".
UPSTREAM_ERROR_KINDS = ("refused", "timeout", "broken", "interrupted", "invalid", "handshake")


class _RequestStats:
    """Requests by status class, the latency histogram and the platform's own failures of one
    process, as plain numbers, for a Prometheus collector (one event loop thread updates them;
    a scrape reads them)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.classes = [0] * 6  # index: status // 100 (1-5 are exported)
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: over the largest bound
        self.latency_sum = 0.0
        self.failed = 0
        self.refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("userland_gateway_requests",
                                       "Requests answered, by status class (2xx, 3xx, ...)",
                                       labels=["code_class", "worker"])
        for index, name in enumerate(_CLASSES, start=1):
            requests.add_metric([name, self.worker], self.classes[index])
        yield requests
        latency = HistogramMetricFamily("userland_gateway_request_duration_seconds",
                                        "Time to the response headers (WebSockets not included)",
                                        labels=["worker"])
        cumulative, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.buckets, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
        latency.add_metric([self.worker], buckets=cumulative, sum_value=self.latency_sum)
        yield latency
        failed = CounterMetricFamily(
            "userland_gateway_failed_requests",
            "Requests the gateway itself answered with a 5xx: an environment or the web UI it could not "
            "reach, Redis down, a bug (an environment's own 5xx and the designed 503 of one still "
            "waking are not failures)", labels=["worker"])
        failed.add_metric([self.worker], self.failed)
        yield failed


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
        self._worker = worker or "0"
        self._stats = _RequestStats(self._worker)
        self.registry.register(self._stats)  # type: ignore[arg-type]  # a collector: collect()
        self.upstream_errors = Counter(
            "userland_gateway_upstream_errors", "Upstream failures by kind (refused, timeout, ...)",
            ["kind", "worker"], registry=self.registry)
        self.websockets = Gauge(
            "userland_gateway_websockets_active", "WebSocket sessions open through the gateway",
            ["worker"], registry=self.registry)
        self.wake_requests = Counter(
            "userland_gateway_wake_requests", "Sleeping environments this gateway asked to wake (a "
            "student's request that counts as use)", ["course", "worker"], registry=self.registry)
        self.waiting_pages = Counter(
            "userland_gateway_waiting_answers", "Requests to an environment not answering yet (asleep, "
            "waking, starting): the waking page, or a 503 with Retry-After", ["course", "worker"],
            registry=self.registry)
        # Help in the lab (proxy/rules/decision.py, proxy/grant_watch.py): requests of staff on a
        # student's origin by outcome (admitted; ended: the grant had ended; embedded: another
        # site's page asked), counted per request as plain numbers like the request counts, and
        # staff connections closed because their grant ended or ran out (rare: a Counter).
        self._help = _HelpStats(self._worker)
        self.registry.register(self._help)  # type: ignore[arg-type]  # a collector: collect()
        self.help_closed = Counter(
            "userland_gateway_help_connections_closed",
            "Staff connections closed because their help grant ended (ended) or ran out (expired)",
            ["reason", "worker"], registry=self.registry)
        for reason in ("ended", "expired"):
            self.help_closed.labels(reason=reason, worker=self._worker)
        self._ws = self.websockets.labels(worker=self._worker)
        for kind in UPSTREAM_ERROR_KINDS:
            self.upstream_errors.labels(kind=kind, worker=self._worker)
        self._state = _StateCollector(self._worker, self._stats)
        self.registry.register(self._state)  # type: ignore[arg-type]

    # -- per request (the hot path: plain numbers)

    def observe(self, status: int, seconds: float, *, latency: bool = True, failed: bool = False) -> None:
        stats = self._stats
        if 100 <= status < 600:
            stats.classes[status // 100] += 1
        if latency:
            stats.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            stats.latency_sum += seconds
        if failed:
            stats.failed += 1

    def refused(self, reason: str) -> None:
        """A request refused for `reason` (a key of REFUSALS)."""
        self._stats.refused[reason] += 1

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

    def wake_requested(self, course: str) -> None:
        self.wake_requests.labels(course, self._worker).inc()

    def waiting_answer(self, course: str) -> None:
        self.waiting_pages.labels(course, self._worker).inc()

    # -- read at scrape time

    def attach(self, **sources: Callable[[], Any]) -> None:
        """Where the scrape-time figures come from (see `_StateCollector`); the gateway app calls
        it as its parts start."""
        self._state.sources.update(sources)

    def attach_platform(self, collector: PlatformCollector) -> None:
        self.registry.register(collector)  # type: ignore[arg-type]

    @property
    def worker(self) -> str:
        return self._worker

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data


class NullGatewayMetrics(GatewayMetrics):
    """Counts nothing per request and serves an empty page (`userland gateway --no-metrics`; the
    benchmark's baseline of what metrics cost)."""

    def observe(self, status: int, seconds: float, *, latency: bool = True, failed: bool = False) -> None:
        pass

    def refused(self, reason: str) -> None:
        pass

    def upstream_error(self, kind: str) -> None:
        pass

    def websocket_opened(self) -> None:
        pass

    def websocket_closed(self) -> None:
        pass

    def wake_requested(self, course: str) -> None:
        pass

    def waiting_answer(self, course: str) -> None:
        pass

    def attach_platform(self, collector: PlatformCollector) -> None:
        pass

    def render(self) -> bytes:
        return b""


def _counted(values: Iterable[tuple[str, int]]) -> dict[str, int]:
    return {key: int(count) for key, count in values}


class _StateCollector:
    """Figures the gateway's parts keep, read at scrape time. Each source is a function (absent
    ones export nothing):
    - `connections()`: proxy/connections.py ConnectionCounts (open connections, refusals below aiohttp);
    - `redis_connected()`: whether the sessions' invalidation channel is up (bool);
    - `sign_ins()`, `auth_refusals()`: sign-in outcomes and refusals of the auth routes
      (auth/context.py AuthContext);
    - `handoffs()`: origin handoff outcomes (proxy/origins.py);
    - `sessions()`: (platform, origin) session counts, or None before the first count."""

    def __init__(self, worker: str, stats: _RequestStats) -> None:
        self.worker = worker
        self.stats = stats
        self.sources: dict[str, Callable[[], Any]] = {}

    def collect(self) -> Iterator[Metric]:
        w = self.worker
        connections = self.sources.get("connections")
        counts = connections() if connections is not None else None
        refused = dict(self.stats.refused)
        if (auth_refusals := self.sources.get("auth_refusals")) is not None:
            for reason, count in auth_refusals().items():  # login and handoff rates, a busy Redis
                if reason in refused:
                    refused[reason] += int(count)
        if counts is not None:
            for reason in CONNECTION_REFUSALS:
                refused[reason] += int(counts.refused.get(reason, 0))
            gauge = GaugeMetricFamily("userland_gateway_connections_open", "Client connections open",
                                      labels=["worker"])
            gauge.add_metric([w], counts.total)
            yield gauge
        family = CounterMetricFamily("userland_gateway_refusals",
                                     "Requests and connections refused, by kind (auth, origin, limits) "
                                     "and reason", labels=["kind", "reason", "worker"])
        for reason, kind in REFUSALS.items():
            family.add_metric([kind, reason, w], refused[reason])
        yield family
        if (redis_connected := self.sources.get("redis_connected")) is not None:
            gauge = GaugeMetricFamily("userland_gateway_redis_connected",
                                      "1 while the gateway's subscription to Redis (session "
                                      "invalidations, pinged every 0.5 s) is up; 0 while Redis is "
                                      "unreachable (every protected request gets a 503)", labels=["worker"])
            gauge.add_metric([w], 1 if redis_connected() else 0)
            yield gauge
        for source, name, help_text in (
                ("sign_ins", "userland_gateway_sign_ins",
                 "Sign-ins by outcome (succeeded; cancelled, expired, code_refused, not_allowed, "
                 "binding_refused: the person's side; github_unavailable, invalid_login, unavailable: "
                 "the platform's)"),
                ("handoffs", "userland_gateway_handoffs",
                 "Handoffs that sign a student's own origin in, by outcome (ok, expired)")):
            if (read := self.sources.get(source)) is not None:
                family = CounterMetricFamily(name, help_text, labels=["outcome", "worker"])
                for outcome, count in sorted(_counted(read().items()).items()):
                    family.add_metric([outcome, w], count)
                yield family
        if (sessions := self.sources.get("sessions")) is not None and (found := sessions()) is not None:
            gauge = GaugeMetricFamily("userland_gateway_sessions",
                                      "Live sessions in Redis: platform (signed-in browsers) and origin "
                                      "(students' own origins signed in); counted at most once a minute",
                                      labels=["kind", "worker"])
            gauge.add_metric(["platform", w], found[0])
            gauge.add_metric(["origin", w], found[1])
            yield gauge
