"""Reconciling an Assignment: read it and its students from the caches, learn what the store has,
decide (operator/assignment_plan.py, assignment_status.py, assignment_pods.py: pure), write the
difference (worker Pods made and removed, the status), and say when to look again: the release
and every deadline (less the lead) are requeue times, never polling.

Reads the API server only for what no cache holds: the token Secret of a private source, when
its commit is fetched (the store fetches; the token goes to it with that request, nowhere else).
Asks the store for the assignment's state (one request, answered 304 when nothing changed) and,
when the source's fingerprint (url, ref, folder, token Secret, "hand out again") changes, to
fetch the commit. Status writes are coalesced: at most one per `STATUS_INTERVAL` per Assignment,
however many students' results came in meanwhile.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from userland.operator import assignment_pods, builders
from userland.operator.apply import merge_patch
from userland.operator.assignment_plan import Env, Pending, RunAs, Source, WorkerPod, batches, plan_work
from userland.operator.assignment_status import assignment_status, source_info, source_problems
from userland.operator.events import EventRecorder
from userland.operator.indexes import ASSIGNMENT, Caches, Key
from userland.operator.metrics import OperatorMetrics
from userland.operator.progress import newest_pod
from userland.operator.status import display_name, stamped_condition, status_changed
from userland.operator.workqueue import WorkQueue
from userland.platform import naming
from userland.platform.assignments import Assignment, git_url_prefixes, token_may_go_to
from userland.platform.coursework import round_time
from userland.platform.informer import Informer
from userland.platform.kube import (
    ASSIGNMENTS,
    JSON,
    NETWORK_POLICIES,
    PODS,
    SECRETS,
    AlreadyExists,
    KubeClient,
    KubeError,
    NotFound,
)
from userland.platform.logs import ObjectLogger
from userland.platform.models import Condition, InvalidSpec, Template, Userland, parse_time
from userland.platform.objects import meta, rfc3339
from userland.platform.settings import Settings
from userland.platform.store_client import FetchRefused, StoreClient, StoreError, StoreUnavailable

log = logging.getLogger("userland.operator")
STATUS_INTERVAL = 2.0
FETCH_RETRY_FIRST, FETCH_RETRY_MAX = 15.0, 600.0
STORE_RETRY_FIRST, STORE_RETRY_MAX = 2.0, 60.0
MIB = 1024 * 1024


def fingerprint(assignment: Assignment) -> str:
    """What decides the commit: a change of any of it means fetching again."""
    source = assignment.spec.source
    secret = source.token_secret
    text = json.dumps([source.url, source.ref, source.sub_path, secret.name if secret else "",
                       secret.key if secret else "",
                       rfc3339(assignment.handout_at) if assignment.handout_at else ""])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_as(template: Template) -> tuple[RunAs, tuple[JSON, ...]]:
    """The user a Template's environments run as (the Pod's securityContext, else its first
    container's), and its tolerations: a worker Pod is that user and may go where they go."""
    pod_spec = template.spec.pod_spec
    pod = pod_spec.get("securityContext") or {}
    containers = pod_spec.get("containers") or [{}]
    container = (containers[0] or {}).get("securityContext") or {}

    def number(key: str, *sources: JSON) -> int | None:
        for source in sources:
            if isinstance(source.get(key), int) and not isinstance(source.get(key), bool):
                return int(source[key])
        return None

    found = RunAs(uid=number("runAsUser", container, pod), gid=number("runAsGroup", container, pod),
                  fs_group=number("fsGroup", pod))
    tolerations = tuple(t for t in pod_spec.get("tolerations") or [] if isinstance(t, dict))
    return found, tolerations


# (fingerprint, the source's status entry or None, the problem or None, retry at, delay)
Fetched = tuple[str, JSON | None, tuple[str, str] | None, float, float]


