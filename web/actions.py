"""What staff do to students' environments: add, remove, restart, suspend, resume, start.

Every action goes through the Userland objects only, with the web UI's own ServiceAccount
(`kube`): Kubernetes RBAC (deploy/rbac/web.yaml, bound per course by deploy/course/) is the
fence, so a namespace that is not a course answers 403, reported per row as `not_allowed`.
Nothing here writes Deployments or Pods: a restart sets `userland.dev/restartedAt` on the
Userland and the operator rolls the pod template.

Each function returns one `RowResult` per target, in the order given, and never raises for
what the API server says about a row (errors become `error` rows with its message); rows and
names that cannot be valid are answered without an API call.

Auditing (a choice, see docs/decisions.md): the write actions on existing Userlands (remove,
restart, suspend, resume, start) record a Kubernetes Event on each touched Userland after the
write (best effort, `audit.record_event`). `add_students` records no Event per row: the new
Userland itself carries `userland.dev/added-by`, and an Event per student would double the
writes of a roster import. The app records one `AuditEntry` per action in Redis (web/audit.py)
with `summarize(results)` as its result.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from userland.platform.clients.kube import (
    JSON,
    TEMPLATES,
    USERLANDS,
    AlreadyExists,
    KubeClient,
    KubeError,
    NotFound,
)
from userland.platform.model import naming
from userland.platform.model.bodies import userland_body
from userland.platform.model.objects import rfc3339
from userland.web.audit import record_event
from userland.web.rules import row_status
from userland.web.rules.roster import RosterRow

log = logging.getLogger(__name__)

Outcome = Literal["created", "exists", "invalid", "not_allowed", "removed", "missing",
                  "restarted", "suspended", "resumed", "started", "unchanged", "left_suspended",
                  "cannot_start", "error"]
# Outcomes that changed the environment (the audit log lists those environments).
CHANGED_OUTCOMES = frozenset({"created", "removed", "restarted", "suspended", "resumed", "started"})
OK_OUTCOMES = frozenset({"created", "exists", "removed", "restarted", "suspended", "resumed", "started",
                         "unchanged", "left_suspended"})
# How summarize() names each outcome, in the order it lists them.
_PHRASES: dict[str, str] = {
    "created": "created", "exists": "already there", "removed": "removed", "restarted": "restarted",
    "suspended": "suspended", "resumed": "resumed", "started": "started", "unchanged": "unchanged",
    "left_suspended": "left suspended", "cannot_start": "cannot start", "missing": "not found",
    "invalid": "invalid", "not_allowed": "not allowed", "error": "failed",
}

NOT_A_COURSE = "this namespace is not a course the web UI may manage"


@dataclass(frozen=True)
class RowResult:
    login: str
    template: str
    outcome: Outcome
    detail: str = ""  # words for the teacher (API server message when an error)
    name: str = ""    # the Userland's name (which environment), when known
    line: int = 0     # the roster's line it came from (adding students; 0 for other actions)

    @property
    def ok(self) -> bool:
        return self.outcome in OK_OUTCOMES


def summarize(results: Sequence[RowResult]) -> str:
    """`3 created, 1 already there, 2 invalid` (outcomes in a fixed order); `nothing to do`."""
    counts: Counter[str] = Counter(r.outcome for r in results)
    parts = [f"{counts[outcome]} {phrase}" for outcome, phrase in _PHRASES.items() if counts[outcome]]
    return ", ".join(parts) or "nothing to do"


def desired_userland(template: str, row: RosterRow, *, actor: str) -> JSON:
    """The Userland a valid roster row asks for (pure)."""
    annotations = {naming.ANNOTATION_ADDED_BY: actor}
    annotations.update({key: value for key, value in _roster_details(row).items() if value})
    return userland_body(template, row.login, annotations=annotations)


def details_patch(existing: JSON, row: RosterRow) -> dict[str, str]:
    """Roster details (name, email, section) that differ on an existing Userland (pure)."""
    have = (existing.get("metadata") or {}).get("annotations") or {}
    return {key: value for key, value in _roster_details(row).items() if value and have.get(key) != value}


def _roster_details(row: RosterRow) -> dict[str, str]:
    """The row's details keyed by the annotation that keeps each."""
    return {annotation: getattr(row, field) for field, annotation in naming.ROSTER_DETAILS.items()}


def _spec(obj: JSON) -> tuple[str, str]:
    spec = obj.get("spec") or {}
    return naming.login_of(spec.get("user")), str(spec.get("template") or "")


