"""Reconciling a Userland: read it and what it depends on from the caches, decide what should be
(pure: operator/rules/wake.py, operator/rules/builders.py, operator/rules/status.py,
operator/rules/status_events.py), write the difference (operator/apply.py), and say when to look again (its
`Result`).

What stops an environment before anything is written is a `Problem`: another Userland already
gives this student this Template (`Duplicate`, the older one wins), the Template is missing
(`Pending`), cannot be read, or its podSpec was refused by the API server. Then nothing is
applied and the status says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from userland.operator.apply import Applier, Tell
from userland.operator.indexes import USERLAND, Caches
from userland.operator.lifecycle import Lifecycle
from userland.operator.metrics import OperatorMetrics
from userland.operator.rules import sleep, wake
from userland.operator.rules.capacity.images import hold_rollout
from userland.operator.rules.progress import newest_pod, pod_progress
from userland.operator.rules.reconcile import DONE, Memory, Result
from userland.operator.rules.status import (
    Problem,
    display_name,
    invalid_userland_status,
    start_deadline,
    userland_status,
)
from userland.operator.rules.status_events import EventNote, invalid_userland_events, userland_events
from userland.operator.rules.wake import WakeDecision
from userland.operator.rules.wake_rate import WakeRate
from userland.operator.templates import DryRuns
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import JSON, USERLANDS
from userland.platform.clients.logs import ObjectLogger
from userland.platform.model import naming
from userland.platform.model.models import InvalidSpec, Template, Userland
from userland.platform.model.objects import meta, rfc3339
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.operator")


@dataclass(frozen=True)
class KeptPodSpec:
    held: bool
    recheck_at: datetime | None = None
    pod_spec: JSON | None = None


@dataclass(slots=True)
class UserlandMemory:
    """`woken_at`: when its turn in the wake line came (it was scaled up from sleep): it gets a
    whole idleTimeout from then. Kept only for the environments woken (of thousands, few). Not
    in its status: a new leader counts from the student's visit (the gateway's stamp) instead,
    which is earlier by the wait in the line."""

    woken_at: datetime | None = None


class UserlandReconciler:
    kind = USERLAND

    def __init__(self, caches: Caches, applier: Applier, dry_runs: DryRuns, settings: Settings, *,
                 clock: Callable[[], datetime], start_timeout: float | None,
                 metrics: OperatorMetrics) -> None:
        self.caches = caches
        self.applier = applier
        self.dry_runs = dry_runs
        self.settings = settings
        self.clock = clock
        self.start_timeout = start_timeout
        self.metrics = metrics
        self.wake_rate = WakeRate(settings.wake_rate, settings.wake_burst, on_turn=self._turn_came)
        # Waits, sleeps, wakes and failures, measured as they are decided (/metrics).
        self.lifecycle = Lifecycle(metrics, clock)
        self.memory: Memory[UserlandMemory] = Memory(lambda obj: UserlandMemory())

    @property
    def primary(self) -> Informer:
        return self.caches.userlands

    async def reconcile(self, namespace: str, name: str) -> Result:
        obj = self.caches.userlands.get(namespace, name)
        if obj is None:
            self.wake_rate.done((namespace, name))  # never leave a gone one in the line to wake
            self.lifecycle.forget((namespace, name))
            return DONE  # deleted: the garbage collector removes the children
        logger = ObjectLogger(log, namespace, name)
        try:
            userland = Userland.from_object(obj)
        except InvalidSpec as err:
            await self._write(obj, invalid_userland_status(obj, str(err), now=rfc3339(self.clock())),
                              invalid_userland_events,
                              template=str((obj.get("spec") or {}).get("template") or ""))
            return DONE
        if userland.deleting:
            self.wake_rate.done((namespace, name))
            await self.applier.finalize(obj, userland, logger)
            return DONE
        now = self.clock()
        template, problem = self._template(userland)
        decision: WakeDecision | None = None
        if problem is not None or template is None:
            self.wake_rate.done((namespace, name))
        else:
            decision = self._wake(obj, userland, template, now)
            obj = await self.applier.ensure_finalizer(obj, userland, template)
            asleep = decision.verdict.asleep or decision.waking
            hold = self._hold(userland, template, now)
            if hold.held and hold.recheck_at is not None:
                decision = replace(decision, look_again_at=min(
                    [m for m in (decision.look_again_at, hold.recheck_at) if m is not None]))
            problem = await self.applier.children(userland, template, logger, asleep=asleep,
                                                  keep_pod_spec=hold.pod_spec)
            if problem is None:
                # Its environment runs, but the gateway does not route its Template: say so.
                problem = self.caches.route_conflicts.userland_problem(
                    namespace, template.name, display_name(template, template.name))
        return await self._report(obj, userland, template, problem, decision, now)

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

    def _wake(self, obj: JSON, userland: Userland, template: Template, now: datetime) -> WakeDecision:
        """The sleep verdict through the wake line (operator/rules/wake.py); remembers a wake."""
        key = (userland.ref.namespace, userland.name)
        remembered = self.memory.find(obj)
        verdict = sleep.verdict(userland, template, now, woke=remembered.woken_at if remembered else None)
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
            self.memory.of(obj).woken_at = now
        return decision

    def _hold(self, userland: Userland, template: Template, now: datetime) -> KeptPodSpec:
        """Whether its Deployment keeps the Pod spec it runs, because its Template's new images
        are not on the nodes yet (operator/rules/capacity/images.py)."""
        limit = self.settings.image_pull_wait_seconds
        deployment = self.caches.deployments.get(
            userland.ref.namespace, naming.deployment_name(userland.spec.template, userland.spec.user))
        if limit == 0 or deployment is None:
            return KeptPodSpec(False)
        template_obj = self.caches.templates.get(userland.ref.namespace, template.name) or {}
        hold = hold_rollout(deployment, template, template_obj.get("status") or {}, now=now, limit=limit)
        if not hold.held:
            return KeptPodSpec(False)
        pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec")
        return KeptPodSpec(True, hold.recheck_at, pod_spec if isinstance(pod_spec, dict) else None)

    # ----- write -----

    async def _report(self, obj: JSON, userland: Userland, template: Template | None, problem: Problem | None,
                      decision: WakeDecision | None, now: datetime) -> Result:
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
        app = display_name(template, spec.template)

        def tell(old: JSON, new: JSON) -> list[EventNote]:
            # The Waking Event names what woke it (a visit, a staff member's Start, ...), never the
            # operator's own turn in the wake line (`woken_at`): that is what the verdict says when
            # the pass that woke it failed after the wake and the next one tells it.
            cause = sleep.verdict(userland, template, now) if template is not None else verdict
            return userland_events(old, new, app=app, verdict=cause if verdict is not None else None)
        await self._write(obj, status, tell, template=spec.template, created=userland.created,
                          decision=decision, now=now)
        return Result.again_at(min(moments) if moments else None, now)

    async def _write(self, obj: JSON, status: JSON, events: Tell, *, template: str,
                     created: datetime | None = None, decision: WakeDecision | None = None,
                     now: datetime | None = None) -> None:
        old = obj.get("status") or {}
        await self.applier.status(USERLANDS, self.caches.userlands, obj, status, tell=events)
        # After the write: a failed one is retried, and must not be counted twice.
        key = (str(meta(obj).get("namespace") or ""), str(meta(obj).get("name") or ""))
        self.lifecycle.seen(key, template, old, status, created=created, decision=decision,
                            now=now or self.clock())

    def _turn_came(self, key: object, waited: float) -> None:
        """The wake line let `key` (namespace, name) through after `waited` seconds."""
        course = key[0] if isinstance(key, tuple) else ""
        self.metrics.line_seconds.labels(str(course)).observe(waited)
