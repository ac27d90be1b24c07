"""The LMS roster sync of linked courses, in the web UI: every USERLAND_LTI_SYNC_MINUTES and when
staff press "Sync roster now" (POST /courses/{ns}/lms-sync, CSRF-checked by the app).

For one course (`RosterSync.sync_course`): its LMS links (platform/model/lti_links.py) with a
roster service, grouped by the Template their students get; each group's rosters read through
the registration's token with the tool's key (platform/clients/lti_services_sync.py), planned
against the course (web/lti_roster.py `read_course`) and applied (`apply_plan`: every active
Learner gets their environment, a dropped or inactive student is suspended with storage kept,
and removed N days later when the course's `userland.dev/lti-remove-after-days` says so).
A roster that cannot be read changes nothing. The outcome is kept for the dashboard (Redis
`lti_sync_key`, web/rules/lti_sync.py) and audited (the course's audit log).

Grades go back (web/lti_grades.py) every GRADE_SECONDS, at once when staff return an Assignment
or change a grade (`pass_back_soon`), and at once when the grader's scores of a returned
Assignment change (`on_assignment`, called by the web UI's watch of Assignments, web/state.py).

Periodic runs (`run`) take a per-course lock in Redis for the interval, so several web UI
replicas sync each course once per interval between them.

What the web UI reads for it, in the LTI namespace (deploy/rbac/web.yaml, Role userland-web-lti):
the registrations and the tool's key Secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import redis.asyncio

from userland.platform.clients.kube import NAMESPACES, Conflict, KubeClient, KubeError, Resource
from userland.platform.clients.lti_keys import read_keys
from userland.platform.clients.lti_services_sync import LinkedContext, plan_course_sync
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model import naming
from userland.platform.model.keyspace import lti_sync_key, lti_sync_lock_key
from userland.platform.model.lti import PLURAL, InvalidRegistration, LtiRegistration
from userland.platform.model.lti_keys import signing_key
from userland.platform.model.lti_links import LmsLink, course_links, staff_sync_patch
from userland.platform.model.lti_services_keys import ToolKey
from userland.platform.model.lti_services_roster import RosterError
from userland.platform.model.lti_services_roster_diff import SyncPlan
from userland.platform.model.lti_services_token import ServiceCredentials
from userland.web.audit import AuditEntry, AuditLog
from userland.web.lti_grades import pass_back_course
from userland.web.lti_line_items import follow_launched
from userland.web.lti_roster import apply_plan, read_course
from userland.web.rules.lti_grades import autograde_changed
from userland.web.rules.lti_sync import (
    SCHEDULE,
    SyncRecord,
    audit_result,
    dropped_policy,
    failed,
    record,
    removals,
)

log = logging.getLogger(__name__)
LTI_REGISTRATIONS = Resource(naming.GROUP, naming.VERSION, PLURAL, "LtiRegistration")
GRADE_SECONDS = 60.0
PASS_WAIT_SECONDS = 60.0  # a pass asked for waits this long for another pass of the Assignment to end


class SyncUnavailable(Exception):
    """What keeps a course from syncing, in a teacher's words."""