def _failure(login: str, template: str, err: KubeError) -> RowResult:
    if err.status in (401, 403):
        return RowResult(login, template, "not_allowed", NOT_A_COURSE)
    if err.status in (400, 422):
        return RowResult(login, template, "invalid", f"the cluster refused it: {err.message}")
    return RowResult(login, template, "error", err.message or str(err))


async def _bounded(concurrency: int, jobs: Sequence[Callable[[], Awaitable[RowResult]]]) -> list[RowResult]:
    limit = asyncio.Semaphore(max(1, concurrency))

    async def run(job: Callable[[], Awaitable[RowResult]]) -> RowResult:
        async with limit:
            return await job()

    return list(await asyncio.gather(*(run(job) for job in jobs)))


def _log(action: str, namespace: str, actor: str, results: Sequence[RowResult]) -> None:
    log.info("web action", extra={"action": action, "namespace": namespace, "actor": actor,
                                  "summary": summarize(results), "count": len(results)})


# ----- add ----------------------------------------------------------------------------------------


async def add_students(kube: KubeClient, namespace: str, templates: Sequence[str], rows: Sequence[RosterRow],
                       *, actor: str, concurrency: int = 32) -> list[RowResult]:
    """One Userland per (row, template); existing ones are left as they are ("exists").

    Reads first (the course's Templates and Userlands: two list requests), so a roster imported
    again writes nothing for students already there, and a student already given the Template
    under another name (say, by kubectl) is not given a duplicate.
    """
    templates = list(dict.fromkeys(templates))
    if not templates:
        return [RowResult(row.login, "", "invalid", row.problem or "choose a Template", line=row.line)
                for row in rows]
    # A bad login is shown as it was typed (the teacher looks for it in their list); a good one
    # is the lowercase login it names.
    pairs = [(row if row.problem else replace(row, login=row.login.lower()), template)
             for row in rows for template in templates]
    results: list[RowResult | None] = [None] * len(pairs)
    todo: list[int] = []
    for index, (row, template) in enumerate(pairs):
        problem = row.problem or (
            "" if naming.is_valid_login(row.login) else f"not a GitHub login: {row.login!r}"
        )
        if problem:
            results[index] = RowResult(row.login, template, "invalid", problem)
        elif not naming.is_valid_dns_label(namespace):
            results[index] = RowResult(row.login, template, "not_allowed", NOT_A_COURSE)
        else:
            todo.append(index)
    if todo:
        try:
            known = {t["metadata"]["name"] for t in (await kube.list(TEMPLATES, namespace))["items"]}
            existing = (await kube.list(USERLANDS, namespace))["items"]
        except KubeError as err:
            for index in todo:
                results[index] = _failure(pairs[index][0].login, pairs[index][1], err)
            todo, known, existing = [], set(), []
        by_name = {u["metadata"]["name"]: u for u in existing}
        by_pair = {_spec(u): u["metadata"]["name"] for u in existing}
        jobs: list[tuple[int, Callable[[], Awaitable[RowResult]]]] = []
        for index in todo:
            row, template = pairs[index]
            if template in known:
                jobs.append((index, _add_one(kube, namespace, template, row, actor, by_name, by_pair)))
            else:
                results[index] = RowResult(row.login, template, "invalid",
                                           f"there is no Template {template!r} in this course")
        done = await _bounded(concurrency, [job for _, job in jobs])
        for (index, _), result in zip(jobs, done, strict=True):
            results[index] = result
    # Each result names its roster line ("duplicate of line 2" points at a number on the page).
    ordered = [replace(r, line=pairs[i][0].line) for i, r in enumerate(results) if r is not None]
    _log("add", namespace, actor, ordered)
    return ordered


def _add_one(
    kube: KubeClient, namespace: str, template: str, row: RosterRow, actor: str,
    by_name: dict[str, JSON], by_pair: dict[tuple[str, str], str],
) -> Callable[[], Awaitable[RowResult]]:
    async def job() -> RowResult:
        body = desired_userland(template, row, actor=actor)
        name = body["metadata"]["name"]
        other_name = by_pair.get((row.login, template))
        if other_name is not None and other_name != name:
            return RowResult(row.login, template, "exists", f"already there as {other_name}")
        existing = by_name.get(name)
        if existing is None:
            try:
                await kube.create(USERLANDS, namespace, body)
                return RowResult(row.login, template, "created")
            except AlreadyExists:  # created meanwhile (another tab, the gateway's selfService)
                try:
                    existing = await kube.get(USERLANDS, namespace, name)
                except KubeError as err:
                    return _failure(row.login, template, err)
            except KubeError as err:
                return _failure(row.login, template, err)
        return await _already_there(kube, namespace, template, row, existing)

    return job