class AssignmentReconciler:
    kind = ASSIGNMENT

    def __init__(self, client: KubeClient, caches: Caches, events: EventRecorder, queue: WorkQueue[Key],
                 settings: Settings, metrics: OperatorMetrics, *, store: StoreClient | None,
                 clock: Callable[[], datetime], worker_image: Callable[[], str]) -> None:
        self.client = client
        self.caches = caches
        self.events = events
        self.queue = queue
        self.settings = settings
        self.metrics = metrics
        self.store = store
        self.clock = clock
        self.worker_image = worker_image
        # Per Assignment: the last fetch's outcome (fingerprint, source or problem, retry time,
        # delay), the last status write (monotonic time), the store's back-off.
        self.fetched: dict[tuple[str, str], Fetched] = {}
        self.written: dict[tuple[str, str], float] = {}
        self.store_delay: dict[tuple[str, str], float] = {}
        self.seen_copies: dict[tuple[str, str], set[tuple[str, str]]] = {}

    @property
    def primary(self) -> Informer:
        return self.caches.assignments

    async def reconcile(self, namespace: str, name: str) -> None:
        obj = self.caches.assignments.get(namespace, name)
        key = (namespace, name)
        if obj is None:
            for table in (self.fetched, self.written, self.store_delay, self.seen_copies):
                table.pop(key, None)  # type: ignore[attr-defined]
            if self.store is not None:
                self.store.forget(namespace, name)
            return  # deleted: its Pods and NetworkPolicy go with it (owner references)
        logger = ObjectLogger(log, namespace, name)
        now = self.clock()
        try:
            assignment = Assignment.from_object(obj)
        except InvalidSpec as err:
            invalid = self._condition_only(obj, "InvalidSpec", str(err), now, phase="Failed")
            await self._write(obj, invalid, force=True)
            return
        if assignment.deleting:
            return
        if self.store is None:
            await self._write(obj, self._condition_only(
                obj, "StoreNotConfigured", "the operator has no assignment store (USERLAND_STORE_SECRET "
                "is not set): nothing can be handed out or collected", now, phase="Failed"), force=True)
            return
        envs, missing, problems = self._targets(assignment)
        source, info, source_problem = await self._source(assignment, logger)
        try:
            state = await self.store.state(namespace, name)
            self.store_delay.pop(key, None)
        except (StoreUnavailable, StoreError) as err:
            delay = min(self.store_delay.get(key, STORE_RETRY_FIRST / 2) * 2, STORE_RETRY_MAX)
            self.store_delay[key] = delay
            self.queue.add_after((ASSIGNMENT, namespace, name), delay)
            logger.warning("assignment store unavailable", extra={"error": err.message, "retry_in": delay})
            await self._write(obj, self._condition_only(
                obj, "StoreUnavailable", f"{err.message}: hand-outs and copies wait for it", now))
            return
        self._observe_copies(key, state)
        pods = self._worker_pods(namespace, name)
        plan = plan_work(assignment, envs, source, state, pods, now=now,
                         lead=self.settings.collect_lead_seconds)
        await self._ensure_policy(assignment)
        await self._delete(namespace, plan.finished, logger)
        for pending in plan.pending:
            for members in batches(pending, self.settings.assignment_batch):
                await self._create(assignment, pending, members, info, now, logger)
        status = assignment_status(assignment, envs, missing, source, info, source_problem, state, plan,
                                   self._worker_pods(namespace, name), problems + source_problems(info),
                                   now=now)
        await self._write(obj, status)
        if plan.look_again is not None:
            delay = (plan.look_again - now) / timedelta(seconds=1)
            self.queue.add_after((ASSIGNMENT, namespace, name), max(delay, 0.0))

    # ----- read -----

    def _targets(self, assignment: Assignment) -> tuple[list[Env], list[str], list[str]]:
        """Every student's environment that receives it, the listed students without one, and
        the Templates that cannot take it (in words)."""
        namespace = assignment.ref.namespace
        envs: list[Env] = []
        problems: list[str] = []
        for template_name in assignment.spec.templates:
            template_obj = self.caches.templates.get(namespace, template_name)
            if template_obj is None:
                problems.append(f"there is no Template {template_name!r} in this course")
                continue
            try:
                template = Template.from_object(template_obj)
            except InvalidSpec as err:
                problems.append(f"the Template {template_name!r} cannot be read: {err}")
                continue
            if template.spec.storage is None:
                problems.append(f"{display_name(template, template_name)} keeps no files (the Template "
                                "has no storage): its students cannot receive assignments")
                continue
            owner, tolerations = run_as(template)
            logins: set[str] = set()
            for userland_name in self.caches.userlands_of_template(namespace, template_name):
                userland_obj = self.caches.userlands.get(namespace, userland_name)
                try:
                    userland = Userland.from_object(userland_obj or {})
                except InvalidSpec:
                    continue
                login = userland.spec.user
                if userland.deleting or login in logins or not assignment.spec.includes(login):
                    continue
                logins.add(login)
                claim = naming.pvc_name(template_name, login)
                pods = [p for p in self.caches.pods_of_pair(namespace, template_name, login)
                        if (p.get("spec") or {}).get("nodeName")]
                running = newest_pod(pods) or next(iter(pods), None)
                envs.append(Env(login=login, template=template_name, claim=claim,
                                has_claim=self.caches.pvcs.get(namespace, claim) is not None,
                                node=(running or {}).get("spec", {}).get("nodeName") if running else None,
                                run_as=owner, tolerations=tolerations))
        have = {e.login for e in envs}
        missing = [login for login in assignment.spec.students or () if login not in have]
        envs.sort(key=lambda e: (e.template, e.login))
        return envs, missing, problems

    def _worker_pods(self, namespace: str, name: str) -> list[WorkerPod]:
        found = []
        for pod in self.caches.workers_of(namespace, name):
            summary = assignment_pods.job_summary(pod)
            if summary is None or summary.get("kind") not in ("handout", "collect", "feedback"):
                continue
            found.append(WorkerPod(
                name=meta(pod).get("name", ""), kind=summary["kind"], key=str(summary.get("key") or ""),
                members=tuple(str(m) for m in summary.get("members") or []),
                phase=str((pod.get("status") or {}).get("phase") or "Pending"),
                created=parse_time(meta(pod).get("creationTimestamp")),
                deleting=bool(meta(pod).get("deletionTimestamp"))))
        return found

    async def _source(self, assignment: Assignment,
                      logger: ObjectLogger) -> tuple[Source | None, JSON | None, tuple[str, str] | None]:
        """The commit to hand out (fetched once per fingerprint), its status entry, or what stops it."""
        assert self.store is not None
        key = (assignment.ref.namespace, assignment.name)
        wanted = fingerprint(assignment)
        recorded = assignment.status.get("source") or {}
        if recorded.get("fingerprint") == wanted and recorded.get("key") and recorded.get("commit"):
            return Source(str(recorded["key"]), str(recorded["commit"])), recorded, None
        known = self.fetched.get(key)
        if known is not None and known[0] == wanted:
            _, info, problem, retry_at, _ = known
            if info is not None:
                return Source(str(info["key"]), str(info["commit"])), info, None
            if time.monotonic() < retry_at:
                # Another requeue may have replaced the one for this retry (the earlier wins).
                self.queue.add_after((ASSIGNMENT, *key), retry_at - time.monotonic())
                return None, None, problem
        delay = known[4] if known is not None and known[0] == wanted else 0.0
        started = time.monotonic()
        try:
            token = await self._token(assignment)
            spec = assignment.spec.source
            fetched = await self.store.fetch(
                assignment.ref.namespace, assignment.name, url=spec.url, ref=spec.ref, sub_path=spec.sub_path,
                token=token, secret=spec.token_secret.name if spec.token_secret else "")
        except (FetchRefused, _TokenMissing, StoreUnavailable, StoreError) as err:
            reason = err.reason if isinstance(err, FetchRefused | _TokenMissing) else "StoreUnavailable"
            problem = (reason, err.message)
            # The store not answering (yet: it may be starting) is tried again sooner than a source
            # that cannot be had.
            first = STORE_RETRY_FIRST if reason == "StoreUnavailable" else FETCH_RETRY_FIRST
            delay = min(max(delay * 2, first), FETCH_RETRY_MAX)
            self.fetched[key] = (wanted, None, problem, time.monotonic() + delay, delay)
            self.queue.add_after((ASSIGNMENT, *key), delay)
            self.metrics.assignment_fetches.labels(reason).inc()
            logger.info("source not fetched", extra={"reason": reason, "retry_in": delay})
            return None, None, problem
        self.metrics.assignment_fetches.labels("ok").inc()
        self.metrics.assignment_fetch_seconds.observe(time.monotonic() - started)
        info = source_info(assignment, fetched, wanted)
        self.fetched[key] = (wanted, info, None, 0.0, 0.0)
        logger.info("source fetched", extra={"commit": info["commit"], "files": info["files"]})
        self.events.record(self.caches.assignments.get(*key) or {}, "Normal", "Fetched",
                           f"Fetched commit {str(info['commit'])[:12]} of {spec.url} ({info['files']} files)")
        return Source(str(info["key"]), str(info["commit"])), info, None

    async def _token(self, assignment: Assignment) -> str:
        secret = assignment.spec.source.token_secret
        if secret is None:
            return ""
        try:
            obj = await self.client.get(SECRETS, assignment.ref.namespace, secret.name)
        except NotFound:
            raise _TokenMissing("TokenSecretMissing", f"there is no Secret {secret.name!r} in this namespace "
                                                      "(spec.source.tokenSecret)") from None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        allowed = str(annotations.get(naming.ANNOTATION_GIT_URLS) or "")
        url = assignment.spec.source.url
        if not token_may_go_to(url, allowed):
            # Checked before the token is read: an Assignment must not be a way to send any Secret of
            # the namespace to a host of its author's choosing (SECURITY.md, "Token exfiltration").
            listed = ", ".join(git_url_prefixes(allowed))
            where = naming.ANNOTATION_GIT_URLS
            now = f"its annotation {where} lists only {listed}" if listed else f"it has no annotation {where}"
            raise _TokenMissing("TokenNotAllowed", (
                f"the token in the Secret {secret.name!r} may not be sent to {url}: {now}. If this "
                "repository is meant to get it, an admin adds the repository's address, or a prefix of "
                f"it such as https://github.com/your-org/, to that annotation (kubectl annotate secret "
                f"-n {assignment.ref.namespace} {secret.name} {where}={url} --overwrite); otherwise "
                "name a Secret meant for this repository in spec.source.tokenSecret"))
        value = (obj.get("data") or {}).get(secret.key)
        if not isinstance(value, str):
            raise _TokenMissing("TokenSecretMissing", f"the Secret {secret.name!r} has no key {secret.key!r}")
        return base64.b64decode(value).decode(errors="replace").strip()

    def _observe_copies(self, key: tuple[str, str], state: JSON) -> None:
        """Each copy's delay after its moment, once, as a metric (how close to the deadline)."""
        seen = self.seen_copies.setdefault(key, set())
        first = not seen
        for round_name, receipts in (state.get("copies") or {}).items():
            for env, receipt in receipts.items():
                if (round_name, env) in seen:
                    continue
                seen.add((round_name, env))
                taken = parse_time(receipt.get("takenAt"))
                if taken is not None and not first:
                    self.metrics.assignment_copy_delay.observe(
                        max(0.0, (taken - round_time(round_name)).total_seconds()))

    # ----- write -----

    async def _ensure_policy(self, assignment: Assignment) -> None:
        port = urlsplit(self.settings.store_url).port or 8080
        desired = assignment_pods.worker_policy(assignment, dict(self.settings.store_pod_labels),
                                                self.settings.gateway_namespace, port)
        namespace, name = assignment.ref.namespace, desired["metadata"]["name"]
        informer = self.caches.network_policies
        actual = informer.get(namespace, name)
        if actual is None:
            try:
                informer.put(await self.client.create(NETWORK_POLICIES, namespace, desired))
                return
            except AlreadyExists:
                actual = await self.client.get(NETWORK_POLICIES, namespace, name)
        if not builders.contains(actual, desired):
            patched = await self.client.merge_patch(NETWORK_POLICIES, namespace, name, merge_patch(desired))
            informer.put(patched)

    async def _delete(self, namespace: str, names: list[str], logger: ObjectLogger) -> None:
        for name in names:
            try:
                await self.client.delete(PODS, namespace, name, propagation="Background")
            except NotFound:
                continue
            logger.info("worker Pod done, removed", extra={"pod": name})

    async def _create(self, assignment: Assignment, pending: Pending, members: tuple[Env, ...],
                      info: JSON | None, now: datetime, logger: ObjectLogger) -> None:
        settings = assignment_pods.WorkerSettings(
            image=self.worker_image(), store_url=self.settings.store_url,
            store_secret=self.settings.store_secret, max_files=self.settings.folder_max_files,
            max_bytes=self.settings.folder_max_mb * MIB)
        pod = assignment_pods.worker_pod(assignment, pending, members, settings, now=now,
                                         source_key=str((info or {}).get("key") or ""),
                                         source_bytes=int((info or {}).get("bytes") or 0))
        try:
            created = await self.client.create(PODS, assignment.ref.namespace, pod)
        except AlreadyExists:
            return  # made a moment ago; the watch brings it
        except KubeError as err:
            logger.warning("worker Pod refused", extra={"error": str(err)[:300]})
            raise
        self.caches.pods.put(created)
        self.metrics.assignment_pods.labels(pending.kind).inc()
        logger.info("worker Pod made", extra={"pod": pod["metadata"]["name"], "kind": pending.kind,
                                              "students": len(members)})

    def _condition_only(self, obj: JSON, reason: str, message: str, now: datetime, *,
                        phase: str | None = None) -> JSON:
        generation = int(meta(obj).get("generation") or 0)
        old = (obj.get("status") or {}).get("conditions") or []
        status: JSON = {"conditions": [stamped_condition(old, Condition("Ready", "False", reason, message, "",
                                                                         generation), rfc3339(now))],
                        "observedGeneration": generation}
        if phase is not None:
            status["phase"] = phase
        return status

    async def _write(self, obj: JSON, status: JSON, *, force: bool = False) -> None:
        old = obj.get("status") or {}
        if not status_changed(old, status):
            return
        key = (meta(obj).get("namespace", ""), meta(obj).get("name", ""))
        since = time.monotonic() - self.written.get(key, 0.0)
        if not force and since < STATUS_INTERVAL:
            # Coalesced: this reconcile's news go out with the next write, soon.
            self.queue.add_after((ASSIGNMENT, *key), STATUS_INTERVAL - since)
            return
        try:
            patched = await self.client.merge_patch(ASSIGNMENTS, key[0], key[1], {"status": status},
                                                    subresource="status")
        except NotFound:
            return
        self.written[key] = time.monotonic()
        self.caches.assignments.put(patched)
        for reason, message, kind in _events(old, status):
            self.events.record(patched, kind, reason, message)


class _TokenMissing(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _events(old: JSON, new: JSON) -> list[tuple[str, str, str]]:
    """The story `kubectl describe assignment` tells: the Ready reason changing, said once."""
    before: JSON = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
    after: JSON = next((c for c in new.get("conditions") or [] if c.get("type") == "Ready"), {})
    same = (before.get("reason"), before.get("status")) == (after.get("reason"), after.get("status"))
    if not after or same:
        return []
    kind = "Normal" if after.get("status") == "True" or after.get("reason") in (
        "Scheduled", "Fetching", "HandingOut", "Collecting") else "Warning"
    return [(str(after.get("reason")), str(after.get("message") or ""), kind)]


def own_image(pod: JSON | None) -> str:
    """The operator's own image, from its Pod (worker Pods run the same one)."""
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    return str(containers[0].get("image") or "") if containers else ""


async def discover_image(client: KubeClient, namespace: str, name: str) -> str:
    try:
        return own_image(await client.get(PODS, namespace, name))
    except KubeError:
        return ""

