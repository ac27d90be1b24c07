"""Reconciling an Assignment: read it and its students from the caches, learn what the store has,
decide (operator/rules/assignment/plan.py, operator/rules/assignment/status.py,
operator/rules/assignment/pods.py, operator/rules/assignment/events.py: pure), write the difference (worker
Pods made and removed; the NetworkPolicy and the status through operator/apply.py), and return when to look
again: the release and every deadline (less the lead) are requeue times, never polling.

Reads the API server only for what no cache holds: the token Secret of a private source, when
its commit is fetched (the store fetches; the token goes to it with that request, nowhere else).
Asks the store for the assignment's state (one request, answered 304 when nothing changed) and,
when the source's fingerprint (url, ref, folder, token Secret, "hand out again") changes, to
fetch the commit. Status writes are coalesced: at most one per `STATUS_INTERVAL` per Assignment,
however many students' results came in meanwhile. What it remembers of each Assignment between
passes is an `AssignmentMemory` (operator/rules/assignment/memory.py), rebuilt from the status by a
new leader.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit

from userland.operator.apply import Applier
from userland.operator.events import EventRecorder
from userland.operator.fetching import TokenProblem, fetch_once
from userland.operator.grading import Grading
from userland.operator.indexes import ASSIGNMENT, Caches
from userland.operator.metrics import OperatorMetrics
from userland.operator.rules.assignment import memory as assignment_memory
from userland.operator.rules.assignment import pods as assignment_pods
from userland.operator.rules.assignment.events import assignment_events
from userland.operator.rules.assignment.memory import (
    STORE_RETRY_FIRST,
    STORE_UNAVAILABLE,
    AssignmentMemory,
    FetchOutcome,
)
from userland.operator.rules.assignment.plan import Env, Pending, RunAs, WorkerPod, batches, plan_work
from userland.operator.rules.assignment.status import assignment_status, source_info, source_problems
from userland.operator.rules.grading.status import merge as merge_grading
from userland.operator.rules.progress import newest_pod
from userland.operator.rules.reconcile import DONE, Memory, Result
from userland.operator.rules.status import display_name, stamped_condition
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    ASSIGNMENTS,
    JSON,
    PODS,
    SECRETS,
    AlreadyExists,
    KubeClient,
    KubeError,
    NotFound,
)
from userland.platform.clients.logs import ObjectLogger
from userland.platform.clients.store_client import StoreClient, StoreError, StoreUnavailable
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment, Source, git_url_prefixes, token_may_go_to
from userland.platform.model.coursework import round_time, size_words
from userland.platform.model.models import Condition, InvalidSpec, Template, Userland, parse_time
from userland.platform.model.objects import meta, rfc3339
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.operator")
STATUS_INTERVAL = 2.0
STORE_RETRY_MAX = 60.0
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


class AssignmentReconciler:
    kind = ASSIGNMENT

    def __init__(self, client: KubeClient, caches: Caches, applier: Applier, events: EventRecorder,
                 settings: Settings, metrics: OperatorMetrics, *, store: StoreClient | None,
                 clock: Callable[[], datetime], worker_image: Callable[[], str]) -> None:
        self.client = client
        self.caches = caches
        self.applier = applier
        self.events = events
        self.settings = settings
        self.metrics = metrics
        self.store = store
        self.clock = clock
        self.worker_image = worker_image
        # Per Assignment (operator/rules/assignment/memory.py); per namespace, the assignments the
        # store was last told exist (name: uid), so the list is sent again only when it changes.
        self.memory: Memory[AssignmentMemory] = Memory(assignment_memory.rebuild)
        # Grading (docs/grading.md): its fair queue is the operator's, across every course.
        self.grading = None if store is None else Grading(
            client, caches, applier, settings, store=store, worker_image=worker_image, token=self._token,
            metrics=metrics)

    @property
    def primary(self) -> Informer:
        return self.caches.assignments

    async def reconcile(self, namespace: str, name: str) -> Result:
        obj = self.caches.assignments.get(namespace, name)
        await self._tell_live(namespace)
        if obj is None:
            if self.store is not None:
                self.store.forget(namespace, name)
            if self.grading is not None:
                self.grading.forget(namespace, name)
            return DONE  # deleted: its Pods and NetworkPolicy go with it (owner references)
        memory = self.memory.of(obj)
        logger = ObjectLogger(log, namespace, name)
        now = self.clock()
        try:
            assignment = Assignment.from_object(obj)
        except InvalidSpec as err:
            invalid = self._condition_only(obj, "InvalidSpec", str(err), now, phase="Failed")
            return await self._write(obj, memory, invalid, force=True)
        if assignment.deleting:
            return DONE
        if self.store is None:
            return await self._write(obj, memory, self._condition_only(
                obj, "StoreNotConfigured", "the operator has no assignment store (USERLAND_STORE_SECRET "
                "is not set): nothing can be handed out or collected", now, phase="Failed"), force=True)
        envs, missing, problems = self._targets(assignment)
        try:
            await self._tell_members(assignment, envs, memory)
        except (StoreUnavailable, StoreError):
            pass  # said by the state's request just below, which fails the same way
        fetch, look = await self._source(assignment, memory, logger)
        try:
            state = await self.store.state(namespace, name, assignment.ref.uid)
            memory.store_delay = None
        except (StoreUnavailable, StoreError) as err:
            delay = min((memory.store_delay or STORE_RETRY_FIRST / 2) * 2, STORE_RETRY_MAX)
            memory.store_delay = delay
            logger.warning("assignment store unavailable", extra={"error": err.message, "retry_in": delay})
            written = await self._write(obj, memory, self._condition_only(
                obj, "StoreUnavailable", f"{err.message}: hand-outs and copies wait for it", now))
            return look.sooner(Result.again_in(delay)).sooner(written)
        self._observe_copies(memory, state)
        source, info, source_problem = fetch.source, fetch.info, fetch.problem
        pods = self._worker_pods(namespace, name)
        plan = plan_work(assignment, envs, source, state, pods, now=now,
                         lead=self.settings.collect_lead_seconds,
                         source_failed=source_problem is not None and source_problem[0] != "StoreUnavailable")
        port = urlsplit(self.settings.store_url).port or 8080
        await self.applier.network_policy(assignment_pods.worker_policy(
            assignment, dict(self.settings.store_pod_labels), self.settings.gateway_namespace, port))
        await self._delete(namespace, plan.finished, logger)
        for pending in plan.pending:
            for members in batches(pending, self.settings.assignment_batch):
                await self._create(assignment, pending, members, info, now, logger)
        usage = state.get("usage") or {}
        status = assignment_status(assignment, envs, missing, source, info, source_problem, state, plan,
                                   self._worker_pods(namespace, name),
                                   problems + source_problems(info) + quota_problems(usage), now=now)
        if usage:
            status["storage"] = {k: int(usage.get(k) or 0) for k in ("bytes", "quotaBytes", "courseBytes",
                                                                   "courseQuotaBytes")}
        if self.grading is not None:
            grading, graded_look = await self.grading.reconcile(assignment, envs, state, plan.rounds, memory,
                                                                logger, now)
            if grading is not None:
                status = merge_grading(status, grading)
            look = look.sooner(graded_look)
        written = await self._write(obj, memory, status)
        return look.sooner(Result.again_at(plan.look_again, now)).sooner(written)

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

    async def _source(self, assignment: Assignment, memory: AssignmentMemory,
                      logger: ObjectLogger) -> tuple[FetchOutcome, Result]:
        """The commit to hand out (fetched once per fingerprint: the status or this leader's last
        fetch has it), or what stops it; and when to try again if it failed."""
        assert self.store is not None
        store = self.store
        wanted = fingerprint(assignment)
        spec = assignment.spec.source

        async def fetch() -> JSON:
            token = await self._token(assignment, spec)
            return await store.fetch(
                assignment.ref.namespace, assignment.name, assignment.ref.uid, url=spec.url, ref=spec.ref,
                sub_path=spec.sub_path, token=token,
                secret=spec.token_secret.name if spec.token_secret else "")

        started = time.monotonic()
        fetch_result, look, fresh = await fetch_once(memory.fetch, wanted, fetch,
                                                     lambda fetched: source_info(assignment, fetched, wanted))
        memory.fetch = fetch_result
        if not fresh:
            return fetch_result, look
        info = fetch_result.info
        if info is None:
            reason = fetch_result.problem[0] if fetch_result.problem else STORE_UNAVAILABLE
            self.metrics.assignment_fetches.labels(reason).inc()
            logger.info("source not fetched", extra={"reason": reason, "retry_in": fetch_result.delay})
            return fetch_result, look
        self.metrics.assignment_fetches.labels("ok").inc()
        self.metrics.assignment_fetch_seconds.observe(time.monotonic() - started)
        logger.info("source fetched", extra={"commit": info["commit"], "files": info["files"]})
        self.events.record(self.caches.assignments.get(assignment.ref.namespace, assignment.name) or {},
                           "Normal", "Fetched",
                           f"Fetched commit {str(info['commit'])[:12]} of {spec.url} ({info['files']} files)")
        return fetch_result, look

    async def _tell_members(self, assignment: Assignment, envs: list[Env], memory: AssignmentMemory) -> None:
        """The store keeps feedback only for these students and zips only their copies."""
        assert self.store is not None
        members = sorted((e.template, e.login) for e in envs)
        if memory.members_told == (assignment.ref.uid, members):
            return
        await self.store.members(assignment.ref.namespace, assignment.name, assignment.ref.uid, members)
        memory.members_told = (assignment.ref.uid, members)

    async def _tell_live(self, namespace: str) -> None:
        """Tell the store which Assignments of `namespace` exist, when that changed since it was
        last told (an Assignment deleted, or made again under the same name): the files of the
        others are removed after the retention (USERLAND_STORE_RETENTION_HOURS). Only from a synced
        cache: an empty list from a cache still filling would retire every assignment."""
        if self.store is None or not self.caches.assignments.synced:
            return
        live = {meta(o).get("name", ""): meta(o).get("uid", "") for o in self.caches.assignments.items()
                if meta(o).get("namespace") == namespace and meta(o).get("uid")}
        if self.memory.namespaces.get(namespace) == live:
            return
        try:
            await self.store.live(namespace, live)
        except (StoreUnavailable, StoreError) as err:
            log.warning("assignment store not told which assignments exist", extra={
                "namespace": namespace, "error": err.message})
            return  # told with the next reconcile of this namespace
        self.memory.namespaces[namespace] = live

    async def _token(self, assignment: Assignment, source: Source) -> str:
        """The token for `source` (the assignment's, or its grader's tests'), when its Secret allows it."""
        secret = source.token_secret
        if secret is None:
            return ""
        try:
            obj = await self.client.get(SECRETS, assignment.ref.namespace, secret.name)
        except NotFound:
            raise TokenProblem("TokenSecretMissing", f"there is no Secret {secret.name!r} in this namespace "
                                                      "(spec.source.tokenSecret)") from None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        allowed = str(annotations.get(naming.ANNOTATION_GIT_URLS) or "")
        url = source.url
        if not token_may_go_to(url, allowed):
            # Checked before the token is read: an Assignment must not be a way to send any Secret of
            # the namespace to a host of its author's choosing (SECURITY.md, "Token exfiltration").
            listed = ", ".join(git_url_prefixes(allowed))
            where = naming.ANNOTATION_GIT_URLS
            now = f"its annotation {where} lists only {listed}" if listed else f"it has no annotation {where}"
            raise TokenProblem("TokenNotAllowed", (
                f"the token in the Secret {secret.name!r} may not be sent to {url}: {now}. If this "
                "repository is meant to get it, an admin adds the repository's address, or a prefix of "
                f"it such as https://github.com/your-org/, to that annotation (kubectl annotate secret "
                f"-n {assignment.ref.namespace} {secret.name} {where}={url} --overwrite); otherwise "
                "name a Secret meant for this repository in spec.source.tokenSecret"))
        value = (obj.get("data") or {}).get(secret.key)
        if not isinstance(value, str):
            raise TokenProblem("TokenSecretMissing", f"the Secret {secret.name!r} has no key {secret.key!r}")
        return base64.b64decode(value).decode(errors="replace").strip()

    def _observe_copies(self, memory: AssignmentMemory, state: JSON) -> None:
        """Each copy's delay after its moment, once, as a metric (how close to the deadline)."""
        for round_name, receipts in (state.get("copies") or {}).items():
            for env, receipt in receipts.items():
                taken = parse_time(receipt.get("takenAt"))
                if memory.first_sight(round_name, env) and taken is not None:
                    self.metrics.assignment_copy_delay.observe(
                        max(0.0, (taken - round_time(round_name)).total_seconds()))

    # ----- write -----

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

    async def _write(self, obj: JSON, memory: AssignmentMemory, status: JSON, *,
                     force: bool = False) -> Result:
        return await self.applier.status(ASSIGNMENTS, self.caches.assignments, obj, status,
                                         tell=assignment_events, coalesce=memory, every=STATUS_INTERVAL,
                                         force=force)


def quota_problems(usage: JSON) -> list[str]:
    """A quota of the store that is full, in words (for `status.problems`): copies and feedback
    past it are refused."""
    found = []
    for used, quota, what, setting in (("bytes", "quotaBytes", "this assignment", "ASSIGNMENT"),
                                       ("courseBytes", "courseQuotaBytes", "this course", "COURSE")):
        have, most = int(usage.get(used) or 0), int(usage.get(quota) or 0)
        if most and have >= most * 0.95:
            found.append(f"{what} keeps {size_words(have)} of its {size_words(most)} quota in the "
                         f"assignment store (USERLAND_STORE_{setting}_QUOTA_MB): copies and feedback "
                         "past it are refused")
    return found


def own_image(pod: JSON | None) -> str:
    """The operator's own image, from its Pod (worker Pods run the same one)."""
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    return str(containers[0].get("image") or "") if containers else ""


async def discover_image(client: KubeClient, namespace: str, name: str) -> str:
    try:
        return own_image(await client.get(PODS, namespace, name))
    except KubeError:
        return ""