async def _already_there(kube: KubeClient, namespace: str, template: str, row: RosterRow,
                         existing: JSON) -> RowResult:
    meta = existing.get("metadata") or {}
    if _spec(existing) != (row.login, template):
        user, other_template = _spec(existing)
        return RowResult(row.login, template, "error",
                         f"the name {meta.get('name')} is taken by {user or '?'}'s {other_template or '?'}")
    if meta.get("deletionTimestamp"):
        return RowResult(row.login, template, "error", "it is still being removed; add it again in a minute")
    changes = details_patch(existing, row)
    if not changes:
        return RowResult(row.login, template, "exists")
    try:
        await kube.merge_patch(USERLANDS, namespace, meta["name"], {"metadata": {"annotations": changes}})
    except NotFound:
        return RowResult(row.login, template, "error", "it was removed meanwhile; add it again")
    except KubeError as err:
        return _failure(row.login, template, err)
    fields = ", ".join(key.split("/", 1)[1] for key in changes)
    return RowResult(row.login, template, "exists", f"already there; updated {fields}")


# ----- actions on existing Userlands ---------------------------------------------------------------


@dataclass(frozen=True)
class _Done:
    outcome: Outcome
    obj: JSON  # the Userland as read or written (for the row's login and template, and the Event)
    wrote: bool  # only a write gets an audit Event
    detail: str = ""


async def _each(kube: KubeClient, namespace: str, names: Sequence[str], action: str, actor: str,
                concurrency: int, step: Callable[[str], Awaitable[_Done]], reason: str,
                message: str) -> list[RowResult]:
    """Run `step(name)` for each name; after a write, an audit Event on the Userland."""

    def job_for(name: str) -> Callable[[], Awaitable[RowResult]]:
        async def job() -> RowResult:
            # Names go into the request path: nothing but a DNS label gets there.
            if not naming.is_valid_dns_label(name):
                return RowResult(name[:80], "", "invalid", f"not the name of an environment: {name[:80]!r}")
            if not naming.is_valid_dns_label(namespace):
                return RowResult(name, "", "not_allowed", NOT_A_COURSE)
            try:
                done = await step(name)
            except NotFound:
                return RowResult(name, "", "missing", "there is no such environment (removed already?)")
            except KubeError as err:
                return _failure(name, "", err)
            if done.wrote:
                await record_event(kube, done.obj, reason=reason, message=message, actor=actor)
            login, template = _spec(done.obj)
            return RowResult(login or name, template, done.outcome, done.detail, name=name)

        return job

    results = await _bounded(concurrency, [job_for(name) for name in names])
    _log(action, namespace, actor, results)
    return results


async def remove_students(kube: KubeClient, namespace: str, userland_names: Sequence[str], *, actor: str,
                          concurrency: int = 32) -> list[RowResult]:
    """Delete Userlands. The operator's children go with them; students' volumes stay unless
    the Template's reclaimPolicy is Delete."""

    async def step(name: str) -> _Done:
        # Read first: DELETE answers with a bare Status, and the teacher wants to see whose
        # environment went (and the Event needs the object's uid).
        current = await kube.get(USERLANDS, namespace, name)
        await kube.delete(USERLANDS, namespace, name)
        return _Done("removed", current, wrote=True)

    return await _each(kube, namespace, userland_names, "remove", actor, concurrency, step,
                       "Removed", "Removed")


async def restart(kube: KubeClient, namespace: str, userland_names: Sequence[str], *, actor: str,
                  now: datetime | None = None, concurrency: int = 32) -> list[RowResult]:
    """Set `userland.dev/restartedAt`; the operator rolls the pod template (new pods)."""
    stamp = rfc3339(now)

    async def step(name: str) -> _Done:
        patched = await kube.merge_patch(
            USERLANDS, namespace, name, {"metadata": {"annotations": {naming.ANNOTATION_RESTARTED_AT: stamp}}}
        )
        suspended = (patched.get("spec") or {}).get("suspended") is True
        return _Done("restarted", patched, wrote=True,
                     detail="it is suspended: it starts fresh when resumed" if suspended else "")

    return await _each(kube, namespace, userland_names, "restart", actor, concurrency, step,
                       "Restarted", "Restart requested")


