"""Reconciling a Userland: read it and what it depends on from the caches, decide what should be
(pure: operator/wake.py, operator/builders.py, operator/status.py, operator/status_events.py),
write the difference (operator/apply.py), and say when to look again.

What stops an environment before anything is written is a `Problem`: another Userland already
gives this student this Template (`Duplicate`, the older one wins), the Template is missing
(`Pending`), cannot be read, or its podSpec was refused by the API server. Then nothing is
applied and the status says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from userland.operator import sleep, wake
from userland.operator.apply import Applier
from userland.operator.events import EventRecorder
from userland.operator.indexes import USERLAND, Caches, Key
from userland.operator.lifecycle import Lifecycle
from userland.operator.metrics import OperatorMetrics
from userland.operator.progress import newest_pod, pod_progress
from userland.operator.status import (
    Problem,
    display_name,
    invalid_userland_status,
    start_deadline,
    status_changed,
    userland_status,
)
from userland.operator.status_events import EventNote, invalid_userland_events, userland_events
from userland.operator.templates import DryRuns
from userland.operator.wake import WakeDecision
from userland.operator.wake_rate import WakeRate
from userland.operator.workqueue import WorkQueue
from userland.platform import naming
from userland.platform.informer import Informer
from userland.platform.kube import JSON, USERLANDS
from userland.platform.logs import ObjectLogger
from userland.platform.models import InvalidSpec, Template, Userland
from userland.platform.objects import meta, rfc3339
from userland.platform.settings import Settings

log = logging.getLogger("userland.operator")


class UserlandReconciler:
    kind = USERLAND

    def __init__(self, caches: Caches, applier: Applier, events: EventRecorder, dry_runs: DryRuns,
                 queue: WorkQueue[Key], settings: Settings, *, clock: Callable[[], datetime],
                 start_timeout: float | None, metrics: OperatorMetrics) -> None:
        self.caches = caches
        self.applier = applier
        self.events = events
        self.dry_runs = dry_runs
        self.queue = queue
        self.settings = settings
        self.clock = clock
        self.start_timeout = start_timeout
        self.metrics = metrics
        self.wake_rate = WakeRate(settings.wake_rate, settings.wake_burst, on_turn=self._turn_came)
        # Waits, sleeps, wakes and failures, measured as they are decided (/metrics).
        self.lifecycle = Lifecycle(metrics, clock)
        # When each environment was last scaled up from sleep (its turn in the wake line came).
        self.woken_at: dict[tuple[str, str], datetime] = {}

    @property
    def primary(self) -> Informer:
        return self.caches.userlands

    async def reconcile(self, namespace: str, name: str) -> None:
        obj = self.caches.userlands.get(namespace, name)
        if obj is None:
            self.wake_rate.done((namespace, name))  # never leave a gone one in the line to wake
            self.lifecycle.forget((namespace, name))
            return  # deleted: the garbage collector removes the children
        logger = ObjectLogger(log, namespace, name)
        try:
            userland = Userland.from_object(obj)
        except InvalidSpec as err:
            await self._write(obj, invalid_userland_status(obj, str(err), now=rfc3339(self.clock())),
                              invalid_userland_events,
                              template=str((obj.get("spec") or {}).get("template") or ""))
            return
        if userland.deleting:
            self.wake_rate.done((namespace, name))
            await self.applier.finalize(obj, userland, logger)
            return
        now = self.clock()
        template, problem = self._template(userland)
        decision: WakeDecision | None = None
        if problem is not None or template is None:
            self.wake_rate.done((namespace, name))
        else:
            decision = self._wake(userland, template, now)
            obj = await self.applier.ensure_finalizer(obj, userland, template)
            asleep = decision.verdict.asleep or decision.waking
            problem = await self.applier.children(userland, template, logger, asleep=asleep)
            if problem is None:
                # Its environment runs, but the gateway does not route its Template: say so.
                problem = self.caches.route_conflicts.userland_problem(
                    namespace, template.name, display_name(template, template.name))
        await self._report(obj, userland, template, problem, decision, now)

    # ----- read -----

    def _template(self, userland: Userland) -> tuple[Template | None, Problem | None]:
        """Its Template, or what stops it from being made at all."""
        ns, spec = userland.ref.namespace, userland.spec
        duplicate = self._duplicate(userland)
        if duplicate is not None:
            return None, duplicate
        template_obj = self.caches.templates.get(ns, spec.template)
        if template_obj is None:
            return None, Problem("TemplateNotFound", f"Template {spec.template!r} not found in namespace "
                                                     f"{ns!r}; it will start when the Template is created",
                                 phase="Pending")
        try:
            template = Template.from_object(template_obj)
        except InvalidSpec as err:
            return None, Problem("InvalidTemplate", f"Template {spec.template!r}: {err}")
        return template, self.dry_runs.known(template)

    def _duplicate(self, userland: Userland) -> Problem | None:
        ns, spec = userland.ref.namespace, userland.spec
        created = meta(self.caches.userlands.get(ns, userland.name)).get("creationTimestamp", "")
        mine = (created, userland.name)
        for other in self.caches.userlands_of_pair(ns, spec.template, spec.user):
            theirs = (meta(other).get("creationTimestamp", ""), meta(other).get("name", ""))
            if theirs[1] != userland.name and theirs < mine:
                return Problem("Duplicate", f"Userland {theirs[1]!r} already gives {spec.user!r} the "
                                            f"Template {spec.template!r} in this namespace; "
                                            "delete one of them")
        return None

    # ----- decide -----

    def _wake(self, userland: Userland, template: Template, now: datetime) -> WakeDecision:
        """The sleep verdict through the wake line (operator/wake.py); remembers a wake and
        schedules the next look."""
        key = (userland.ref.namespace, userland.name)
        verdict = sleep.verdict(userland, template, now, woke=self.woken_at.get(key))
        deployment = self.caches.deployments.get(
            userland.ref.namespace, naming.deployment_name(userland.spec.template, userland.spec.user))
        scaled_down = deployment is not None and (deployment.get("spec") or {}).get("replicas") == 0
        in_line = self.wake_rate.is_waiting(key)
        wants = wake.wants_turn(userland, verdict, scaled_down=scaled_down, in_line=in_line)
        decision = wake.decide(userland, template, verdict, now=now,
                               turn_in=self.wake_rate.wait(key) if wants else None)
        if not decision.in_line:
            self.wake_rate.done(key)
        if decision.woke:
            self.woken_at[key] = now
            if len(self.woken_at) > 4 * max(1, self.caches.known_userlands()):  # forget the removed ones
                self.woken_at = {k: v for k, v in self.woken_at.items() if k in self.caches.userlands.store}
        return decision

    # ----- write -----

    async def _report(self, obj: JSON, userland: Userland, template: Template | None, problem: Problem | None,
                      decision: WakeDecision | None, now: datetime) -> None:
        ns, spec = userland.ref.namespace, userland.spec
        deployment = self.caches.deployments.get(ns, naming.deployment_name(spec.template, spec.user))
        pod = newest_pod(self.caches.pods_of_pair(ns, spec.template, spec.user))
        verdict = decision.verdict if decision is not None else None
        status = userland_status(
            userland, template, deployment, problem, public_url=self.settings.public_url, now=rfc3339(now),
            sleep=verdict, waking=decision is not None and decision.waking, progress=pod_progress(pod),
            pod=pod, start_timeout=self.start_timeout)
        look_again = [decision.look_again_at] if decision is not None else []
        if status["phase"] == "Starting" and (late := start_deadline(pod, self.start_timeout)) is not None:
            look_again.append(late + wake.RECHECK_MARGIN)  # to say StartTimeout in time
        moments = [m for m in look_again if m is not None]
        if moments:
            delay = (min(moments) - now) / timedelta(seconds=1)
            self.queue.add_after((USERLAND, ns, userland.name), max(delay, 0.0))
        app = display_name(template, spec.template)
        await self._write(obj, status, lambda old, new: userland_events(old, new, app=app, verdict=verdict),
                          template=spec.template, created=userland.created, decision=decision, now=now)

    async def _write(self, obj: JSON, status: JSON, events: Callable[[JSON, JSON], list[EventNote]], *,
                     template: str, created: datetime | None = None, decision: WakeDecision | None = None,
                     now: datetime | None = None) -> None:
        old = obj.get("status") or {}
        changed = status_changed(old, status)
        if changed:
            await self.applier.status(USERLANDS, self.caches.userlands, obj, status)
            for note in events(old, status):
                self.events.record(obj, note.type, note.reason, note.message)
        # After the write: a failed one is retried, and must not be counted twice.
        key = (str(meta(obj).get("namespace") or ""), str(meta(obj).get("name") or ""))
        self.lifecycle.seen(key, template, old, status, created=created, decision=decision,
                            now=now or self.clock())

    def _turn_came(self, key: object, waited: float) -> None:
        """The wake line let `key` (namespace, name) through after `waited` seconds."""
        course = key[0] if isinstance(key, tuple) else ""
        self.metrics.line_seconds.labels(str(course)).observe(waited)