@dataclass
class RosterSync:
    kube: KubeClient
    redis: redis.asyncio.Redis
    lti_namespace: str
    audit: AuditLog | None = None
    interval_minutes: int = 15
    http_timeout: float = 10.0
    grade_seconds: float = GRADE_SECONDS
    # When a sync happens (suspensions are stamped with it, removals counted from it); a test's
    # clock makes "N days later" a call (tests/support/clock.py).
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _passes: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict, init=False)
    _again: set[tuple[str, str]] = field(default_factory=set, init=False)

    # -- one course

    async def last(self, namespace: str) -> SyncRecord | None:
        return SyncRecord.from_json(await self.redis.get(lti_sync_key(namespace)))

    async def sync_course(self, namespace: str, *, actor: str = SCHEDULE) -> SyncRecord:
        moment = self.clock()
        now = moment.timestamp()
        try:
            result = await self._sync(namespace, actor, moment)
        except (SyncUnavailable, RosterError) as err:
            result = failed(str(err), actor=actor, now=now)
        except KubeError as err:
            result = failed(f"Userland could not read or change the course ({err.message or err}).",
                            actor=actor, now=now)
        await self.redis.set(lti_sync_key(namespace), result.to_json())
        if self.audit is not None and (result.changed or not result.ok or actor != SCHEDULE):
            await self.audit.record(AuditEntry(
                time=now, actor=actor, role="lms" if actor == SCHEDULE else "staff", action="lms-sync",
                course=namespace, targets=tuple(login for login, _ in result.changes)[:100],
                result=audit_result(result)))
        return result

    async def _sync(self, namespace: str, actor: str, now: datetime) -> SyncRecord:
        obj = await self.kube.get(NAMESPACES, None, namespace)
        links = [link for link in course_links(obj) if link.memberships]
        dropped = dropped_policy(obj["metadata"].get("annotations") or {})
        if not links:
            raise SyncUnavailable("No LMS course with a roster is linked to this course: open Userland "
                                  "from the LMS course once as its instructor.")
        registrations = await self.registrations()
        key = await self.tool_key()
        by_template: dict[str, list[LinkedContext]] = defaultdict(list)
        claims: dict[str, str] = {}
        for link in links:
            registration = registrations.get(link.registration)
            if registration is None:
                raise SyncUnavailable(f"The LMS of linked course {link.title or link.context} is no "
                                      "longer registered with Userland: ask an admin.")
            by_template[link.template].append(_linked(link, registration, key))
            claims.setdefault(link.template, _login_claim(registration))
        plans: list[SyncPlan] = []
        rows: list[tuple[str, str, str]] = []
        due: list[tuple[str, float]] = []
        async with aiohttp.ClientSession() as session:
            tokens = TokenClient(session, timeout=self.http_timeout)
            for template, linked in sorted(by_template.items()):
                course = await read_course(self.kube, namespace, template)
                planned = await plan_course_sync(tokens, linked, course, dropped.policy(claims[template]),
                                                 now=now)
                results = await apply_plan(self.kube, namespace, template, planned.plan,
                                           actor=f"lms-roster-sync ({actor})", now=now)
                plans.append(planned.plan)
                due += removals(course, planned.plan, dropped, now)
                rows += [(r.login, r.outcome, r.detail) for r in results]
        rows += await self._staff(namespace, plans)
        return record(plans, rows, actor=actor, now=now.timestamp(),
                      policy=dropped.problem or dropped.words(), removals=due)

    async def _staff(self, namespace: str, plans: list[SyncPlan]) -> list[tuple[str, str, str]]:
        """The LMS staff lists follow the rosters (hand-written staff are never touched)."""
        staff_set = [pair for plan in plans for pair in plan.staff_set]
        staff_drop = sorted({login for plan in plans for login in plan.staff_drop}
                            - {login for login, _ in staff_set})
        if not staff_set and not staff_drop:
            return []
        for attempt in range(5):
            obj = await self.kube.get(NAMESPACES, None, namespace)
            patch = staff_sync_patch(obj["metadata"].get("annotations") or {}, staff_set, staff_drop)
            if not patch:
                return []
            try:
                await self.kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
                    "resourceVersion": obj["metadata"]["resourceVersion"], "annotations": patch}})
                break
            except Conflict:
                if attempt == 4:
                    raise
        return ([(login, f"staff-{role}", "") for login, role in staff_set]
                + [(login, "staff-left", "") for login in staff_drop])

    async def registrations(self) -> dict[str, LtiRegistration]:
        found: dict[str, LtiRegistration] = {}
        for obj in (await self.kube.list(LTI_REGISTRATIONS, self.lti_namespace)).get("items") or []:
            with contextlib.suppress(InvalidRegistration):
                registration = LtiRegistration.from_object(obj)
                found[registration.name] = registration
        return found

    async def tool_key(self) -> ToolKey:
        key = signing_key(await read_keys(self.kube, self.lti_namespace))
        if key is None:
            raise SyncUnavailable("Userland's LMS key is not made yet: the sign-in service makes it "
                                  "when it starts. Try again in a minute.")
        return ToolKey(kid=key.kid, private_pem=key.private_pem().decode())

    # -- every linked course, on a schedule

    async def linked_courses(self, *, roster: bool = True) -> list[str]:
        """Courses with an LMS link that has a roster service (`roster=False`: any LMS link)."""
        items = (await self.kube.list(NAMESPACES, label_selector=f"{naming.LABEL_COURSE}=true")).get("items")
        return sorted(str(o["metadata"]["name"]) for o in items or []
                      if any(link.memberships or not roster for link in course_links(o))
                      and not o["metadata"].get("deletionTimestamp"))

    async def claim(self, namespace: str, seconds: int) -> bool:
        """This replica's turn to sync `namespace` (for `seconds`)."""
        return bool(await self.redis.set(lti_sync_lock_key(namespace), "1", nx=True, ex=max(1, seconds)))

    async def run_once(self) -> int:
        synced = 0
        seconds = max(60, self.interval_minutes * 60 - 5)
        for namespace in await self.linked_courses():
            if await self.claim(namespace, seconds):
                await self.sync_course(namespace)
                synced += 1
        return synced

    async def grades_once(self) -> int:
        """One grade passback pass over every linked course (web/lti_grades.py)."""
        passed = 0
        for namespace in await self.linked_courses(roster=False):
            await follow_launched(self, namespace)  # columns of Assignments the LMS launched
            passed += await pass_back_course(self, namespace)
        return passed

    def pass_back_soon(self, namespace: str, name: str) -> None:
        """One Assignment's passback now, in the background. Asked again while its pass runs (a
        second copy graded meanwhile), the pass runs once more after: no change waits for the
        next scheduled pass."""
        key = (namespace, name)
        if key in self._passes:
            self._again.add(key)
            return
        self._passes[key] = asyncio.create_task(self._pass_soon(key), name=f"lti-passback-{namespace}-{name}")

    async def _pass_soon(self, key: tuple[str, str]) -> None:
        try:
            while True:
                self._again.discard(key)
                try:
                    await pass_back_course(self, key[0], only=key[1], wait=PASS_WAIT_SECONDS)
                except Exception:  # logged; the scheduled pass takes it up again
                    log.exception("grade passback failed", extra={"event": "lti.passback_failed",
                                                                  "assignment": "/".join(key)})
                if key not in self._again:
                    return
        finally:
            self._passes.pop(key, None)

    def on_assignment(self, namespace: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """The course watch saw an Assignment change: a returned one whose grader's scores (or
        their summary) changed, a copy graded or graded again, passes back now."""
        if autograde_changed(old, new):
            self.pass_back_soon(namespace, str(((new or {}).get("metadata") or {}).get("name") or ""))

    async def run(self) -> None:
        """Rosters every `interval_minutes` (0: only on demand); grades every GRADE_SECONDS."""
        rosters_at = float("-inf")
        while True:
            for step in ("rosters", "grades"):
                every = self.interval_minutes * 60
                due = every > 0 and time.monotonic() - rosters_at >= every
                if step == "rosters" and not due:
                    continue
                try:
                    await (self.run_once() if step == "rosters" else self.grades_once())
                except asyncio.CancelledError:
                    raise
                except Exception:  # one bad pass must not end the schedule
                    log.exception("LMS sync pass failed",
                                  extra={"event": "lti.sync_pass_failed", "step": step})
                if step == "rosters":
                    rosters_at = time.monotonic()
            await asyncio.sleep(self.grade_seconds)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="lti-roster-sync")

    async def stop(self) -> None:
        passes = list(self._passes.values())
        for task in passes:
            task.cancel()
        await asyncio.gather(*passes, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


def _linked(link: LmsLink, registration: LtiRegistration, key: ToolKey) -> LinkedContext:
    return LinkedContext(ServiceCredentials(registration.client_id, registration.auth_token_url, key),
                         registration.issuer, link.context, link.memberships)


def _login_claim(registration: LtiRegistration) -> str:
    # The roster's members carry email, sourcedid and custom parameters (not the id_token's
    # other claims): the registration's claim when the roster has it, else email.
    claim = registration.login_claim
    if claim == "email" or claim.startswith("custom:"):
        return claim
    return "sourcedid" if claim.endswith("person_sourcedid") else "email"
