"""The class dashboard's LMS roster card and its "Sync roster now" button (web/lti_sync.py does
the sync). Staff only: the card is on the staff dashboard, the button's POST needs a course role
that may start environments (instructors and assistants) and the CSRF token (the app's check).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

from userland.platform.model.lti_links import LmsLink, course_links
from userland.web.access import require_course
from userland.web.context import COURSE_DIRECTORY, identity_of, web_context
from userland.web.lti_sync import RosterSync
from userland.web.rules.help import day
from userland.web.rules.lti_sync import DroppedPolicy, SyncRecord, dropped_policy

log = logging.getLogger(__name__)
LTI_SYNC = "userland.lti_sync"  # WebContext.extras key for the RosterSync (LTI on)


@dataclass(frozen=True)
class LmsView:
    links: tuple[LmsLink, ...]
    last: SyncRecord | None
    every: int  # minutes between automatic syncs (0: none)
    policy: DroppedPolicy  # what happens to a student dropped from the LMS course

    def day(self, moment: float) -> str:
        return day(moment)


async def lms_sync_view(request: web.Request, namespace: str) -> LmsView | None:
    """The card's data, or None when the course is linked to no LMS course (or LTI is off)."""
    ctx = web_context(request)
    sync: RosterSync | None = ctx.extras.get(LTI_SYNC)
    informer = getattr(ctx.extras.get(COURSE_DIRECTORY), "namespaces", None)
    obj = informer.get("", namespace) if informer is not None else None
    links = course_links(obj) if obj is not None else ()
    if sync is None or not links:
        return None
    assert obj is not None
    return LmsView(links=links, last=await sync.last(namespace), every=sync.interval_minutes,
                   policy=dropped_policy(obj["metadata"].get("annotations") or {}))


async def sync_now(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    namespace = request.match_info["ns"]
    await require_course(request, namespace, "start", "sync the roster with the LMS")
    sync: RosterSync | None = ctx.extras.get(LTI_SYNC)
    if sync is None:
        return ctx.error(request, 404, "No LMS here", "This Userland is not connected to an LMS.")
    result = await sync.sync_course(namespace, actor=identity_of(request).login)
    log.info("LMS roster synced on demand", extra={"event": "lti.sync_now", "course": namespace,
                                                   "ok": result.ok, "summary": result.summary})
    raise web.HTTPSeeOther(f"/courses/{quote(namespace)}#lms-roster")


def pass_back_soon(request: web.Request, namespace: str, name: str) -> None:
    """Staff returned an Assignment or changed a grade: its passback runs now, in the background
    (the minute's pass would take it anyway; web/lti_grades.py)."""
    ctx = web_context(request)
    sync: RosterSync | None = ctx.extras.get(LTI_SYNC)
    if sync is None:
        return
    sync.pass_back_soon(namespace, name)


def setup_lti_sync_routes(app: web.Application) -> None:
    app.router.add_post("/courses/{ns}/lms-sync", sync_now)
