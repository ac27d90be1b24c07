"""Prometheus metrics of one operator process, and the /healthz + /metrics HTTP server.

Each metric answers an operator's question (docs/metrics.md says which). Labels are bounded by
courses (namespaces) and Templates, never by students. What changes with every event is kept
by the parts that see it (operator/rules/census.py counts environments, operator/lifecycle.py times
them, the wake line knows its length) and read at scrape time by `StateCollector`; the
Kubernetes client's and the watches' figures come from the platform layer
(platform/clients/exposition.py). The environment figures are exported by the leader only (a standby
replica's caches hold the same objects: summing both would count every environment twice).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from userland.operator.rules.assignment.census import PHASES as ASSIGNMENT_PHASES
from userland.operator.rules.assignment.census import STATES as ASSIGNMENT_STATES
from userland.operator.rules.assignment.census import AssignmentCensus
from userland.operator.rules.census import PHASES

# Seconds from a student's new Userland to its environment Ready: a local process in under a
# second, a cluster's first image pull in minutes (the start timeout is 10 minutes).
START_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
# Seconds from the request that woke an environment to Ready (the SLO: 60 s, docs/slo.md).
WAKE_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
# Seconds one copy's grader ran (default time limit 60 s, at most 30 minutes).
GRADING_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
# Seconds an environment waited in the wake line for its turn.
LINE_BUCKETS = (0, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter("userland_operator_reconciles_total", "Reconciles by kind and result",
                                  ["kind", "result"], registry=r)
        self.errors = Counter("userland_operator_reconcile_errors_total",
                              "Reconciles that failed, by kind and error", ["kind", "reason"], registry=r)
        self.duration = Histogram(
            "userland_operator_reconcile_duration_seconds", "Reconcile duration", ["kind"], registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.queue_depth = Gauge("userland_operator_queue_depth", "Keys waiting in the work queue",
                                 registry=r)
        self.last_reconcile = Gauge("userland_operator_last_reconcile_timestamp_seconds",
                                    "When this process last finished a reconcile (Unix time; 0: never)",
                                    registry=r)
        self.leader = Gauge("userland_operator_leader", "1 while this process holds the lease", registry=r)
        self.objects = Gauge("userland_operator_cached_objects", "Objects in the watch caches", ["kind"],
                             registry=r)
        self.start_seconds = Histogram(
            "userland_environment_start_seconds",
            "From a Userland's creation to its environment Ready for the first time",
            ["course", "template"], registry=r, buckets=START_BUCKETS)
        self.wake_seconds = Histogram(
            "userland_environment_wake_seconds",
            "From the request that woke a sleeping environment to Ready (the wake line included)",
            ["course", "template"], registry=r, buckets=WAKE_BUCKETS)
        self.line_seconds = Histogram(
            "userland_wake_line_wait_seconds",
            "Time an environment waited in the wake line for its turn (0: let through at once)",
            ["course"], registry=r, buckets=LINE_BUCKETS)
        self.sleeps = Counter("userland_environment_sleeps_total", "Environments that went to sleep",
                              ["course", "template"], registry=r)
        self.wakes = Counter(
            "userland_environment_wakes_total",
            "Sleeping environments woken, by what woke them (visit, staff-start, start-all, lecture)",
            ["course", "template", "cause"], registry=r)
        self.wake_failures = Counter("userland_environment_wake_failures_total",
                                     "Wakes that ended Failed instead of Ready", ["course", "template"],
                                     registry=r)
        self.failures = Counter(
            "userland_environment_failures_total",
            "Environments that stopped being able to start, by kind (image, crash, quota, storage, "
            "scheduling, config, timeout, other)", ["course", "template", "reason"], registry=r)
        # Assignments (docs/assignments.md).
        self.assignment_pods = Counter(
            "userland_operator_assignment_worker_pods_total",
            "Worker Pods made for assignments, by kind of work (handout, collect, feedback)",
            ["kind"], registry=r)
        self.assignment_fetches = Counter(
            "userland_operator_assignment_fetches_total",
            "Fetches of an assignment's source by the store, by result (ok, or the reason it failed)",
            ["result"], registry=r)
        self.assignment_fetch_seconds = Histogram(
            "userland_operator_assignment_fetch_seconds", "Time to fetch an assignment's source (successes)",
            registry=r, buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
        self.assignment_copy_delay = Histogram(
            "userland_operator_assignment_copy_delay_seconds",
            "How long after its moment (a deadline, collect now) each student's copy was taken",
            registry=r, buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600))
        self.grading_seconds = Histogram(
            "userland_grading_duration_seconds",
            "How long the grader ran on one copy (the teacher's container, from start to end), by course",
            ["course"], registry=r, buckets=GRADING_BUCKETS)
        # Set by the process (operator/main.py) before each scrape; the standby exports no state.
        self.is_leader = True


Labels = tuple[str, str, str]


class StateCollector:
    """The environment figures read at scrape time: counts by phase and failing kind (from the
    census), the longest wait per course (from the lifecycle), the wake line per course."""

    def __init__(self, metrics: OperatorMetrics, *, phases: Callable[[], Iterable[tuple[Labels, int]]],
                 pairs: Callable[[], Iterable[tuple[str, str]]],
                 failing: Callable[[], Iterable[tuple[Labels, int]]],
                 longest_waits: Callable[[], dict[str, float]],
                 line: Callable[[], Iterable[Any]]) -> None:
        self._metrics = metrics
        self._phases = phases
        self._pairs = pairs
        self._failing = failing
        self._longest = longest_waits
        self._line = line

    def collect(self) -> Iterator[Metric]:
        environments = GaugeMetricFamily("userland_environments",
                                         "Environments by course, Template and phase",
                                         labels=["course", "template", "phase"])
        failing = GaugeMetricFamily("userland_environments_failing",
                                    "Environments that cannot start now, by kind of reason (image, crash, "
                                    "quota, storage, scheduling, config, timeout, other)",
                                    labels=["course", "template", "reason"])
        waits = GaugeMetricFamily("userland_environment_wait_longest_seconds",
                                  "How long the course's longest-waiting environment (starting, waking, "
                                  "or pending) has waited so far; 0 when none waits", labels=["course"])
        line = GaugeMetricFamily("userland_wake_line_length",
                                 "Environments waiting in the wake line for their turn", labels=["course"])
        if self._metrics.is_leader:
            counts = dict(self._phases())
            courses = set()
            for course, template in self._pairs():
                courses.add(course)
                for phase in PHASES:  # every phase, zeros too: a panel or rule never lacks a series
                    count = counts.get((course, template, phase), 0)
                    environments.add_metric([course, template, phase], count)
            for (course, template, reason), count in sorted(self._failing()):
                failing.add_metric([course, template, reason], count)
            longest = self._longest()
            for course in sorted(courses | set(longest)):
                waits.add_metric([course], longest.get(course, 0.0))
            in_line: Tally[str] = Tally(str(key[0]) for key in self._line())
            for course in sorted(courses | set(in_line)):
                line.add_metric([course], in_line.get(course, 0))
        yield environments
        yield failing
        yield waits
        yield line


class AssignmentCollector:
    """The assignment figures read at scrape time, from the assignment census: per course, every
    phase and every student state (zeros too: a rule or panel never lacks a series), and the
    copies whose moment has come but are not taken."""

    def __init__(self, metrics: OperatorMetrics, census: AssignmentCensus) -> None:
        self._metrics = metrics
        self._census = census

    def collect(self) -> Iterator[Metric]:
        phases = GaugeMetricFamily("userland_assignments", "Assignments by course and phase "
                                   "(Scheduled, HandingOut, Open, Collecting, Collected, Failed)",
                                   labels=["course", "phase"])
        students = GaugeMetricFamily("userland_assignment_students",
                                     "Students' entries of the course's assignments by hand-out state "
                                     "(Scheduled, Waiting, Pending, HandedOut, Conflicts, Failed, "
                                     "NoEnvironment)",
                                     labels=["course", "state"])
        missing = GaugeMetricFamily("userland_assignment_copies_missing",
                                    "Students' copies whose moment (deadline, extension, collect now) has "
                                    "come and that are not taken yet", labels=["course"])
        queued = GaugeMetricFamily("userland_grading_queue_length",
                                   "Collected copies waiting for a grading slot (the fair queue), by course",
                                   labels=["course"])
        running = GaugeMetricFamily("userland_grading_running", "Copies being graded now, by course",
                                    labels=["course"])
        if self._metrics.is_leader:
            census = self._census
            for course in census.courses():
                for phase in ASSIGNMENT_PHASES:
                    phases.add_metric([course, phase], census.phases.get((course, phase), 0))
                for state in ASSIGNMENT_STATES:
                    students.add_metric([course, state], census.states.get((course, state), 0))
                missing.add_metric([course], census.missing.get(course, 0))
                queued.add_metric([course], census.grading.get((course, "Queued"), 0))
                running.add_metric([course], census.grading.get((course, "Running"), 0))
        yield phases
        yield students
        yield missing
        yield queued
        yield running


class LectureCollector:
    """Each scheduled Template's readiness for its next lecture (operator/rules/capacity/), read at
    scrape time from what the Template's last reconcile decided."""

    def __init__(self, metrics: OperatorMetrics,
                 lectures: Callable[[], Iterable[tuple[tuple[str, str], Any]]]) -> None:
        self._metrics = metrics
        self._lectures = lectures

    def collect(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily("userland_lecture_ready",
                                  "1 when the course will be ready for the Template's next lecture (every "
                                  "environment can start, images on every node, room for all), else 0",
                                  labels=["course", "template"])
        starts = GaugeMetricFamily("userland_lecture_next_start_timestamp_seconds",
                                   "When the Template's next scheduled lecture starts (Unix time)",
                                   labels=["course", "template"])
        waiting = GaugeMetricFamily("userland_lecture_environments_without_room",
                                    "Environments expected at the next lecture that have no room on a node "
                                    "yet (while room is held before it)", labels=["course", "template"])
        if self._metrics.is_leader:
            for (course, template), lecture in sorted(self._lectures(), key=lambda item: item[0]):
                ready.add_metric([course, template], 1 if lecture.ready else 0)
                starts.add_metric([course, template], lecture.starts_at.timestamp())
                waiting.add_metric([course, template], lecture.waiting)
        yield ready
        yield starts
        yield waiting


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
