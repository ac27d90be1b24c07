"""Grades back to the LMS gradebook, from Assignments (the web UI's side; rules in
web/rules/lti_grades.py, the HTTP in platform/clients/lti_services_grades.py).

`pass_back_course(sync, namespace)` runs one passback pass for every Assignment of the course
linked to a line item (`userland.dev/lti-line-item`) whose feedback staff returned: the
column found or made once (by the Assignment's uid as its resourceId), each student's grade
posted as a Score unless the LMS has it already, and each student's state written to
`status.lti` of the Assignment (the status subresource; the operator's merge patches of its
own status fields leave it alone). The web UI runs it every minute (`RosterSync.run`), and at
once when staff return an Assignment or change a returned grade, so a grade goes within
seconds, is retried with backoff while the LMS is down, and is never posted twice for the same
value (the state is read back before every pass; a per-Assignment Redis lock keeps two web UI
replicas from passing at once).

A line item link naming an LMS course the course is not linked to is refused (a registration
used to act on a course it is not linked to), with the reason in the status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiohttp

from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, USERLANDS, KubeError, NotFound
from userland.platform.clients.lti_services_grades import LineItemError, LineItems
from userland.platform.clients.lti_services_sync import sync_grades
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model import lti_services_passback as passback
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.keyspace import lti_grades_lock_key
from userland.platform.model.lti_links import course_links
from userland.platform.model.lti_services_grades import LineItemSpec
from userland.platform.model.lti_services_token import ServiceCredentials, TokenError
from userland.platform.model.models import InvalidSpec
from userland.platform.model.objects import rfc3339
from userland.web.rules import lti_grades
from userland.web.rules.lti_roster import parse_person

if TYPE_CHECKING:
    from userland.web.lti_sync import RosterSync

log = logging.getLogger(__name__)
LOCK_SECONDS = 50
LOCK_POLL_SECONDS = 0.5


async def _people(sync: RosterSync, namespace: str, templates: tuple[str, ...]) -> dict[str, str]:
    """login -> LMS user id, from the environments the roster sync made (`userland.dev/lti-person`)."""
    found: dict[str, str] = {}
    for obj in (await sync.kube.list(USERLANDS, namespace)).get("items") or []:
        spec = obj.get("spec") or {}
        if spec.get("template") not in templates:
            continue
        person = parse_person(((obj.get("metadata") or {}).get("annotations") or {}).get(
            naming.ANNOTATION_LTI_PERSON))
        login = naming.login_of(spec.get("user"))
        if person is not None and login:
            found[login] = person[1]
    return found


async def _write(sync: RosterSync, namespace: str, name: str, lti: dict[str, Any],
                 kept: dict[str, Any] | None = None) -> None:
    """status.lti as `lti` says (a merge patch: what `kept` has and `lti` does not is nulled)."""
    lti = {"error": None, **lti}
    old_students = (kept or {}).get("students")
    if isinstance(old_students, dict) and "students" in lti:
        lti["students"] = {**dict.fromkeys(old_students), **lti["students"]}
    await sync.kube.merge_patch(ASSIGNMENTS, namespace, name, {"status": {"lti": lti}}, subresource="status")


async def _locked(sync: RosterSync, key: str, wait: float) -> bool:
    """The Assignment's passback lock, waiting up to `wait` seconds for another pass to end."""
    deadline = time.monotonic() + wait
    while not await sync.redis.set(key, "1", nx=True, ex=LOCK_SECONDS):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(LOCK_POLL_SECONDS)
    return True


