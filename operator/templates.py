"""Reconciling a Template: is it valid, does the API server accept what it makes, does its route
collide, how many Userlands use it (its status), and its NetworkPolicy.

The API server's own verdict on a Template's podSpec is asked once per (uid, generation) with a
dry-run create of a Deployment made from it (`DryRuns`); the Userlands read it from there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from userland.operator.apply import Applier
from userland.operator.capacity import Capacity
from userland.operator.indexes import TEMPLATE, USERLAND, Caches, Key
from userland.operator.rules import builders
from userland.operator.rules.capacity import images as image_rules
from userland.operator.rules.capacity.images import ImageProgress
from userland.operator.rules.capacity.readiness import Readiness
from userland.operator.rules.reconcile import DONE, Memory, ObjectMemory, Result
from userland.operator.rules.refusals import podspec_refusal
from userland.operator.rules.status import Problem, template_status
from userland.operator.rules.status_events import template_events
from userland.operator.workqueue import WorkQueue
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    DEPLOYMENTS,
    JSON,
    TEMPLATES,
    AlreadyExists,
    Invalid,
    KubeClient,
    PermanentError,
    TemporaryError,
)
from userland.platform.model.models import InvalidSpec, Template, Userland
from userland.platform.model.objects import rfc3339

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

    def __init__(self, caches: Caches, applier: Applier, dry_runs: DryRuns,
                 clock: Callable[[], datetime], capacity: Capacity | None = None) -> None:
        self.caches = caches
        self.applier = applier
        self.dry_runs = dry_runs
        self.clock = clock
        self.capacity = capacity
        # It remembers nothing of a Template between passes (DryRuns keeps the API server's
        # verdicts by uid and generation, which a new leader asks again).
        self.memory: Memory[ObjectMemory] = Memory(lambda obj: ObjectMemory())
        # Each scheduled Template's readiness for its next lecture, for /metrics (the leader's).
        self.lectures: dict[tuple[str, str], Readiness] = {}

    @property
    def primary(self) -> Informer:
        return self.caches.templates

    async def reconcile(self, namespace: str, name: str) -> Result:
        obj = self.caches.templates.get(namespace, name)
        if obj is None:
            self.lectures.pop((namespace, name), None)
            return DONE
        # Decide (asking the API server's verdict once per generation) ...
        problem: Problem | None
        images: ImageProgress | None = None
        lecture: Readiness | None = None
        again = DONE
        count = len(self.caches.userlands_of_template(namespace, name))
        try:
            template = Template.from_object(obj)
        except InvalidSpec as err:
            problem = Problem("InvalidSpec", str(err))
        else:
            problem = await self.dry_runs.verdict(template)
            policy = builders.desired_network_policy(template, self.applier.settings)
            await self.applier.network_policy(policy)
            if problem is None:
                problem = self.caches.route_conflicts.template_problem(namespace, name)
            if problem is None and self.capacity is not None:
                images, lecture, again = await self._capacity(template, count > 0)
        if lecture is None:
            self.lectures.pop((namespace, name), None)
        else:
            self.lectures[(namespace, name)] = lecture
        status = template_status(obj, count, problem, now=rfc3339(self.clock()), images=images,
                                 lecture=lecture)
        # ... and write what changed, telling it.
        written = await self.applier.status(TEMPLATES, self.caches.templates, obj, status,
                                            tell=template_events)
        before = _condition_status(obj.get("status") or {}, "ImagesPulled")
        if before != _condition_status(status, "ImagesPulled"):
            # Environments that keep their image until the new one is pulled may roll now (after
            # the write: they read the condition from the cache).
            for userland in self.caches.userlands_of_template(namespace, name):
                self.queue_userland(namespace, userland)
        return written.sooner(again)

    def queue_userland(self, namespace: str, name: str) -> None:
        self.dry_runs.queue.add((USERLAND, namespace, name))

    async def _capacity(self, template: Template,
                        in_use: bool) -> tuple[ImageProgress, Readiness | None, Result]:
        """Images pulled ahead, room held, readiness for the next lecture (operator/capacity.py)."""
        assert self.capacity is not None
        now = self.clock()
        images = await self.capacity.images(template, in_use, now)
        # Only a scheduled Template holds room or has a lecture to be ready for.
        environments = ([] if template.spec.schedule is None
                        else self.capacity.environments(template.ref.namespace, template.name))
        window = self.capacity.window(template, now)
        room = await self.capacity.room(template, environments, window, now)
        lecture = self.capacity.lecture(template, environments, images, room, window, now)
        template_obj = self.caches.templates.get(template.ref.namespace, template.name) or {}
        limit = self.applier.settings.image_pull_wait_seconds
        ends = image_rules.pull_wait_ends(template_obj.get("status") or {}, limit)
        again = Result.again_at(window.recheck_at(now), now)
        if ends is not None and ends > now:
            again = again.sooner(Result.again_at(ends + timedelta(seconds=1), now))
        return images, lecture, again


def _condition_status(status: JSON, kind: str) -> str | None:
    return next((str(c.get("status")) for c in status.get("conditions") or [] if c.get("type") == kind), None)