async def _set_suspended(kube: KubeClient, namespace: str, name: str, suspended: bool,
                         done: Outcome) -> _Done:
    # Read first: "unchanged" needs no write (and no Event), and tells the teacher so.
    current = await kube.get(USERLANDS, namespace, name)
    if ((current.get("spec") or {}).get("suspended") is True) == suspended:
        return _Done("unchanged", current, wrote=False,
                     detail="already suspended" if suspended else "already running")
    patched = await kube.merge_patch(USERLANDS, namespace, name, {"spec": {"suspended": suspended}})
    return _Done(done, patched, wrote=True)


async def set_suspended(kube: KubeClient, namespace: str, userland_names: Sequence[str], suspended: bool,
                        *, actor: str, concurrency: int = 32) -> list[RowResult]:
    """Suspend (scale to zero, storage kept) or resume; `unchanged` when already so (no write)."""
    outcome: Outcome = "suspended" if suspended else "resumed"

    async def step(name: str) -> _Done:
        return await _set_suspended(kube, namespace, name, suspended, outcome)

    reason = "Suspended" if suspended else "Resumed"
    return await _each(kube, namespace, userland_names, "suspend" if suspended else "resume", actor,
                       concurrency, step, reason, reason)


LEFT_SUSPENDED_ASSISTANT = "suspended by the course staff; an instructor can resume it"
LEFT_SUSPENDED_CHOSEN = "suspended by the course staff; left so (resuming was not chosen)"


def start_decision(current: JSON, *, resume_suspended: bool, may_resume: bool) -> tuple[Outcome, str, bool]:
    """What "start" does to one environment, from the shown phase of its fresh object (pure):
    (outcome, words for the teacher, whether to write). Says what is true: "already running"
    only for one that runs; one that cannot start says why, in the dashboard's words."""
    phase = row_status.phase_of(current)
    condition = ""
    for cond in (current.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            condition = str(cond.get("reason") or "")
    words = row_status.staff_reason(phase, condition, ())
    if phase == "Removing":
        return "unchanged", "it is being removed", False
    if phase == "Suspended":
        if resume_suspended and may_resume:
            return "started", "it was suspended; resumed", True
        return "left_suspended", LEFT_SUSPENDED_CHOSEN if may_resume else LEFT_SUSPENDED_ASSISTANT, False
    if phase == "Idle":
        return "started", "it was asleep", True
    if phase == "Ready":
        return "unchanged", "already running", False
    if phase == "Starting":
        generic = words in ("starting", "being resumed", "waking up")
        return "unchanged", "already starting" if generic else f"already starting, but {words}", False
    if phase == "Pending" and condition in ("", "Pending", "Starting"):
        return "unchanged", words, False  # the operator has not got to it yet: nothing is wrong
    return "cannot_start", f"it cannot start: {words}", False


async def start(kube: KubeClient, namespace: str, userland_names: Sequence[str], *, actor: str,
                resume_suspended: bool = False, may_resume: bool = False,
                now: datetime | None = None, concurrency: int = 32) -> list[RowResult]:
    """"Start before a lecture": wake the sleeping ones (`started`); resume the suspended ones
    only when `resume_suspended` (the teacher ticked it) and the actor `may_resume` (an
    instructor's decision), else `left_suspended`; report the rest as they are
    (`start_decision`).

    Waking writes `userland.dev/started-at` (now) and `userland.dev/started-by` (the staff
    login), not `last-activity`: the operator wakes it (within its wake rate), keeps it awake for
    the Template's idleTimeout from then, and names the staff member in its Event instead of
    "its student opened it".
    """
    stamp = rfc3339(now)

    async def step(name: str) -> _Done:
        current = await kube.get(USERLANDS, namespace, name)
        outcome, detail, write = start_decision(current, resume_suspended=resume_suspended,
                                                may_resume=may_resume)
        if not write:
            return _Done(outcome, current, wrote=False, detail=detail)
        patch: dict[str, object] = {"metadata": {"annotations": {naming.ANNOTATION_STARTED_AT: stamp,
                                                                 naming.ANNOTATION_STARTED_BY: actor}}}
        if (current.get("spec") or {}).get("suspended") is True:
            patch["spec"] = {"suspended": False}
        patched = await kube.merge_patch(USERLANDS, namespace, name, patch)
        return _Done(outcome, patched, wrote=True, detail=detail)

    return await _each(kube, namespace, userland_names, "start", actor, concurrency, step,
                       "Started", "Started")
