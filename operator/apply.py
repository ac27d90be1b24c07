"""The one writer of every reconciler (Userland, Template, Assignment): a Userland's children
(create what is missing, repair what differs, never take what belongs to someone else), the
finalizer that deletes a student's volume, NetworkPolicies (a Template's, an Assignment's worker
Pods'), and every kind's status, with its Events (`Applier.status`; coalesced where asked).

- A child is created when the cache has none; a 409 means it exists outside our view (someone
  removed our labels): it is read and repaired. A child whose controller owner is another
  object, or whose labels name another student or Template, is a `NameConflict`, never changed.
- "Nothing changed" is the spec hash in `userland.dev/spec-hash` plus the desired fields being
  there (operator/rules/builders.py), so the steady state writes nothing. Deployments are replaced
  whole (a merge patch cannot drop list items), keeping labels and annotations others added;
  a 409 on that replace means our copy was behind: read it once and replace that.
- Why a child changed is said (`change_cause`): the Template changed, a restart was asked, it
  had been changed outside the operator, or only its replicas moved (sleep, wake, suspend,
  resume: no "Updated" Event then, the status' own Event tells that story).
- PersistentVolumeClaims carry no owner (student work outlives the Userland); with the
  Template's `reclaimPolicy: Delete` a finalizer on the Userland deletes the claim.
- A status is written only when it changed; an Assignment's at most once per interval (its
  students' results come in one by one), the others at once.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from userland.operator.events import EventRecorder
from userland.operator.indexes import USERLAND, Caches, controller_owner
from userland.operator.rules import builders
from userland.operator.rules.reconcile import DONE, ObjectMemory, Result
from userland.operator.rules.refusals import podspec_refusal
from userland.operator.rules.status import Problem, status_changed
from userland.operator.rules.status_events import EventNote
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    DEPLOYMENTS,
    JSON,
    NETWORK_POLICIES,
    PVCS,
    SERVICES,
    USERLANDS,
    AlreadyExists,
    Conflict,
    Invalid,
    KubeClient,
    NotFound,
    Resource,
)
from userland.platform.clients.logs import ObjectLogger
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland
from userland.platform.model.objects import annotations_of, labels_of, meta
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.operator")
# The Events a status change tells, from the status before and after.
Tell = Callable[[JSON, JSON], list[EventNote]]

Cause = Literal["created", "template", "restart", "drift", "scale"]
CAUSE_WORDS: dict[Cause, str] = {
    "created": "it did not exist",
    "template": "the Template changed",
    "restart": "a restart was asked",
    "drift": "it had been changed outside the operator",
    "scale": "its number of replicas changed",
}


@dataclass(frozen=True)
class Applied:
    cause: Cause
    kind: str
    name: str
    replicas: int | None = None  # a Deployment's, after the write

    @property
    def detail(self) -> str:
        if self.cause == "created":
            return f"{self.kind} {self.name}"
        return f"{self.kind} {self.name} ({CAUSE_WORDS[self.cause]})"


class NameConflict(Exception):
    """A child's name is taken by an object that belongs to someone else."""


def owner_conflict(actual: JSON, userland: Userland, owned: bool) -> str | None:
    """Why `actual` is not ours to change (None: it is ours, or free to take)."""
    owner = controller_owner(actual)
    kind = actual.get("kind") or "object"
    name = meta(actual).get("name")
    if owned and owner is not None and owner.get("uid") != userland.ref.uid:
        return f"{kind} {name!r} belongs to {owner.get('kind')} {owner.get('name')!r}, not to this Userland"
    found = labels_of(actual)
    spec = userland.spec
    for label, mine in ((naming.LABEL_USER, spec.user), (naming.LABEL_TEMPLATE, spec.template)):
        if found.get(label) not in (None, mine):
            return f"{kind} {name!r} is labelled for {label}={found.get(label)!r}"
    return None


