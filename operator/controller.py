"""The controller: Template + Userland -> Deployment, Service (+ PVC) per student.

Level-triggered: watch events only put `(kind, namespace, name)` keys on the work queue
(operator/indexes.py); a reconcile reads the current state from the watch caches (no API
reads), computes what should be and writes only the difference. This module only wires the
parts together:

- operator/indexes.py: the watch caches, their indexes, and which keys a change enqueues;
- operator/userlands.py and operator/templates.py: the two reconciles (read, decide, write);
- operator/apply.py: the writes of every reconcile (children, owner conflicts, the storage
  finalizer, NetworkPolicies, status and its Events);
- operator/rules/reconcile.py: the contract every reconcile keeps (its Result, its per-object Memory);
- operator/rules/status.py, status_events.py, operator/rules/assignment/events.py, wake.py, sleep.py,
builders.py: the
  pure decisions;
- operator/loop.py: the workers, the queue and the resync, shared by every reconciler;
- operator/assignments.py: the Assignment reconcile (hand out, collect, return feedback, through
  worker Pods and the assignment store), beside the two others;
- operator/course_requests.py: an admin's new course from the LMS linking page (with LTI only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from userland.operator.apply import Applier
from userland.operator.assignments import AssignmentReconciler
from userland.operator.capacity import Capacity
from userland.operator.course_requests import CourseRequestReconciler
from userland.operator.events import EventRecorder
from userland.operator.indexes import Caches, Key
from userland.operator.loop import Loop, Reconciler
from userland.operator.metrics import AssignmentCollector, LectureCollector, OperatorMetrics, StateCollector
from userland.operator.rules.assignment.census import AssignmentCensus
from userland.operator.rules.census import Census
from userland.operator.rules.route_conflicts import RouteConflicts
from userland.operator.rules.status import DEFAULT_START_TIMEOUT
from userland.operator.templates import DryRuns, TemplateReconciler
from userland.operator.userlands import UserlandReconciler
from userland.operator.workqueue import WorkQueue
from userland.platform.clients.exposition import PlatformCollector
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.store_client import StoreClient
from userland.platform.model.routes import platform_host_of
from userland.platform.model.settings import Settings


def utc_now() -> datetime:
    return datetime.now(UTC)


class Controller:
    def __init__(
        self,
        client: KubeClient,
        settings: Settings,
        *,
        workers: int = 16,
        metrics: OperatorMetrics | None = None,
        resync_seconds: float = 600.0,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
        clock: Callable[[], datetime] = utc_now,
        store: StoreClient | None = None,
        worker_image: str = "",
    ) -> None:
        """`start_timeout`: seconds a Pod may take to become ready before its environment is
        said to have failed (`StartTimeout`); `clock`: the time decisions are made at (tests
        move it instead of waiting)."""
        self.client = client
        self.settings = settings
        self.metrics = metrics or OperatorMetrics()
        self.queue: WorkQueue[Key] = WorkQueue()
        # Colliding routes, decided as the gateway decides (platform/model/routes.py).
        self.route_conflicts = RouteConflicts(platform_host_of(settings.public_url))
        self.caches = Caches(client, settings.namespaces, self.queue, self.route_conflicts)
        self.informers = list(self.caches.all)
        self.events = EventRecorder(client, busy=lambda: self.queue.depth > 0)
        self.applier = Applier(client, self.caches, self.events, settings)
        dry_runs = DryRuns(client, self.caches, self.queue)
        self.userland_reconciler = UserlandReconciler(
            self.caches, self.applier, dry_runs, settings, clock=clock, start_timeout=start_timeout,
            metrics=self.metrics)
        # Environments by course, Template and phase, kept level with the Userland watch.
        self.census = Census()
        self.caches.userlands.add_handler(self.census.observe)
        lifecycle, line = self.userland_reconciler.lifecycle, self.userland_reconciler.wake_rate
        self.metrics.registry.register(StateCollector(
            self.metrics, phases=lambda: list(self.census.phases.items()), pairs=self.census.pairs,
            failing=lambda: list(self.census.failing.items()), longest_waits=lifecycle.longest_waits,
            line=line.keys))
        self.metrics.registry.register(PlatformCollector(
            kube=lambda: (client,), informers=lambda: self.informers, labels={"component": "operator"}))
        self.capacity = Capacity(client, self.caches, settings)
        self.template_reconciler = TemplateReconciler(self.caches, self.applier, dry_runs, clock,
                                                      capacity=self.capacity)
        lectures = self.template_reconciler.lectures
        self.metrics.registry.register(LectureCollector(self.metrics, lambda: list(lectures.items())))
        # The store: given (tests), or the one the settings name when the operator has its secret.
        self.store = store or (StoreClient(settings.store_url, settings.store_secret, "operator")
                               if settings.store_secret else None)
        self._owns_store = store is None and self.store is not None
        self.worker_image = worker_image or settings.worker_image or "userland:local"
        # Assignments by course and phase, students by state, copies missing (the same way).
        self.assignment_census = AssignmentCensus()
        self.caches.assignments.add_handler(self.assignment_census.observe)
        self.metrics.registry.register(AssignmentCollector(self.metrics, self.assignment_census))
        self.assignment_reconciler = AssignmentReconciler(
            client, self.caches, self.applier, self.events, settings, self.metrics, store=self.store,
            clock=clock, worker_image=lambda: self.worker_image)
        reconcilers: list[Reconciler] = [self.template_reconciler, self.userland_reconciler,
                                         self.assignment_reconciler]
        # Admins' new courses from the LMS linking page (operator/course_requests.py): with LTI only.
        # The web UI's ServiceAccount is in the platform's own namespace (the gateway's).
        self.course_requests = (CourseRequestReconciler(
            client, self.applier, self.queue, settings.lti_namespace, settings.public_url,
            settings.gateway_namespace or settings.lti_namespace) if settings.lti_namespace else None)
        if self.course_requests is not None:
            reconcilers.append(self.course_requests)
            self.informers.append(self.course_requests.requests)
        self.loop = Loop(reconcilers, queue=self.queue, metrics=self.metrics, workers=workers,
                         resync_seconds=resync_seconds)

    async def close(self) -> None:
        if self._owns_store and self.store is not None:
            await self.store.close()

    # ----- running -----

    async def run_informers(self) -> None:
        await asyncio.gather(*(informer.run() for informer in self.informers))

    async def wait_synced(self) -> None:
        await asyncio.gather(*(informer.wait_synced() for informer in self.informers))

    def enqueue_all(self, *, low: bool = False) -> None:
        self.loop.enqueue_all(low=low)

    async def lead(self) -> None:
        """Reconcile until cancelled (run while holding the lease)."""
        await self.wait_synced()
        await self.loop.run()

    # ----- health -----

    def health(self) -> tuple[bool, str]:
        failing = [i.resource.plural for i in self.informers if not i.healthy]
        if failing:
            return False, "watches failing: " + ", ".join(failing)
        synced = all(i.synced for i in self.informers)
        return True, "ok" if synced else "ok (caches still syncing)"

    def cache_sizes(self) -> dict[str, int]:
        return {i.resource.kind: len(i.store) for i in self.informers}