async def pass_back_course(sync: RosterSync, namespace: str, only: str | None = None, *,
                           wait: float = 0.0) -> int:
    """One pass over the course's linked Assignments (`only`: just that one); how many passed.
    An Assignment another pass holds is skipped, or waited for up to `wait` seconds (a pass asked
    for a change must not be lost to a pass that read the Assignment before it)."""
    links = {link.key: link for link in course_links(await sync.kube.get(NAMESPACES, None, namespace))}
    passed = 0
    for obj in (await sync.kube.list(ASSIGNMENTS, namespace)).get("items") or []:
        metadata = obj.get("metadata") or {}
        if only is not None and metadata.get("name") != only:
            continue
        link = lti_grades.parse_link((metadata.get("annotations") or {}).get(lti_grades.ANNOTATION_LINE_ITEM))
        if link is None:
            continue
        lock = lti_grades_lock_key(namespace, str(metadata.get("name")))
        if not await _locked(sync, lock, wait):
            continue
        try:
            await _pass(sync, namespace, obj, link, links)
            passed += 1
        except (KubeError, InvalidSpec) as err:
            log.warning("grade passback skipped", extra={"event": "lti.passback_skipped",
                                                         "assignment": f"{namespace}/{metadata.get('name')}",
                                                         "error": str(err)[:200]})
        finally:
            await sync.redis.delete(lock)
    return passed


async def _pass(sync: RosterSync, namespace: str, obj: dict[str, Any], link: lti_grades.LineItemLink,
                links: dict[tuple[str, str], Any]) -> None:
    assignment = Assignment.from_object(obj)
    now = datetime.now(UTC)
    course_link = links.get((link.registration, link.context))
    if course_link is None or not course_link.lineitems:
        why = ("This assignment's gradebook column is in an LMS course that is not linked to this course"
               if course_link is None else "The linked LMS course offers no gradebook service to Userland")
        await _write(sync, namespace, assignment.name, {"error": why + ": nothing is sent.",
                                                         "updated": rfc3339(now)})
        return
    if not assignment.spec.return_feedback:
        return  # grades go when staff return them
    people = await _people(sync, namespace, assignment.spec.templates)
    status = obj.get("status") or {}
    want = lti_grades.wanted(lti_grades.grades_with_autograde(dict(assignment.spec.grades), status), people,
                             link.score_maximum)
    # Every known student's state is kept, with a grade now or not: one being graded again has
    # no score for a moment, and the same score coming back must not be posted twice.
    users = {**{user: login for login, user in people.items()}, **want.users}
    states = lti_grades.states_by_user(status, users)
    registration = (await sync.registrations()).get(link.registration)
    if registration is None:
        await _write(sync, namespace, assignment.name, {
            "error": "The LMS of this assignment's gradebook column is no longer registered with Userland.",
            "updated": rfc3339(now)})
        return
    key = await sync.tool_key()
    credentials = ServiceCredentials(registration.client_id, registration.auth_token_url, key)
    spec = LineItemSpec(resource_id=str(obj["metadata"].get("uid") or f"{namespace}/{assignment.name}"),
                        label=link.label or assignment.spec.title, score_maximum=link.score_maximum,
                        tag="userland", end=assignment.spec.due)
    async with aiohttp.ClientSession() as session:
        tokens = TokenClient(session, timeout=sync.http_timeout)
        try:
            item, round_ = await sync_grades(tokens, LineItems(tokens), credentials, course_link.lineitems,
                                             spec, want.grades, states, now=now)
        except (LineItemError, TokenError) as err:
            # The LMS did not answer for the column (or the token): every grade due waits, with
            # the same backoff as a score post that failed (never dropped, never posted twice).
            kept = (obj.get("status") or {}).get("lti") or {}
            outcome = passback.Outcome("retry" if err.retryable else "refused", str(err)[:300])
            planned = passback.plan(want.grades, states, now)
            waiting = {user: passback.after(planned.states[user], outcome, now) if user in planned.post
                       else state for user, state in planned.states.items()}
            line_item = str(kept.get("lineItem") or "")
            lti = lti_grades.status_lti(line_item, waiting, users, want.refused, now)
            await _write(sync, namespace, assignment.name, {**lti, "error": str(err)[:300]}, kept)
            return
    lti = lti_grades.status_lti(item.id, round_.states, users, want.refused, now)
    try:
        await _write(sync, namespace, assignment.name, lti, (obj.get("status") or {}).get("lti"))
    except NotFound:
        return
    log.info("grades passed back", extra={
        "event": "lti.passback", "assignment": f"{namespace}/{assignment.name}", "posted": round_.posted,
        "sent": round_.sent, "retrying": round_.retrying, "failed": round_.failed})