def change_cause(actual: JSON, desired: JSON) -> Cause:
    """Why `actual` must be rewritten into `desired` (which it does not contain yet)."""
    have = annotations_of(actual).get(naming.ANNOTATION_SPEC_HASH)
    if have == desired["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]:
        return "drift"  # we wrote what we want now; someone changed it since
    spec, want = copy.deepcopy(actual.get("spec") or {}), desired.get("spec") or {}
    if "replicas" in want and spec.get("replicas") != want["replicas"]:
        spec["replicas"] = want["replicas"]
        if builders.contains(spec, want):
            return "scale"
    template = want.get("template") if isinstance(want.get("template"), dict) else None
    if template is not None and isinstance(spec.get("template"), dict):
        pod_meta = spec["template"].setdefault("metadata", {})
        pod_meta["annotations"] = (template.get("metadata") or {}).get("annotations")
        if builders.contains(spec, want):
            return "restart"
    return "template"


def merge_patch(desired: JSON) -> JSON:
    desired_meta = desired["metadata"]
    patch: JSON = {
        "metadata": {"labels": desired_meta["labels"], "annotations": desired_meta["annotations"]},
        "spec": desired["spec"],
    }
    if "ownerReferences" in desired_meta:
        patch["metadata"]["ownerReferences"] = desired_meta["ownerReferences"]
    return patch


def replacement(actual: JSON, desired: JSON) -> JSON:
    """A full update that restores what we set and keeps labels/annotations others added."""
    body: JSON = {**desired, "metadata": dict(desired["metadata"])}
    body["metadata"]["labels"] = {**labels_of(actual), **desired["metadata"]["labels"]}
    body["metadata"]["annotations"] = {**annotations_of(actual), **desired["metadata"]["annotations"]}
    body["metadata"]["resourceVersion"] = meta(actual).get("resourceVersion")
    return body


def contains_metadata(actual: JSON, desired: JSON) -> bool:
    return builders.contains(labels_of(actual), desired["metadata"]["labels"])


class Applier:
    """The writes of every reconcile; every object written goes back into its cache at once."""

    def __init__(self, client: KubeClient, caches: Caches, events: EventRecorder, settings: Settings) -> None:
        self.client = client
        self.caches = caches
        self.events = events
        self.settings = settings

    async def children(self, userland: Userland, template: Template, logger: ObjectLogger, *,
                       asleep: bool = False, keep_pod_spec: JSON | None = None) -> Problem | None:
        """Create or repair the Deployment, Service (and PVC); a Problem when one is refused.
        `keep_pod_spec`: the Deployment's Pod spec as it is, kept (a new image is being pulled)."""
        children = builders.desired_children(userland, template, asleep=asleep, keep_pod_spec=keep_pod_spec)
        jobs = [
            self._apply(DEPLOYMENTS, self.caches.deployments, children.deployment, userland, logger),
            self._apply(SERVICES, self.caches.services, children.service, userland, logger),
        ]
        if children.pvc is not None:
            jobs.append(self._apply(PVCS, self.caches.pvcs, children.pvc, userland, logger))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        applied = [r for r in results if isinstance(r, Applied)]
        # One Event per reconcile that changed something, not one per child: Events are
        # writes too, and `kubectl describe` reads better with one line saying it all. A
        # change of replicas alone (sleep, wake, suspend, resume) has the status' own Event.
        created = [a.detail for a in applied if a.cause == "created"]
        updated = [a.detail for a in applied if a.cause not in ("created", "scale")]
        for verb, details in (("Created", created), ("Updated", updated)):
            if details:
                self.events.record(self.userland_object(userland), "Normal", verb,
                                   f"{verb} " + "; ".join(details))
        for result in results:
            if isinstance(result, NameConflict):
                return Problem("NameConflict", str(result))
            if isinstance(result, Invalid):
                return Problem("InvalidPodSpec", podspec_refusal(
                    result.message, template.spec.pod_spec, field=result.field, value=result.value))
            if isinstance(result, BaseException):
                raise result
        return None

    async def _apply(self, resource: Resource, informer: Informer, desired: JSON, userland: Userland,
                     logger: ObjectLogger) -> Applied | None:
        """Create or repair one child; None when it already was as desired."""
        ns, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        actual = informer.get(ns, name)
        if actual is None:
            try:
                informer.put(await self.client.create(resource, ns, desired))
                logger.info("created %s %s", resource.kind, name)
                return Applied("created", resource.kind, name)
            except AlreadyExists:
                # It exists outside our view (someone removed our labels): read it and repair.
                actual = await self.client.get(resource, ns, name)
        actual = actual or {}
        actual.setdefault("kind", resource.kind)
        if (conflict := owner_conflict(actual, userland, owned=resource is not PVCS)) is not None:
            raise NameConflict(conflict)
        want_hash = desired["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]
        have_hash = annotations_of(actual).get(naming.ANNOTATION_SPEC_HASH)
        if resource is PVCS:
            # A claim's spec is mostly immutable: keep it as it is, repair only our metadata.
            if contains_metadata(actual, desired):
                return None
            cause: Cause = "drift"
            patch: JSON = {"metadata": {"labels": desired["metadata"]["labels"]}}
            updated = await self.client.merge_patch(resource, ns, name, patch)
        elif have_hash == want_hash and builders.contains(actual, desired):
            return None
        elif resource is DEPLOYMENTS:
            cause = change_cause(actual, desired)
            try:
                updated = await self.client.replace(resource, ns, name, replacement(actual, desired))
            except Conflict:
                # Our copy is behind (someone wrote it meanwhile and the watch has not brought
                # it yet): read it and replace that, once.
                actual = await self.client.get(resource, ns, name)
                informer.put(actual)
                updated = await self.client.replace(resource, ns, name, replacement(actual, desired))
        else:
            cause = change_cause(actual, desired)
            updated = await self.client.merge_patch(resource, ns, name, merge_patch(desired))
        informer.put(updated)
        replicas = (updated.get("spec") or {}).get("replicas") if resource is DEPLOYMENTS else None
        if cause == "scale":
            logger.info("scaled %s %s to %s", resource.kind, name, replicas)
        else:
            logger.info("updated %s %s: %s", resource.kind, name, CAUSE_WORDS[cause])
        return Applied(cause, resource.kind, name, replicas)

    async def network_policy(self, desired: JSON) -> None:
        """Create or repair a NetworkPolicy (a Template's, an Assignment's worker Pods')."""
        ns, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        informer = self.caches.network_policies
        actual = informer.get(ns, name)
        if actual is None:
            try:
                informer.put(await self.client.create(NETWORK_POLICIES, ns, desired))
                return
            except AlreadyExists:
                actual = await self.client.get(NETWORK_POLICIES, ns, name)
        if builders.contains(actual, desired):
            return
        informer.put(await self.client.merge_patch(NETWORK_POLICIES, ns, name, merge_patch(desired)))

    # ----- the storage finalizer -----

    async def ensure_finalizer(self, obj: JSON, userland: Userland, template: Template) -> JSON:
        storage = template.spec.storage
        want = storage is not None and storage.reclaim_policy == "Delete"
        has = naming.FINALIZER_PVC in userland.finalizers
        if want == has:
            return obj
        finalizers = [f for f in userland.finalizers if f != naming.FINALIZER_PVC]
        if want:
            finalizers.append(naming.FINALIZER_PVC)
        return await self._patch_finalizers(obj, finalizers)

    async def _patch_finalizers(self, obj: JSON, finalizers: list[str]) -> JSON:
        found = meta(obj)
        # resourceVersion makes this an optimistic lock: another writer's finalizer is never lost.
        patched = await self.client.merge_patch(
            USERLANDS, found["namespace"], found["name"],
            {"metadata": {"finalizers": finalizers or None, "resourceVersion": found["resourceVersion"]}},
        )
        self.caches.userlands.put(patched)
        return patched

    async def finalize(self, obj: JSON, userland: Userland, logger: ObjectLogger) -> None:
        if naming.FINALIZER_PVC not in userland.finalizers:
            return
        ns = userland.ref.namespace
        claim = naming.pvc_name(userland.spec.template, userland.spec.user)
        actual = self.caches.pvcs.get(ns, claim)
        if actual is not None and owner_conflict(actual, userland, owned=False) is None:
            try:
                await self.client.delete(PVCS, ns, claim)
                logger.info("deleted PersistentVolumeClaim %s (reclaimPolicy Delete)", claim)
                self.events.record(obj, "Normal", "DeletedStorage",
                                   f"Deleted PersistentVolumeClaim {claim} (reclaimPolicy: Delete)")
            except NotFound:
                pass
        await self._patch_finalizers(obj, [f for f in userland.finalizers if f != naming.FINALIZER_PVC])

    # ----- status -----

    async def status(self, resource: Resource, informer: Informer, obj: JSON, status: JSON,
                     *, tell: Tell = lambda old, new: [], coalesce: ObjectMemory | None = None,
                     every: float = 0.0, force: bool = False) -> Result:
        """Write what changed of `obj`'s status and tell it (`tell`: the Events of the change,
        operator/rules/status_events.py, operator/rules/assignment/events.py). With `coalesce` (the object's
        record), at most one write per `every` seconds (`force`: now, whatever came before): a change that
        comes sooner is written when the interval is over, with whatever else came meanwhile
        (the Result says when)."""
        old = obj.get("status") or {}
        if not status_changed(old, status):
            return DONE
        if coalesce is not None and not force:
            since = time.monotonic() - coalesce.status_written
            if since < every:
                return Result.again_in(every - since)
        found = meta(obj)
        try:
            patched = await self.client.merge_patch(
                resource, found["namespace"], found["name"], {"status": status}, subresource="status")
        except NotFound:
            return DONE  # deleted meanwhile
        if coalesce is not None:
            coalesce.status_written = time.monotonic()
        informer.put(patched)
        for note in tell(old, status):
            self.events.record(patched, note.type, note.reason, note.message)
        return DONE

    def userland_object(self, userland: Userland) -> JSON:
        """The Userland as an Event's involved object (the cached one, else its reference)."""
        return self.caches.userlands.get(userland.ref.namespace, userland.name) or {
            "apiVersion": naming.API_VERSION,
            "kind": USERLAND,
            "metadata": {"name": userland.name, "namespace": userland.ref.namespace, "uid": userland.ref.uid},
        }
