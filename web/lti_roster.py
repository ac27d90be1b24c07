"""Applying an LMS roster sync plan to a course (the web UI's side; Kubernetes writes).

`read_course(kube, namespace, template)` reads what the plan needs (the course's Userlands and
staff lists: web/rules/lti_roster.py); `apply_plan(kube, namespace, template, plan)` makes the
plan's student changes, each a `RowResult` as the other staff actions give. Auditing follows the
staff actions' choice (web/actions.py): an Event on each suspended, resumed or removed
environment; a new one carries `userland.dev/added-by` instead (an Event per student would double
a first sync's writes); the Redis audit entry is the caller's, as for the staff actions:

- add: a Userland of the link's Template for each new student, with their name, email and the
  LMS person it was made for (`userland.dev/lti-person`); one already there is left as it is;
- suspend: `spec.suspended: true` and `userland.dev/suspended-by: lms` with the time (storage
  kept); restore: resumed, both annotations removed;
- remove: the Userland deleted by staff's own "Remove" (web/actions.py `remove_students`), for
  the policy "remove after N days".

The plan's staff changes are applied by the sync (web/lti_sync.py) to the LMS staff lists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from userland.platform.clients.kube import (
    NAMESPACES,
    USERLANDS,
    AlreadyExists,
    KubeClient,
    KubeError,
    NotFound,
)
from userland.platform.model import naming
from userland.platform.model.bodies import userland_body
from userland.platform.model.lti_links import entries
from userland.platform.model.lti_services_roster_diff import Course, NewStudent, SyncPlan
from userland.platform.model.objects import rfc3339
from userland.web.actions import RowResult, remove_students, summarize
from userland.web.audit import record_event
from userland.web.rules.lti_roster import SUSPENDED_BY_LMS, course_state, person_value

log = logging.getLogger("userland.web.lti_roster")
ACTOR = "lms-roster-sync"


async def read_course(kube: KubeClient, namespace: str, template: str) -> Course:
    annotations = (await kube.get(NAMESPACES, None, namespace))["metadata"].get("annotations") or {}
    userlands = (await kube.list(USERLANDS, namespace))["items"]
    return course_state(userlands, template,
                        instructors=entries(annotations.get(naming.ANNOTATION_INSTRUCTORS)),
                        assistants=entries(annotations.get(naming.ANNOTATION_ASSISTANTS)),
                        lms_instructors=entries(annotations.get(naming.ANNOTATION_LTI_INSTRUCTORS)),
                        lms_assistants=entries(annotations.get(naming.ANNOTATION_LTI_ASSISTANTS)))


def _name(template: str, login: str) -> str:
    return naming.userland_name(template, login)


async def apply_plan(
    kube: KubeClient,
    namespace: str,
    template: str,
    plan: SyncPlan,
    *,
    actor: str = ACTOR,
    now: datetime | None = None,
    concurrency: int = 32,
) -> list[RowResult]:
    stamp = rfc3339(now)
    limit = asyncio.Semaphore(max(1, concurrency))

    async def guarded(login: str, job: Callable[[], Awaitable[RowResult]]) -> RowResult:
        async with limit:
            try:
                return await job()
            except NotFound:
                return RowResult(
                    login, template, "missing", "there is no such environment (removed already?)"
                )
            except KubeError as err:
                return RowResult(login, template, "error", err.message or str(err))

    def add(student: NewStudent) -> Callable[[], Awaitable[RowResult]]:
        async def job() -> RowResult:
            annotations = {
                naming.ANNOTATION_ADDED_BY: actor,
                naming.ANNOTATION_LTI_PERSON: person_value(student.person),
            }
            if student.name:
                annotations[naming.ANNOTATION_STUDENT_NAME] = student.name
            if student.email:
                annotations[naming.ANNOTATION_STUDENT_EMAIL] = student.email
            try:
                created = await kube.create(
                    USERLANDS, namespace, userland_body(template, student.login, annotations=annotations)
                )
            except AlreadyExists:
                return RowResult(student.login, template, "exists", "already there")
            return RowResult(student.login, template, "created", "", name=created["metadata"]["name"])

        return job

    def suspend(login: str, suspended: bool) -> Callable[[], Awaitable[RowResult]]:
        async def job() -> RowResult:
            marks: dict[str, str | None] = {
                naming.ANNOTATION_SUSPENDED_BY: None,
                naming.ANNOTATION_SUSPENDED_AT: None,
            }
            if suspended:
                marks = {
                    naming.ANNOTATION_SUSPENDED_BY: SUSPENDED_BY_LMS,
                    naming.ANNOTATION_SUSPENDED_AT: stamp,
                }
            patched = await kube.merge_patch(
                USERLANDS,
                namespace,
                _name(template, login),
                {"spec": {"suspended": suspended}, "metadata": {"annotations": marks}},
            )
            words = (
                "no longer an active student in the LMS course"
                if suspended
                else "active again in the LMS course"
            )
            await record_event(
                kube,
                patched,
                reason="Suspended" if suspended else "Resumed",
                message=f"LMS roster: {words}",
                actor=actor,
            )
            return RowResult(
                login,
                template,
                "suspended" if suspended else "resumed",
                words,
                name=patched["metadata"]["name"],
            )

        return job

    jobs = [(s.login, add(s)) for s in plan.add]
    jobs += [(login, suspend(login, True)) for login in plan.suspend]
    jobs += [(login, suspend(login, False)) for login in plan.restore]
    results = list(await asyncio.gather(*(guarded(login, job) for login, job in jobs)))
    if plan.remove:  # as staff's "Remove" does: the same code, its Event and its words
        results += await remove_students(kube, namespace, [_name(template, login) for login in plan.remove],
                                         actor=actor, concurrency=concurrency)
    log.info(
        "LTI roster sync applied",
        extra={
            "namespace": namespace,
            "template": template,
            "summary": summarize(results),
            "plan": plan.summary(),
        },
    )
    return results
