"""An Assignment's gradebook column, found when the LMS launches its link (the web UI's side).

The content picker (web/lti_deep_link.py) answers the LMS with a link whose `lineItem` has the
Assignment's uid as its `resourceId`, and annotates the Assignment `userland.dev/lti-line-item`
(the LMS course's gradebook it posts to). When the LMS later launches that link, the gateway
notes it (auth/lti.py, Redis `lti_assignment_launches_key`); within a minute the web UI's grade
loop (`RosterSync.grades_once`) takes the notes and, for each Assignment:

- checks the Assignment is linked to that very LMS course (its annotation names the launch's
  registration and LMS course, and the course is linked to it): a launch never links anything;
- finds the column through AGS by its resourceId (`LineItems.find`: read only, every page, never
  a new column: the LMS made it from the deep link), and keeps its URL in `status.lti.lineItem`;
- when the column has an end date that changed since Userland last followed it
  (`status.lti.lineItemEnd`), the Assignment's due date becomes it (web/rules/lti_deep_link.py
  `followed_due`).

Grade passback (web/lti_grades.py) finds the same column by the same resourceId.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import aiohttp

from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, KubeError, NotFound
from userland.platform.clients.lti_services_grades import LineItemError, LineItems
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model.keyspace import lti_assignment_launches_key
from userland.platform.model.lti_links import course_links
from userland.platform.model.lti_services_token import ServiceCredentials, TokenError
from userland.platform.model.models import parse_time
from userland.platform.model.objects import rfc3339
from userland.web.rules import lti_grades
from userland.web.rules.lti_deep_link import followed_due

if TYPE_CHECKING:
    from userland.web.lti_sync import RosterSync

log = logging.getLogger(__name__)


async def follow_launched(sync: RosterSync, namespace: str) -> int:
    """Take the course's launch notes and follow each Assignment's column; how many were found."""
    key = lti_assignment_launches_key(namespace)
    notes: dict[Any, Any] = await sync.redis.hgetall(key)
    found = 0
    for raw_name, raw in notes.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        await sync.redis.hdel(key, raw_name)
        try:
            note = json.loads(raw)
            if isinstance(note, dict) and await _follow(sync, namespace, name, note):
                found += 1
        except (ValueError, KubeError, LineItemError, TokenError) as err:
            log.warning("gradebook column not followed", extra={
                "event": "lti.line_item_not_followed", "assignment": f"{namespace}/{name}",
                "error": str(err)[:200]})
    return found


async def _follow(sync: RosterSync, namespace: str, name: str, note: dict[str, Any]) -> bool:
    try:
        obj = await sync.kube.get(ASSIGNMENTS, namespace, name)
    except NotFound:
        return False
    metadata = obj.get("metadata") or {}
    link = lti_grades.parse_link((metadata.get("annotations") or {}).get(lti_grades.ANNOTATION_LINE_ITEM))
    if link is None or (link.registration, link.context) != (note.get("registration"), note.get("context")):
        return False  # not linked to the LMS course that launched it
    links = {c.key: c for c in course_links(await sync.kube.get(NAMESPACES, None, namespace))}
    course_link = links.get((link.registration, link.context))
    registration = (await sync.registrations()).get(link.registration)
    if course_link is None or not course_link.lineitems or registration is None:
        return False
    key = await sync.tool_key()
    credentials = ServiceCredentials(registration.client_id, registration.auth_token_url, key)
    async with aiohttp.ClientSession() as session:
        item = await LineItems(TokenClient(session, timeout=sync.http_timeout)).find(
            credentials, course_link.lineitems, str(metadata.get("uid") or ""))
    if item is None:
        return False  # the LMS made no column (yet): passback makes it when grades go
    kept = (obj.get("status") or {}).get("lti") or {}
    due = followed_due(parse_time((obj.get("spec") or {}).get("due")), item.due(),
                       parse_time(kept.get("lineItemEnd")))
    if due is not None:
        await sync.kube.merge_patch(ASSIGNMENTS, namespace, name, {"spec": {"due": rfc3339(due)}})
    status = {"lineItem": item.id, "lineItemEnd": rfc3339(item.due()) if item.due() is not None else None}
    await sync.kube.merge_patch(ASSIGNMENTS, namespace, name, {"status": {"lti": status}},
                                subresource="status")
    log.info("gradebook column followed", extra={
        "event": "lti.line_item_followed", "assignment": f"{namespace}/{name}",
        "due": rfc3339(due) if due is not None else None})
    return True
