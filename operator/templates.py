"""Reconciling a Template: is it valid, does the API server accept what it makes, does its route
collide, how many Userlands use it (its status), and its NetworkPolicy.

The API server's own verdict on a Template's podSpec is asked once per (uid, generation) with a
dry-run create of a Deployment made from it (`DryRuns`); the Userlands read it from there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from userland.operator import builders
from userland.operator.apply import Applier
from userland.operator.events import EventRecorder
from userland.operator.indexes import TEMPLATE, USERLAND, Caches, Key
from userland.operator.refusals import podspec_refusal
from userland.operator.status import Problem, status_changed, template_status
from userland.operator.status_events import template_events
from userland.operator.workqueue import WorkQueue
from userland.platform.informer import Informer
from userland.platform.kube import (
    DEPLOYMENTS,
    TEMPLATES,
    AlreadyExists,
    Invalid,
    KubeClient,
    PermanentError,
    TemporaryError,
)
from userland.platform.models import InvalidSpec, Template, Userland
from userland.platform.objects import rfc3339

log = logging.getLogger(__name__)
MAX_VERDICTS = 10_000


class DryRuns:
    """The API server's verdict on each Template's podSpec: None when it is accepted."""

    def __init__(self, client: KubeClient, caches: Caches, queue: WorkQueue[Key]) -> None:
        self.client = client
        self.caches = caches
        self.queue = queue
        self._verdicts: dict[tuple[str, int], Problem | None] = {}

    def known(self, template: Template) -> Problem | None:
        """The verdict if one was had (None: accepted, or not asked yet)."""
        return self._verdicts.get((template.ref.uid, template.ref.generation))

    async def verdict(self, template: Template) -> Problem | None:
        key = (template.ref.uid, template.ref.generation)
        if key in self._verdicts:
            return self._verdicts[key]
        probe = Userland.from_object({
            "metadata": {"name": f"{template.name}-dry-run", "namespace": template.ref.namespace,
                         "uid": "00000000-0000-0000-0000-000000000000"},
            "spec": {"user": "dry-run", "template": template.name},
        })
        verdict: Problem | None = None
        try:
            await self.client.create(DEPLOYMENTS, template.ref.namespace,
                                     builders.desired_deployment(probe, template), dry_run=True)
        except Invalid as err:
            verdict = Problem("InvalidPodSpec", podspec_refusal(
                err.message, template.spec.pod_spec, field=err.field, value=err.value))
        except AlreadyExists:
            verdict = None  # a Deployment of that name exists; the spec itself was not refused
        except PermanentError as err:
            log.warning("template dry run failed", extra={"error": str(err)})
            return None
        except TemporaryError:
            return None  # unknown yet; the Userlands' own writes will tell
        if len(self._verdicts) > MAX_VERDICTS:
            self._verdicts.clear()
        self._verdicts[key] = verdict
        if verdict is not None:
            # Userlands that tried before the verdict may not know: tell them.
            for name in self.caches.userlands_of_template(template.ref.namespace, template.name):
                self.queue.add((USERLAND, template.ref.namespace, name))
        return verdict


class TemplateReconciler:
    kind = TEMPLATE

    def __init__(self, caches: Caches, applier: Applier, events: EventRecorder, dry_runs: DryRuns,
                 clock: Callable[[], datetime]) -> None:
        self.caches = caches
        self.applier = applier
        self.events = events
        self.dry_runs = dry_runs
        self.clock = clock

    @property
    def primary(self) -> Informer:
        return self.caches.templates

    async def reconcile(self, namespace: str, name: str) -> None:
        obj = self.caches.templates.get(namespace, name)
        if obj is None:
            return
        # Decide (asking the API server's verdict once per generation) ...
        problem: Problem | None
        try:
            template = Template.from_object(obj)
        except InvalidSpec as err:
            problem = Problem("InvalidSpec", str(err))
        else:
            problem = await self.dry_runs.verdict(template)
            await self.applier.network_policy(template)
            if problem is None:
                problem = self.caches.route_conflicts.template_problem(namespace, name)
        count = len(self.caches.userlands_of_template(namespace, name))
        status = template_status(obj, count, problem, now=rfc3339(self.clock()))
        # ... and write what changed, telling it.
        old = obj.get("status") or {}
        if not status_changed(old, status):
            return
        await self.applier.status(TEMPLATES, self.caches.templates, obj, status)
        for note in template_events(old, status):
            self.events.record(obj, note.type, note.reason, note.message)
