"""Grading an Assignment's collected copies (docs/grading.md): the part of the Assignment's reconcile
that fetches the tests, asks the fair queue for slots, makes and removes grading Pods and records
gradings that ended without a report (operator/rules/grading/: the decisions, pure).

Called by operator/assignments.py after the hand-out and the copies, with what that pass read: the
students' environments, the store's state and the rounds each student has. Returns the grading
part of the status and when to look again (a grader's time limit, a slot to wait for).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

from userland.operator.apply import Applier
from userland.operator.fetching import fetch_once
from userland.operator.indexes import Caches
from userland.operator.metrics import OperatorMetrics
from userland.operator.rules.assignment.memory import AssignmentMemory, FetchOutcome
from userland.operator.rules.assignment.plan import Env, latest_copy
from userland.operator.rules.grading import status as grading_status
from userland.operator.rules.grading.checks import plan_checks
from userland.operator.rules.grading.plan import (
    Failure,
    GradingPod,
    Regrade,
    grading_pod_of,
    plan_grading,
)
from userland.operator.rules.grading.pods import GradeWork, GradingSettings, grading_pod, grading_policy
from userland.operator.rules.grading.queue import GradingQueue, line_estimates
from userland.operator.rules.reconcile import DONE, Result
from userland.platform.clients.kube import JSON, PODS, AlreadyExists, KubeClient, KubeError, NotFound
from userland.platform.clients.logs import ObjectLogger
from userland.platform.clients.store_client import StoreClient, StoreError, StoreUnavailable
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment, Source
from userland.platform.model.coursework import round_id
from userland.platform.model.grading import Grader, GraderProblem, parse_grader
from userland.platform.model.objects import meta, rfc3339
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.operator")
MIB = 1024 * 1024
# While copies wait for a slot, the assignment looks again this often (a slot freed elsewhere).
QUEUE_LOOK_SECONDS = 2.0
DURATIONS_KEPT = 20
Token = Callable[[Assignment, Source], Awaitable[str]]


def tests_fingerprint(assignment: Assignment, grader: Grader, regrade: Regrade) -> str:
    """What decides the tests' commit: fetched again when any of it changes (a Regrade too, so a
    teacher who fixed a test and pushed gets the fix)."""
    repository = grader.tests.repository or assignment.spec.source
    secret = repository.token_secret
    text = json.dumps([repository.url, repository.ref, grader.tests.path, secret.name if secret else "",
                       secret.key if secret else "", rfc3339(regrade.at) if regrade.at else ""])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Grading:
    def __init__(self, client: KubeClient, caches: Caches, applier: Applier, settings: Settings, *,
                 store: StoreClient, worker_image: Callable[[], str], token: Token,
                 metrics: OperatorMetrics | None = None) -> None:
        self.client = client
        self.caches = caches
        self.applier = applier
        self.settings = settings
        self.store = store
        self.worker_image = worker_image
        self.token = token
        self.metrics = metrics
        self.queue = GradingQueue(settings.grading_concurrency)
        # Per (course, assignment): how long its last gradings took (the line's estimates), and the
        # Pods already counted.
        self.durations: dict[tuple[str, str], collections.deque[float]] = {}
        self._timed: set[str] = set()
        self._store_url: str | None = None

    async def store_url(self) -> str:
        """The store's address with an IP address: a grading Pod has no DNS."""
        if self._store_url is None:
            parts = urlsplit(self.settings.store_url)
            host, port = parts.hostname or "127.0.0.1", parts.port or 8080
            try:
                found = await asyncio.get_running_loop().getaddrinfo(host, port)
                address = str(found[0][4][0])
            except (OSError, IndexError):
                address = host
            shown = f"[{address}]" if ":" in address else address
            self._store_url = urlunsplit((parts.scheme, f"{shown}:{port}", parts.path, "", ""))
        return self._store_url

    def running(self) -> dict[tuple[str, str], int]:
        """Live grading Pods per (course, assignment), across the operator."""
        counts: dict[tuple[str, str], int] = {}
        for pod in self.caches.pods.items():
            labels = meta(pod).get("labels") or {}
            if labels.get(naming.LABEL_COMPONENT) != naming.GRADER_COMPONENT:
                continue
            found = grading_pod_of(pod)
            if found is not None and found.live:
                key = (str(meta(pod).get("namespace")), str(labels.get(naming.LABEL_ASSIGNMENT)))
                counts[key] = counts.get(key, 0) + 1
        return counts

    def forget(self, namespace: str, name: str) -> None:
        self.queue.forget(namespace, name)
        self.durations.pop((namespace, name), None)

    def _average(self, namespace: str, name: str, pods: list[GradingPod]) -> float | None:
        seen = self.durations.setdefault((namespace, name), collections.deque(maxlen=DURATIONS_KEPT))
        for pod in pods:
            if pod.grade_seconds is not None and pod.name not in self._timed:
                self._timed.add(pod.name)
                seen.append(max(0.0, pod.grade_seconds))
                if self.metrics is not None and pod.kind == "grade":
                    self.metrics.grading_seconds.labels(namespace).observe(max(0.0, pod.grade_seconds))
        if len(self._timed) > 10_000:
            self._timed.clear()  # names of Pods long gone; a Pod counted twice only nudges the average
        return sum(seen) / len(seen) if seen else None

    async def reconcile(self, assignment: Assignment, envs: list[Env], state: JSON,
                        rounds: dict[str, list[str]], memory: AssignmentMemory, logger: ObjectLogger,
                        now: datetime) -> tuple[JSON | None, Result]:
        namespace, name = assignment.ref.namespace, assignment.name
        grader = parse_grader(assignment.spec.grader, assignment.spec.source)
        if grader is None:
            self.queue.forget(namespace, name)
            return None, DONE
        old = assignment.status.get("conditions") or []
        generation = assignment.ref.generation
        if isinstance(grader, GraderProblem):
            self.queue.forget(namespace, name)
            return grading_status.grading_status(grader, None, None, None, old, generation, now=now), DONE
        regrade = Regrade.parse(assignment.regrade)
        tests, look = await self._tests(assignment, grader, regrade, memory, logger)
        if tests.info is None:
            return grading_status.grading_status(grader, None, tests.problem, None, old, generation,
                                                 now=now), look
        copies: dict[str, tuple[str, str, str, str]] = {}
        for env in envs:
            newest = latest_copy(state, env.key, rounds.get(env.key, []))
            if newest is not None:
                round_, receipt = newest
                copies[env.key] = (env.login, env.template, round_, str(receipt.get("sha256") or ""))
        found = [p for p in (grading_pod_of(o) for o in self.caches.workers_of(namespace, name))
                 if p is not None]
        pods = [p for p in found if p.kind == "grade"]
        plan = plan_grading(copies, str(tests.info["key"]), state.get("graded") or {}, pods, regrade, now=now)
        await self._record(assignment, plan.failures, logger)
        port = urlsplit(self.settings.store_url).port or 8080
        await self.applier.network_policy(grading_policy(
            assignment, dict(self.settings.store_pod_labels), self.settings.gateway_namespace, port))
        await self._delete(namespace, plan.delete, logger)
        self.queue.note(namespace, name, len(plan.start))
        allowed = self.queue.grant(namespace, name, self.running())
        settings = GradingSettings(image=self.worker_image(), store_url=await self.store_url(),
                                   store_secret=self.settings.store_secret,
                                   copy_bytes=self.settings.folder_max_mb * MIB, store_port=port)
        made: set[str] = set()
        for work, attempt in plan.start[:allowed]:
            work = dataclasses.replace(work, tests_bytes=int(tests.info.get("bytes") or 0))
            if await self._create(assignment, grader, work, settings, attempt, now, logger):
                made.add(work.env)
                plan.states[work.env] = {"state": "Running", "round": work.round}
        started = len(made)
        self.queue.note(namespace, name, len(plan.start) - started)
        waiting = [work for work, _ in plan.start if work.env not in made]
        slots = max(1, sum(1 for p in pods if p.live) + started)
        average = self._average(namespace, name, pods)
        for work, (place, at) in zip(waiting, line_estimates(len(waiting), slots, average, now), strict=True):
            entry = plan.states[work.env]
            entry["position"] = place
            if at is not None:
                # To the minute (rounded up): the status is not rewritten every look for seconds.
                entry["estimatedAt"] = rfc3339(at.replace(second=0, microsecond=0) + timedelta(minutes=1))
        for key, entry in plan.states.items():
            manual = assignment.spec.grade_of(key.split("/", 1)[1]).grade
            if manual:
                entry["manualGrade"] = manual  # staff's grade wins over the grader's (the page says so)
        result = Result.again_at(plan.look_again, now) if plan.look_again is not None else DONE
        if len(plan.start) > started:
            result = result.sooner(Result.again_in(QUEUE_LOOK_SECONDS))
        checks, checks_look = await self._checks(assignment, grader, envs, state, tests.info,
                                                 [p for p in found if p.kind == "check"], settings, now,
                                                 logger)
        status = grading_status.grading_status(grader, _tests_shown(tests.info), None, plan, old, generation,
                                               now=now)
        status["checks"] = checks
        return status, look.sooner(result).sooner(checks_look)

    async def _checks(self, assignment: Assignment, grader: Grader, envs: list[Env], state: JSON, tests: JSON,
                      pods: list[GradingPod], settings: GradingSettings, now: datetime,
                      logger: ObjectLogger) -> tuple[dict[str, JSON], Result]:
        """Check my work: the students' asks run in the slots deadline gradings leave free."""
        namespace = assignment.ref.namespace
        by_env = {env.key: env for env in envs}
        deadlines = {env.key: assignment.spec.deadline_of(env.login) for env in envs}
        plan = plan_checks(assignment.checks, deadlines, state.get("checks") or {}, pods, now=now)
        if plan.failures:
            entries = [{"template": ask.template, "login": ask.login, "check": round_id(ask.at),
                        "reason": reason, "message": message} for ask, reason, message in plan.failures]
            try:
                await self.store.grading_failures(namespace, assignment.name, assignment.ref.uid, entries)
            except (StoreUnavailable, StoreError) as err:
                logger.warning("check failures not recorded", extra={"error": err.message})
        await self._delete(namespace, plan.delete, logger)
        allowed = self.queue.grant_checks(self.running()) if plan.start else 0
        for ask in plan.start[:allowed]:
            env = by_env[ask.env]
            work = GradeWork(login=ask.login, template=ask.template, round=round_id(ask.at), copy_sha256="",
                             tests_key=str(tests["key"]), tests_bytes=int(tests.get("bytes") or 0))
            pod = grading_pod(assignment, grader, work, settings, now=now, check=env)
            try:
                created = await self.client.create(PODS, namespace, pod)
            except AlreadyExists:
                continue
            self.caches.pods.put(created)
            plan.states[ask.env]["state"] = "Running"
            logger.info("check Pod made", extra={"pod": pod["metadata"]["name"], "environment": ask.env})
        result = Result.again_at(plan.look_again, now) if plan.look_again is not None else DONE
        if len(plan.start) > allowed:
            result = result.sooner(Result.again_in(QUEUE_LOOK_SECONDS))
        return plan.states, result

    async def _tests(self, assignment: Assignment, grader: Grader, regrade: Regrade, memory: AssignmentMemory,
                     logger: ObjectLogger) -> tuple[FetchOutcome, Result]:
        """The tests' source at the store (fetched once per fingerprint), or why not."""
        wanted = tests_fingerprint(assignment, grader, regrade)
        repository = grader.tests.repository or assignment.spec.source

        async def fetch() -> JSON:
            token = await self.token(assignment, repository)
            return await self.store.fetch(
                assignment.ref.namespace, assignment.name, assignment.ref.uid, url=repository.url,
                ref=repository.ref, sub_path=grader.tests.path, token=token,
                secret=repository.token_secret.name if repository.token_secret else "")

        def info_of(fetched: JSON) -> JSON:
            return {"key": fetched.get("key"), "commit": fetched.get("commit"), "bytes": fetched.get("bytes"),
                    "files": fetched.get("count"), "fingerprint": wanted}

        outcome, look, fresh = await fetch_once(memory.tests, wanted, fetch, info_of)
        memory.tests = outcome
        if fresh and outcome.info is not None:
            logger.info("tests fetched", extra={"commit": outcome.info["commit"],
                                                "files": outcome.info["files"]})
        elif fresh and outcome.problem is not None:
            logger.info("tests not fetched", extra={"reason": outcome.problem[0], "retry_in": outcome.delay})
        return outcome, look

    async def _record(self, assignment: Assignment, failures: list[Failure], logger: ObjectLogger) -> None:
        if not failures:
            return
        entries = [{"template": f.work.template, "login": f.work.login, "round": f.work.round,
                    "version": f.work.version, "reason": f.reason, "message": f.message} for f in failures]
        try:
            await self.store.grading_failures(assignment.ref.namespace, assignment.name, assignment.ref.uid,
                                              entries)
        except (StoreUnavailable, StoreError) as err:
            logger.warning("grading failures not recorded", extra={"error": err.message})
            return
        for failure in failures:
            logger.info("grading failed", extra={"environment": failure.work.env, "reason": failure.reason})

    async def _delete(self, namespace: str, names: list[str], logger: ObjectLogger) -> None:
        for pod_name in dict.fromkeys(names):
            try:
                await self.client.delete(PODS, namespace, pod_name, propagation="Background")
            except NotFound:
                continue
            logger.info("grading Pod removed", extra={"pod": pod_name})

    async def _create(self, assignment: Assignment, grader: Grader, work: GradeWork,
                      settings: GradingSettings, attempt: int, now: datetime, logger: ObjectLogger) -> bool:
        pod = grading_pod(assignment, grader, work, settings, now=now, attempt=attempt)
        try:
            created = await self.client.create(PODS, assignment.ref.namespace, pod)
        except AlreadyExists:
            return False
        except KubeError as err:
            logger.warning("grading Pod refused", extra={"error": str(err)[:300]})
            raise
        self.caches.pods.put(created)
        logger.info("grading Pod made", extra={"pod": pod["metadata"]["name"], "environment": work.env})
        return True


def _tests_shown(info: JSON) -> JSON:
    return {k: info.get(k) for k in ("commit", "key", "files", "bytes", "fingerprint")}
