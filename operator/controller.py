"""The controller: Template + Userland -> Deployment, Service (+ PVC) per student.

Level-triggered: watch events only put `(kind, namespace, name)` keys on the work queue;
a reconcile reads the current state from the watch caches (no API reads), computes what
should be (operator/builders.py, operator/status.py) and writes only the difference.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from userland.operator import builders, sleep
from userland.operator.events import EventRecorder
from userland.operator.metrics import OperatorMetrics
from userland.operator.progress import newest_pod, pod_progress, trim_pod
from userland.operator.refusals import podspec_refusal
from userland.operator.route_conflicts import RouteConflicts
from userland.operator.sleep import Verdict
from userland.operator.status import Problem, display_name, status_changed, template_status, userland_status
from userland.operator.wake_rate import WakeRate
from userland.operator.workqueue import WorkQueue
from userland.platform import naming
from userland.platform.informer import Informer, drop_managed_fields
from userland.platform.kube import (
    DEPLOYMENTS,
    JSON,
    NETWORK_POLICIES,
    PODS,
    PVCS,
    SERVICES,
    TEMPLATES,
    USERLANDS,
    AlreadyExists,
    Conflict,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    PermanentError,
    Resource,
    TemporaryError,
)
from userland.platform.logs import ObjectLogger
from userland.platform.models import InvalidSpec, Template, Userland, UserlandSpec
from userland.platform.routes import platform_host_of
from userland.platform.settings import Settings

log = logging.getLogger("userland.operator")

Key = tuple[str, str, str]  # (kind, namespace, name)
USERLAND = "Userland"
TEMPLATE = "Template"
# Template status (how many Userlands use it) is written at most this often per Template.
TEMPLATE_STATUS_DEBOUNCE = 1.0


@dataclass(frozen=True)
class Applied:
    verb: str  # Created | Updated
    detail: str


class NameConflict(Exception):
    """A child's name is taken by an object that belongs to someone else."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _meta(obj: JSON) -> JSON:
    meta: JSON = obj.get("metadata") or {}
    return meta


def _without_status(obj: JSON | None) -> Any:
    """What a watch event changed besides status (our own status writes need no reconcile)."""
    if obj is None:
        return None
    meta = {k: v for k, v in _meta(obj).items() if k not in ("resourceVersion", "managedFields")}
    return (meta, obj.get("spec"))


def _controller_owner(obj: JSON) -> JSON | None:
    return next((ref for ref in _meta(obj).get("ownerReferences") or [] if ref.get("controller")), None)


def trim_deployment(obj: JSON) -> JSON:
    """Keep what reconcile reads: metadata, spec, and the replica counts of status."""
    drop_managed_fields(obj)
    status = obj.get("status") or {}
    obj["status"] = {
        k: status[k]
        for k in ("availableReplicas", "readyReplicas", "replicas", "observedGeneration", "conditions")
        if k in status
    }
    return obj


