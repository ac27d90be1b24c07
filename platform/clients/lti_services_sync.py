"""One course's sync with its LMS courses: all linked rosters read, then one plan (the I/O edge).

A Userland course may be fed by several LMS contexts (courses or sections, PrairieLearn#13883),
even through several registrations. `plan_course_sync(tokens, links, course, policy)` reads the
roster of each `LinkedContext` (platform/clients/lti_services_roster.py) and plans the sync
over all of them together (platform/model/lti_services_roster_diff.py). If any context's roster
cannot be read, there is no plan: a student listed only in the unread context would be
suspended. The member bound counts all linked contexts together.

`sync_grades(...)` is the grade side for one Assignment: the line item found or created, then
one passback pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from userland.platform.clients.lti_services_grades import LineItems, Round, pass_back
from userland.platform.clients.lti_services_roster import Roster, read_roster
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model.lti_services_grades import Grade, LineItem, LineItemSpec
from userland.platform.model.lti_services_passback import Passback
from userland.platform.model.lti_services_roster import MAX_MEMBERS, RosterError
from userland.platform.model.lti_services_roster_diff import Course, Policy, Skip, SyncPlan, plan_sync
from userland.platform.model.lti_services_token import ServiceCredentials

log = logging.getLogger("userland.lti.services")


@dataclass(frozen=True)
class LinkedContext:
    """One LMS context linked to the course, with what its roster needs."""

    credentials: ServiceCredentials  # its registration's client id, token URL and the tool's key
    issuer: str  # its platform's issuer
    context: str  # the LMS context id the link was made for
    memberships_url: str  # the launch's NRPS claim: context_memberships_url


@dataclass(frozen=True)
class CourseSync:
    plan: SyncPlan
    rosters: tuple[Roster, ...]
    seconds: float


async def plan_course_sync(
    tokens: TokenClient,
    links: Sequence[LinkedContext],
    course: Course,
    policy: Policy,
    *,
    now: datetime | None = None,
    max_members: int = MAX_MEMBERS,
) -> CourseSync:
    """Every linked roster read in full, then the plan; RosterError (naming the LMS course)
    when any roster cannot be read."""
    if not links:
        raise RosterError("This course is linked to no LMS course.", retryable=False)
    started = time.monotonic()
    rosters: list[Roster] = []
    for link in links:
        try:
            roster = await read_roster(
                tokens,
                link.credentials,
                link.memberships_url,
                issuer=link.issuer,
                context=link.context,
                max_members=max_members,
            )
        except RosterError as err:
            raise RosterError(f"LMS course {link.context}: {err}", retryable=err.retryable) from None
        rosters.append(roster)
        if sum(len(r.members) for r in rosters) > max_members:
            raise RosterError(
                f"The LMS courses linked to this course have more than {max_members:,} members "
                "together, more than Userland takes in one course; it changed nothing.",
                retryable=False,
            )
    plan = plan_sync([roster.members for roster in rosters], course, policy, now)
    unreadable = tuple(
        Skip(
            f"{roster.unreadable} {'entry' if roster.unreadable == 1 else 'entries'} "
            f"of LMS course {roster.context}",
            "Not added: the LMS listed them without an LMS user id or roles.",
        )
        for roster in rosters
        if roster.unreadable
    )
    if unreadable:
        plan = replace(plan, skipped=plan.skipped + unreadable)
    sync = CourseSync(plan=plan, rosters=tuple(rosters), seconds=time.monotonic() - started)
    log.info(
        "LTI roster sync planned",
        extra={
            "contexts": len(links),
            "summary": plan.summary(),
            "writes": plan.writes,
            "seconds": round(sync.seconds, 3),
        },
    )
    return sync


async def sync_grades(
    tokens: TokenClient,
    line_items: LineItems,
    credentials: ServiceCredentials,
    lineitems_url: str,
    spec: LineItemSpec,
    grades: Mapping[str, Grade],
    states: Mapping[str, Passback],
    *,
    now: datetime | None = None,
) -> tuple[LineItem, Round]:
    """The Assignment's column (found, or made once), then one passback pass of its grades
    (LMS user id -> grade)."""
    item = await line_items.ensure(credentials, lineitems_url, spec)
    return item, await pass_back(tokens, credentials, item.id, grades, states, now=now)
