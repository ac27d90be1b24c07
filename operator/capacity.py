"""Capacity for a Template (docs/capacity.md): its images pulled ahead on the nodes, room held
before its lectures, and whether its course will be ready for the next one. Called by the
Template's reconcile (operator/templates.py); the decisions are operator/rules/capacity/'s, this
module reads the caches and writes the difference.

- Images: while the Template is in use (it has Userlands), the DaemonSet of its current image set
  exists and every other puller of it is deleted; with none in use, none exists. Under `make run`
  (`USERLAND_NODES=local`) nothing is pulled, and the status says the images are local.
- Room: while the hold window before a lecture is open, the placeholder Deployment holds one
  Pod's room for each environment that has none; outside it, the Deployment is deleted.
"""

from __future__ import annotations

import logging
from datetime import datetime

from userland.operator.indexes import BY_CAPACITY, BY_TEMPLATE, Caches
from userland.operator.rules import builders
from userland.operator.rules.capacity import images as image_rules
from userland.operator.rules.capacity import room as room_rules
from userland.operator.rules.capacity.images import ImageProgress
from userland.operator.rules.capacity.readiness import Readiness, Room, readiness
from userland.operator.rules.capacity.room import Environment, Window
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    DAEMONSETS,
    DEPLOYMENTS,
    JSON,
    AlreadyExists,
    Conflict,
    KubeClient,
    NotFound,
    Resource,
)
from userland.platform.clients.logs import ObjectLogger
from userland.platform.model import naming
from userland.platform.model.models import Template
from userland.platform.model.objects import annotations_of, meta
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.operator")


def replica_failure(deployment: JSON | None) -> str:
    """Why a Deployment's Pods cannot be made (a missing PriorityClass, a quota): its message."""
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return str(cond.get("message") or cond.get("reason") or "")[:300]
    return ""


class Capacity:
    def __init__(self, client: KubeClient, caches: Caches, settings: Settings) -> None:
        self.client = client
        self.caches = caches
        self.settings = settings

    @property
    def local(self) -> bool:
        return self.settings.nodes == "local"

    def environments(self, namespace: str, template: str) -> list[Environment]:
        """The Template's expected environments: its Userlands that are not suspended."""
        found = []
        for obj in self.caches.userlands.by_index(BY_TEMPLATE, (namespace, template)):
            if (obj.get("spec") or {}).get("suspended") is True:
                continue
            found.append(room_rules.environment_of(obj.get("status") or {}))
        return found

    async def images(self, template: Template, in_use: bool, now: datetime) -> ImageProgress:
        ns, logger = template.ref.namespace, ObjectLogger(log, template.ref.namespace, template.name)
        count = len(image_rules.image_set(template))
        if self.local:
            return image_rules.prepull_progress(None, count, local=True)
        desired = image_rules.desired_prepull(template, self.settings) if in_use else None
        keep = desired["metadata"]["name"] if desired is not None else None
        for other in self.caches.daemonsets.by_index(BY_CAPACITY, (ns, template.name)):
            name = str(meta(other).get("name") or "")
            if name != keep and self._ours(other, template):
                await self._delete(DAEMONSETS, ns, name, logger, "an image set the Template no longer has")
        if desired is None:
            # True (nothing is missing), but not "Pulled": nothing was, and no event says it was.
            return ImageProgress("NotInUse", "no environment uses this Template: nothing to pull yet")
        actual = await self._apply(DAEMONSETS, self.caches.daemonsets, desired, logger, template)
        progress = image_rules.prepull_progress(actual, count)
        template_obj = self.caches.templates.get(ns, template.name) or {}
        return image_rules.past_the_wait(progress, template_obj.get("status") or {}, now=now,
                                         limit=self.settings.image_pull_wait_seconds)

    async def room(self, template: Template, environments: list[Environment], window: Window,
                   now: datetime) -> Room:
        ns, logger = template.ref.namespace, ObjectLogger(log, template.ref.namespace, template.name)
        name = naming.placeholders_name(template.name)
        requests = room_rules.pod_requests(template.spec.pod_spec)
        wanted = room_rules.placeholders_wanted(environments, window, requests)
        actual = self.caches.deployments.get(ns, name)
        if wanted == 0:
            if actual is not None and self._ours(actual, template):
                await self._delete(DEPLOYMENTS, ns, name, logger, "no room to hold now")
        else:
            desired = room_rules.desired_placeholders(template, self.settings, wanted)
            actual = await self._apply(DEPLOYMENTS, self.caches.deployments, desired, logger, template)
        if self.local:
            return Room(False, note="no room to hold ahead")
        if self.settings.hold_room_seconds == 0:
            return Room(False, note="no room held ahead (turned off by your admin)")
        if not requests:
            return Room(False, note="no room held ahead (these environments reserve no CPU or memory)")
        if not window.holding:
            return Room(False, opens=window.opens)
        available = int(((actual or {}).get("status") or {}).get("availableReplicas") or 0) if wanted else 0
        problem = replica_failure(actual) if wanted else ""
        if problem:
            # The course's line tells teachers to ask their admin; this is what the admin reads
            # (as does the Deployment's own ReplicaFailure condition).
            logger.warning("placeholders for %d environments cannot be made: %s", wanted, problem)
        return Room(True, placeholders=min(available, wanted), problem=problem)

    def lecture(self, template: Template, environments: list[Environment], images: ImageProgress,
                room: Room, window: Window, now: datetime) -> Readiness | None:
        schedule = template.spec.schedule
        if schedule is None:
            return None
        return readiness(environments, images, room, window, time_zone=schedule.time_zone, now=now)

    def window(self, template: Template, now: datetime) -> Window:
        hold = 0 if self.local else self.settings.hold_room_seconds
        return room_rules.hold_window(template.spec.schedule, now, hold)

    # ----- writes -----

    @staticmethod
    def _ours(actual: JSON, template: Template) -> bool:
        owners = meta(actual).get("ownerReferences") or []
        return any(o.get("kind") == "Template" and o.get("uid") == template.ref.uid for o in owners)

    async def _apply(self, resource: Resource, informer: Informer, desired: JSON, logger: ObjectLogger,
                     template: Template) -> JSON:
        """Create or repair `desired`; an object of that name that is not the Template's is left
        alone (and returned as it is)."""
        ns, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        actual = informer.get(ns, name)
        if actual is None:
            try:
                created = await self.client.create(resource, ns, desired)
                informer.put(created)
                logger.info("created %s %s", resource.kind, name)
                return created
            except AlreadyExists:
                actual = await self.client.get(resource, ns, name)
        if not self._ours(actual, template):
            logger.warning("%s %s is not this Template's: left alone", resource.kind, name)
            return actual
        want = desired["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]
        have = annotations_of(actual).get(naming.ANNOTATION_SPEC_HASH)
        if have == want and builders.contains(actual, desired):
            return actual
        body = {**desired, "metadata": {**desired["metadata"],
                                        "resourceVersion": meta(actual).get("resourceVersion")}}
        try:
            updated = await self.client.replace(resource, ns, name, body)
        except Conflict:
            actual = await self.client.get(resource, ns, name)
            body["metadata"]["resourceVersion"] = meta(actual).get("resourceVersion")
            updated = await self.client.replace(resource, ns, name, body)
        informer.put(updated)
        logger.info("updated %s %s", resource.kind, name)
        return updated

    async def _delete(self, resource: Resource, ns: str, name: str, logger: ObjectLogger, why: str) -> None:
        try:
            await self.client.delete(resource, ns, name, propagation="Background")
        except NotFound:
            return
        logger.info("deleted %s %s: %s", resource.kind, name, why)