class Controller:
    def __init__(
        self,
        client: KubeClient,
        settings: Settings,
        *,
        workers: int = 16,
        metrics: OperatorMetrics | None = None,
        resync_seconds: float = 600.0,
    ) -> None:
        self.client = client
        self.settings = settings
        self.workers = workers
        self.metrics = metrics or OperatorMetrics()
        self.resync_seconds = resync_seconds
        namespaces = settings.namespaces
        managed = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
        self.templates = Informer(client, TEMPLATES, namespaces)
        # Thousands of these: kept as compact JSON text (see Informer).
        self.userlands = Informer(client, USERLANDS, namespaces, compact=True)
        self.deployments = Informer(
            client,
            DEPLOYMENTS,
            namespaces,
            label_selector=managed,
            transform=trim_deployment,
            compact=True,
        )
        self.services = Informer(client, SERVICES, namespaces, label_selector=managed, compact=True)
        self.pvcs = Informer(client, PVCS, namespaces, label_selector=managed, compact=True)
        self.network_policies = Informer(client, NETWORK_POLICIES, namespaces, label_selector=managed)
        # Students' Pods, trimmed to what status.progress needs (the waking page shows it).
        self.pods = Informer(client, PODS, namespaces, label_selector=managed, transform=trim_pod)
        # Index: (namespace, template, user) -> that pair's Pods by name (usually one).
        self.pods_by_pair: dict[tuple[str, str, str], dict[str, JSON]] = defaultdict(dict)
        self.informers = [
            self.templates,
            self.userlands,
            self.deployments,
            self.services,
            self.pvcs,
            self.network_policies,
            self.pods,
        ]
        self.queue: WorkQueue[Key] = WorkQueue()
        self.wake_rate = WakeRate(settings.wake_rate, settings.wake_burst)
        # When each environment was last scaled up from sleep (its turn in the wake line came).
        self._woken_at: dict[tuple[str, str], datetime] = {}
        self.events = EventRecorder(client, busy=lambda: self.queue.depth > 0)
        # Index: (namespace, template) -> Userland names, so a Template change reaches them all.
        self.by_template: dict[tuple[str, str], set[str]] = defaultdict(set)
        # Index: (namespace, template, user) -> Userland names (to find duplicates and PVC owners).
        self.by_pair: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._indexed: dict[tuple[str, str], UserlandSpec] = {}
        # Dry-run verdicts per Template (uid, generation): None when the podSpec is accepted.
        self._template_verdicts: dict[tuple[str, int], Problem | None] = {}
        # Colliding routes, decided as the gateway decides (platform/routes.py).
        self.route_conflicts = RouteConflicts(platform_host_of(settings.public_url))
        self.templates.add_handler(self._on_template)
        self.userlands.add_handler(self._on_userland)
        for informer in (self.deployments, self.services):
            informer.add_handler(self._on_owned_child)
        self.pvcs.add_handler(self._on_pvc)
        self.pods.add_handler(self._on_pod)
        self.network_policies.add_handler(self._on_network_policy)

    # ----- event handlers: they only enqueue keys -----

    def _on_userland(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        ns, name = _meta(obj).get("namespace", ""), _meta(obj).get("name", "")
        self._reindex(ns, name, new)
        if old is not None and new is not None and _without_status(old) == _without_status(new):
            return  # a status write (usually ours): nothing to reconcile
        self.queue.add((USERLAND, ns, name))

    def _reindex(self, ns: str, name: str, obj: JSON | None) -> None:
        try:
            spec = UserlandSpec.parse(obj.get("spec")) if obj is not None else None
        except InvalidSpec:
            spec = None
        previous = self._indexed.get((ns, name))
        if previous == spec:
            return
        if previous is not None:
            self.by_template[(ns, previous.template)].discard(name)
            self.by_pair[(ns, previous.template, previous.user)].discard(name)
            self.queue.add_after((TEMPLATE, ns, previous.template), TEMPLATE_STATUS_DEBOUNCE)
            # A duplicate of this pair may now be the only one: let it proceed.
            for other in self.by_pair[(ns, previous.template, previous.user)]:
                self.queue.add((USERLAND, ns, other))
        if spec is None:
            self._indexed.pop((ns, name), None)
            return
        self._indexed[(ns, name)] = spec
        self.by_template[(ns, spec.template)].add(name)
        self.by_pair[(ns, spec.template, spec.user)].add(name)
        self.queue.add_after((TEMPLATE, ns, spec.template), TEMPLATE_STATUS_DEBOUNCE)

    def _on_template(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        if old is not None and new is not None and _without_status(old) == _without_status(new):
            return
        ns, name = _meta(obj).get("namespace", ""), _meta(obj).get("name", "")
        # A route taken or freed changes other Templates' verdicts too (in any namespace).
        changed = self.route_conflicts.recompute(self.templates.items())
        for template_key in {(ns, name)} | changed:
            self.queue.add((TEMPLATE, *template_key))
            for userland in self.by_template.get(template_key, ()):
                self.queue.add((USERLAND, template_key[0], userland))

    def _on_owned_child(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        owner = _controller_owner(obj)
        if owner is not None and owner.get("kind") == USERLAND:
            self.queue.add((USERLAND, _meta(obj).get("namespace", ""), str(owner.get("name"))))

    def _on_pvc(self, old: JSON | None, new: JSON | None) -> None:
        """A child found by its labels (a PVC, a Pod): reconcile the Userlands of its pair."""
        obj = new or old
        assert obj is not None
        meta = _meta(obj)
        labels = meta.get("labels") or {}
        pair = (
            meta.get("namespace", ""),
            labels.get(naming.LABEL_TEMPLATE, ""),
            labels.get(naming.LABEL_USER, ""),
        )
        for name in self.by_pair.get(pair, ()):
            self.queue.add((USERLAND, pair[0], name))

    def _on_pod(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = _meta(obj)
        labels = meta.get("labels") or {}
        pair = (meta.get("namespace", ""), labels.get(naming.LABEL_TEMPLATE, ""),
                labels.get(naming.LABEL_USER, ""))
        if new is None:
            self.pods_by_pair[pair].pop(meta.get("name", ""), None)
            if not self.pods_by_pair[pair]:
                del self.pods_by_pair[pair]
        else:
            self.pods_by_pair[pair][meta.get("name", "")] = new
        self._on_pvc(old, new)  # the same labels lead to the same Userlands

    def _on_network_policy(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        owner = _controller_owner(obj)
        if owner is not None and owner.get("kind") == TEMPLATE:
            self.queue.add((TEMPLATE, _meta(obj).get("namespace", ""), str(owner.get("name"))))

    # ----- running -----

    async def run_informers(self) -> None:
        await asyncio.gather(*(informer.run() for informer in self.informers))

    async def wait_synced(self) -> None:
        await asyncio.gather(*(informer.wait_synced() for informer in self.informers))

    def enqueue_all(self, *, low: bool = False) -> None:
        for ns, name in self.templates.object_keys():
            self.queue.add((TEMPLATE, ns, name), low=low)
        for ns, name in self.userlands.object_keys():
            self.queue.add((USERLAND, ns, name), low=low)

    async def lead(self) -> None:
        """Reconcile until cancelled (run while holding the lease)."""
        await self.wait_synced()
        self.enqueue_all()
        workers = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        try:
            while True:
                await asyncio.sleep(self.resync_seconds)
                self.enqueue_all(low=True)  # repairs anything a missed event left behind
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            kind, ns, name = key
            started = time.perf_counter()
            try:
                if kind == USERLAND:
                    await self.reconcile_userland(ns, name)
                else:
                    await self.reconcile_template(ns, name)
                self.queue.forget(key)
                self.metrics.reconciles.labels(kind, "ok").inc()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # Nothing in a CR may crash the operator: log, count, back off, try again.
                delay = self.queue.retry(key)
                reason = type(err).__name__
                self.metrics.reconciles.labels(kind, "error").inc()
                self.metrics.errors.labels(kind, reason).inc()
                level = logging.WARNING if isinstance(err, KubeError) else logging.ERROR
                ObjectLogger(log, ns, name).log(
                    level,
                    "reconcile failed, retrying",
                    exc_info=not isinstance(err, KubeError),
                    extra={"kind": kind, "error": str(err), "retry_in": round(delay, 2)},
                )
            finally:
                self.queue.done(key)
                self.metrics.duration.labels(kind).observe(time.perf_counter() - started)
            # A reconcile with nothing to write never suspends, and a non-empty queue hands
            # out the next key at once: yield, so a resync of thousands cannot starve the
            # watches (a new student's event would otherwise wait for the whole pass).
            await asyncio.sleep(0)

    # ----- Userland -----

    async def reconcile_userland(self, ns: str, name: str) -> None:
        obj = self.userlands.get(ns, name)
        if obj is None:
            self.wake_rate.done((ns, name))  # never leave a gone one in the line to wake
            return  # deleted: the garbage collector removes the children
        logger = ObjectLogger(log, ns, name)
        try:
            userland = Userland.from_object(obj)
        except InvalidSpec as err:
            await self._write_invalid_status(obj, str(err))
            return
        if userland.deleting:
            self.wake_rate.done((ns, name))
            await self._finalize(obj, userland, logger)
            return
        template_obj = self.templates.get(ns, userland.spec.template)
        template: Template | None = None
        problem = self._duplicate_problem(userland)
        if problem is None and template_obj is None:
            problem = Problem(
                "TemplateNotFound",
                f"Template {userland.spec.template!r} not found in namespace {ns!r}; "
                "it will start when the Template is created",
                phase="Pending",
            )
        if problem is None and template_obj is not None:
            try:
                template = Template.from_object(template_obj)
            except InvalidSpec as err:
                problem = Problem("InvalidTemplate", f"Template {userland.spec.template!r}: {err}")
        if problem is None and template is not None:
            problem = self._template_verdicts.get((template.ref.uid, template.ref.generation))
        verdict: Verdict | None = None
        waking = False
        if problem is not None:
            self.wake_rate.done((ns, name))
        if problem is None and template is not None:
            verdict, waking = self._sleep_or_wake(userland, template)
            obj = await self._ensure_finalizer(obj, userland, template)
            problem = await self._apply_children(userland, template, logger, asleep=verdict.asleep or waking)
        if problem is None and template is not None:
            # Its environment runs, but the gateway does not route its Template: say so.
            problem = self.route_conflicts.userland_problem(
                ns, template.name, display_name(template, template.name))
        deployment = self.deployments.get(
            ns, naming.deployment_name(userland.spec.template, userland.spec.user)
        )
        await self._write_userland_status(obj, userland, template, deployment, problem,
                                          verdict=verdict, waking=waking)

    def _sleep_or_wake(self, userland: Userland, template: Template) -> tuple[Verdict, bool]:
        """The sleep verdict, and whether it waits for its turn to wake (operator/wake_rate.py).
        Schedules the next look at the time the verdict changes by itself.

        A wake, once asked, is carried out: an environment in the wake line stays in it even
        if its idleTimeout passes while it waits (a class of 300 at 5 a second waits up to a
        minute), and gets a whole idleTimeout from the moment it is scaled up."""
        ns, name = userland.ref.namespace, userland.name
        key = (ns, name)
        now = datetime.now(UTC)
        verdict = sleep.verdict(userland, template, now, woke=self._woken_at.get(key))
        if verdict.recheck_at is not None:
            # A little after the moment, so the clock has certainly passed it.
            self.queue.add_after((USERLAND, ns, name), (verdict.recheck_at - now).total_seconds() + 0.5)
        deployment = self.deployments.get(
            ns, naming.deployment_name(userland.spec.template, userland.spec.user))
        scaled_down = deployment is not None and (deployment.get("spec") or {}).get("replicas") == 0
        in_line = self.wake_rate.is_waiting(key)
        if userland.spec.suspended or not scaled_down or (verdict.asleep and not in_line):
            self.wake_rate.done(key)
            return verdict, False
        delay = self.wake_rate.wait(key)
        if delay > 0:
            self.queue.add_after((USERLAND, ns, name), delay)
            return replace(verdict, asleep=False), True
        self._woken_at[key] = now
        if len(self._woken_at) > 4 * max(1, len(self._indexed)):  # forget the removed ones
            self._woken_at = {k: v for k, v in self._woken_at.items() if k in self._indexed}
        # Awake from now on; the cause stays what woke it (for the Waking Event).
        return replace(sleep.verdict(userland, template, now, woke=now), cause=verdict.cause), False

    def _duplicate_problem(self, userland: Userland) -> Problem | None:
        ns, spec = userland.ref.namespace, userland.spec
        names = self.by_pair.get((ns, spec.template, spec.user), set())
        others = [self.userlands.get(ns, n) for n in names if n != userland.name]
        mine = (
            _meta(self.userlands.get(ns, userland.name) or {}).get("creationTimestamp", ""),
            userland.name,
        )
        for other in others:
            if other is None:
                continue
            theirs = (_meta(other).get("creationTimestamp", ""), _meta(other).get("name", ""))
            if theirs < mine:
                return Problem(
                    "Duplicate",
                    f"Userland {theirs[1]!r} already gives {spec.user!r} the Template "
                    f"{spec.template!r} in this namespace; delete one of them",
                )
        return None

    async def _apply_children(
        self, userland: Userland, template: Template, logger: ObjectLogger, *, asleep: bool = False
    ) -> Problem | None:
        children = builders.desired_children(userland, template, asleep=asleep)
        jobs = [
            self._apply(DEPLOYMENTS, self.deployments, children.deployment, userland, logger),
            self._apply(SERVICES, self.services, children.service, userland, logger),
        ]
        if children.pvc is not None:
            jobs.append(self._apply(PVCS, self.pvcs, children.pvc, userland, logger))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        # One Event per reconcile that changed something, not one per child: Events are
        # writes too, and `kubectl describe` reads better with one line saying it all.
        created = [r.detail for r in results if isinstance(r, Applied) and r.verb == "Created"]
        updated = [r.detail for r in results if isinstance(r, Applied) and r.verb == "Updated"]
        for verb, details in (("Created", created), ("Updated", updated)):
            if details:
                self.events.record(
                    self._userland_obj(userland), "Normal", verb, f"{verb} " + "; ".join(details)
                )
        for result in results:
            if isinstance(result, NameConflict):
                return Problem("NameConflict", str(result))
            if isinstance(result, Invalid):
                return Problem("InvalidPodSpec", podspec_refusal(
                    result.message, template.spec.pod_spec, field=result.field, value=result.value))
            if isinstance(result, BaseException):
                raise result
        return None

    def _owner_conflict(self, actual: JSON, userland: Userland, owned: bool) -> str | None:
        meta = _meta(actual)
        owner = _controller_owner(actual)
        kind = actual.get("kind") or "object"
        if owned and owner is not None and owner.get("uid") != userland.ref.uid:
            return (
                f"{kind} {meta.get('name')!r} belongs to {owner.get('kind')} "
                f"{owner.get('name')!r}, not to this Userland"
            )
        labels = meta.get("labels") or {}
        for label, mine in (
            (naming.LABEL_USER, userland.spec.user),
            (naming.LABEL_TEMPLATE, userland.spec.template),
        ):
            if labels.get(label) not in (None, mine):
                return f"{kind} {meta.get('name')!r} is labelled for {label}={labels.get(label)!r}"
        return None

    async def _apply(
        self, resource: Resource, informer: Informer, desired: JSON, userland: Userland, logger: ObjectLogger
    ) -> Applied | None:
        """Create or repair one child; None when it already was as desired."""
        ns, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        owned = resource is not PVCS
        actual = informer.get(ns, name)
        if actual is None:
            try:
                created = await self.client.create(resource, ns, desired)
                informer.put(created)
                logger.info("created %s %s", resource.kind, name)
                return Applied("Created", f"{resource.kind} {name}")
            except AlreadyExists:
                # It exists outside our view (someone removed our labels): read it and repair.
                actual = await self.client.get(resource, ns, name)
        actual = actual or {}
        actual.setdefault("kind", resource.kind)
        if (conflict := self._owner_conflict(actual, userland, owned)) is not None:
            raise NameConflict(conflict)
        want_hash = desired["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]
        have_hash = (_meta(actual).get("annotations") or {}).get(naming.ANNOTATION_SPEC_HASH)
        if resource is PVCS:
            # A claim's spec is mostly immutable: keep it as it is, repair only our metadata.
            if contains_metadata(actual, desired):
                return None
            patch: JSON = {"metadata": {"labels": desired["metadata"]["labels"]}}
            updated = await self.client.merge_patch(resource, ns, name, patch)
        elif have_hash == want_hash and builders.contains(actual, desired):
            return None
        elif resource is DEPLOYMENTS:
            try:
                updated = await self.client.replace(resource, ns, name, _replacement(actual, desired))
            except Conflict:
                # Our copy is behind (the deployment controller wrote its status meanwhile, and
                # the watch has not brought it yet): read it and replace that, once.
                actual = await self.client.get(resource, ns, name)
                informer.put(actual)
                updated = await self.client.replace(resource, ns, name, _replacement(actual, desired))
        else:
            updated = await self.client.merge_patch(resource, ns, name, _merge_patch(desired))
        informer.put(updated)
        why = "the Template changed" if have_hash != want_hash else "it had been changed outside the operator"
        logger.info("updated %s %s: %s", resource.kind, name, why)
        return Applied("Updated", f"{resource.kind} {name} ({why})")

    async def _ensure_finalizer(self, obj: JSON, userland: Userland, template: Template) -> JSON:
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
        meta = _meta(obj)
        # resourceVersion makes this an optimistic lock: another writer's finalizer is never lost.
        patched = await self.client.merge_patch(
            USERLANDS,
            meta["namespace"],
            meta["name"],
            {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}},
        )
        self.userlands.put(patched)
        return patched

    async def _finalize(self, obj: JSON, userland: Userland, logger: ObjectLogger) -> None:
        if naming.FINALIZER_PVC not in userland.finalizers:
            return
        ns = userland.ref.namespace
        claim = naming.pvc_name(userland.spec.template, userland.spec.user)
        actual = self.pvcs.get(ns, claim)
        if actual is not None and self._owner_conflict(actual, userland, owned=False) is None:
            try:
                await self.client.delete(PVCS, ns, claim)
                logger.info("deleted PersistentVolumeClaim %s (reclaimPolicy Delete)", claim)
                self.events.record(
                    obj,
                    "Normal",
                    "DeletedStorage",
                    f"Deleted PersistentVolumeClaim {claim} (reclaimPolicy: Delete)",
                )
            except NotFound:
                pass
        await self._patch_finalizers(obj, [f for f in userland.finalizers if f != naming.FINALIZER_PVC])

    def _userland_obj(self, userland: Userland) -> JSON:
        return self.userlands.get(userland.ref.namespace, userland.name) or {
            "apiVersion": naming.API_VERSION,
            "kind": USERLAND,
            "metadata": {"name": userland.name, "namespace": userland.ref.namespace, "uid": userland.ref.uid},
        }

    async def _write_userland_status(
        self,
        obj: JSON,
        userland: Userland,
        template: Template | None,
        deployment: JSON | None,
        problem: Problem | None,
        *,
        verdict: Verdict | None = None,
        waking: bool = False,
    ) -> None:
        pair = (userland.ref.namespace, userland.spec.template, userland.spec.user)
        pods = list(self.pods_by_pair.get(pair, {}).values())
        status = userland_status(
            userland, template, deployment, problem, public_url=self.settings.public_url, now=_now(),
            sleep=verdict, waking=waking, progress=pod_progress(newest_pod(pods)),
        )
        old = obj.get("status") or {}
        if not status_changed(old, status):
            return
        await self._patch_status(USERLANDS, self.userlands, obj, status)
        old_ready: JSON = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
        new_ready = status["conditions"][0]
        if status["phase"] == "Idle" and old.get("phase") != "Idle":
            self.events.record(obj, "Normal", "Sleeping", new_ready["message"])
            return
        if old.get("phase") == "Idle" and status["phase"] != "Idle" and verdict is not None:
            name = display_name(template, userland.spec.template)
            self.events.record(obj, "Normal", "Waking",
                               f"{name} is waking up: {sleep.CAUSE_WORDS[verdict.cause]}")
            return
        first_start = not old_ready and new_ready["reason"] == "Starting"  # "Created" said it
        if not first_start and (old_ready.get("status"), old_ready.get("reason")) != (
            new_ready["status"],
            new_ready["reason"],
        ):
            event_type = (
                "Normal"
                if new_ready["status"] == "True" or new_ready["reason"] in ("Starting", "Suspended")
                else "Warning"
            )
            self.events.record(obj, event_type, new_ready["reason"], new_ready["message"])

    async def _write_invalid_status(self, obj: JSON, message: str) -> None:
        meta = _meta(obj)
        old = obj.get("status") or {}
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": message,
            "observedGeneration": int(meta.get("generation") or 0),
        }
        previous: JSON = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
        ready["lastTransitionTime"] = (
            previous.get("lastTransitionTime") if previous.get("status") == "False" else _now()
        )
        status = {
            "phase": "Failed",
            "conditions": [ready],
            "observedGeneration": int(meta.get("generation") or 0),
        }
        if status_changed(old, status):
            await self._patch_status(USERLANDS, self.userlands, obj, status)
            self.events.record(obj, "Warning", "InvalidSpec", message)

    async def _patch_status(self, resource: Resource, informer: Informer, obj: JSON, status: JSON) -> None:
        meta = _meta(obj)
        try:
            patched = await self.client.merge_patch(
                resource, meta["namespace"], meta["name"], {"status": status}, subresource="status"
            )
        except NotFound:
            return  # deleted meanwhile
        informer.put(patched)

    # ----- Template -----

    async def reconcile_template(self, ns: str, name: str) -> None:
        obj = self.templates.get(ns, name)
        if obj is None:
            return
        problem: Problem | None
        try:
            template = Template.from_object(obj)
        except InvalidSpec as err:
            problem = Problem("InvalidSpec", str(err))
        else:
            problem = await self._template_verdict(template)
            await self._apply_network_policy(template)
            if problem is None:
                problem = self.route_conflicts.template_problem(ns, name)
        count = len(self.by_template.get((ns, name), ()))
        status = template_status(obj, count, problem, now=_now())
        old = obj.get("status") or {}
        if status_changed(old, status):
            await self._patch_status(TEMPLATES, self.templates, obj, status)
            old_ready: JSON = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
            new_ready = status["conditions"][0]
            if old_ready.get("reason") != new_ready["reason"]:
                self.events.record(
                    obj, "Normal" if problem is None else "Warning", new_ready["reason"], new_ready["message"]
                )

    async def _template_verdict(self, template: Template) -> Problem | None:
        """Does the API server accept a Deployment made from this Template? (dry run, cached)"""
        key = (template.ref.uid, template.ref.generation)
        if key in self._template_verdicts:
            return self._template_verdicts[key]
        probe = Userland.from_object(
            {
                "metadata": {
                    "name": f"{template.name}-dry-run",
                    "namespace": template.ref.namespace,
                    "uid": "00000000-0000-0000-0000-000000000000",
                },
                "spec": {"user": "dry-run", "template": template.name},
            }
        )
        verdict: Problem | None = None
        try:
            await self.client.create(
                DEPLOYMENTS,
                template.ref.namespace,
                builders.desired_deployment(probe, template),
                dry_run=True,
            )
        except Invalid as err:
            verdict = Problem("InvalidPodSpec", podspec_refusal(
                err.message, template.spec.pod_spec, field=err.field, value=err.value))
        except AlreadyExists:
            verdict = None  # a Deployment of that name exists; the spec itself was not refused
        except PermanentError as err:
            logging.getLogger(__name__).warning("template dry run failed", extra={"error": str(err)})
            return None
        except TemporaryError:
            return None  # unknown yet; the Userlands' own writes will tell
        if len(self._template_verdicts) > 10_000:
            self._template_verdicts.clear()
        self._template_verdicts[key] = verdict
        if verdict is not None:
            # Userlands that tried before the verdict may not know: tell them.
            for userland in self.by_template.get((template.ref.namespace, template.name), ()):
                self.queue.add((USERLAND, template.ref.namespace, userland))
        return verdict

    async def _apply_network_policy(self, template: Template) -> None:
        desired = builders.desired_network_policy(template, self.settings)
        ns, name = template.ref.namespace, desired["metadata"]["name"]
        actual = self.network_policies.get(ns, name)
        if actual is None:
            try:
                created = await self.client.create(NETWORK_POLICIES, ns, desired)
                self.network_policies.put(created)
                return
            except AlreadyExists:
                actual = await self.client.get(NETWORK_POLICIES, ns, name)
        if builders.contains(actual, desired):
            return
        updated = await self.client.merge_patch(NETWORK_POLICIES, ns, name, _merge_patch(desired))
        self.network_policies.put(updated)

    # ----- health -----

    def health(self) -> tuple[bool, str]:
        failing = [i.resource.plural for i in self.informers if not i.healthy]
        if failing:
            return False, "watches failing: " + ", ".join(failing)
        synced = all(i.synced for i in self.informers)
        return True, "ok" if synced else "ok (caches still syncing)"

    def cache_sizes(self) -> dict[str, int]:
        return {i.resource.kind: len(i.store) for i in self.informers}


def contains_metadata(actual: JSON, desired: JSON) -> bool:
    return builders.contains(_meta(actual).get("labels") or {}, desired["metadata"]["labels"])


def _merge_patch(desired: JSON) -> JSON:
    meta = desired["metadata"]
    patch: JSON = {
        "metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
        "spec": desired["spec"],
    }
    if "ownerReferences" in meta:
        patch["metadata"]["ownerReferences"] = meta["ownerReferences"]
    return patch


def _replacement(actual: JSON, desired: JSON) -> JSON:
    """A full update that restores what we set and keeps labels/annotations others added."""
    body: JSON = {**desired, "metadata": dict(desired["metadata"])}
    meta = _meta(actual)
    body["metadata"]["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
    body["metadata"]["annotations"] = {
        **(meta.get("annotations") or {}),
        **desired["metadata"]["annotations"],
    }
    body["metadata"]["resourceVersion"] = meta.get("resourceVersion")
    return body
