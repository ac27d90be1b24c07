"""The course's audit log page, and the one helper every action handler records through.

Entries live in a capped Redis stream per course (web/audit.py `AuditLog`); the Events on
each touched Userland are written by web/actions.py itself. GET /courses/{ns}/audit shows
the newest entries first, filtered by who or what; staff of the course only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis.exceptions
from aiohttp import web

from userland.platform.model import naming
from userland.web.access import require_course
from userland.web.audit import AuditEntry, AuditLog
from userland.web.context import WEB, identity_of, web_context
from userland.web.rules.courses import Course, CourseRole

log = logging.getLogger(__name__)

AUDIT = "userland.audit_log"  # WebContext.extras key for the AuditLog
PAGE_SIZE = 200
AUDITED_ACTIONS = ("add", "start", "restart", "suspend", "resume", "remove",
                   "start_all", "restart_all", "suspend_all", "resume_all", "remove_all",
                   "assignment_create", "assignment_edit", "assignment_delete", "assignment_handout",
                   "assignment_collect", "assignment_return", "assignment_stop_return", "assignment_extend",
                   "assignment_grade", "assignment_feedback", "assignment_download", "assignment_export",
                   "assignment_regrade", "help_join", "help_open", "help_end")
ACTION_LABELS = {
    "add": "Added students", "start": "Started", "restart": "Restarted", "suspend": "Suspended",
    "resume": "Resumed", "remove": "Removed", "start_all": "Started (whole course)",
    "restart_all": "Restarted (whole course)", "suspend_all": "Suspended (whole course)",
    "resume_all": "Resumed (whole course)", "remove_all": "Removed (whole course)",
    "assignment_create": "Created an assignment", "assignment_edit": "Edited an assignment",
    "assignment_delete": "Deleted an assignment", "assignment_handout": "Handed out again",
    "assignment_collect": "Collected now", "assignment_return": "Returned feedback",
    "assignment_stop_return": "Stopped returning feedback", "assignment_extend": "Changed a deadline",
    "assignment_grade": "Graded", "assignment_feedback": "Uploaded feedback",
    "assignment_download": "Downloaded students' work", "assignment_export": "Exported grades",
    "assignment_regrade": "Asked for a regrade", "check_work": "Checked their work (before the deadline)",
    # Help in the lab (web/help_records.py): a member of staff given access to a student's
    # environments (asked for, or opened unasked where the course allows it), and its end.
    "help_join": "Joined to help", "help_open": "Opened a student's environments",
    "help_end": "Help access ended",
}


def audit_log(request: web.Request) -> AuditLog:
    log_: AuditLog = web_context(request).extras[AUDIT]
    return log_


async def record_action(request: web.Request, course: Course, role: CourseRole, action: str,
                        targets: Sequence[str], result: str, *, filter_words: str = "") -> bool:
    """Record an action that ran; False (and a log line) when Redis failed in the meantime.

    Handlers ping Redis before they write, so this fails only when Redis died during the
    action; the change is done by then, so the page says the record is missing instead of
    pretending nothing happened.
    """
    who = identity_of(request)
    entry = AuditEntry(time=time.time(), actor=who.login, role=role, action=action, course=course.namespace,
                       targets=tuple(targets), result=result, filter=filter_words)
    try:
        await audit_log(request).record(entry)
    except (redis.exceptions.RedisError, OSError) as err:
        log.error("audit record lost", extra={"course": course.namespace, "actor": who.login,
                                              "action": action, "targets": len(targets),
                                              "error": type(err).__name__})
        return False
    return True


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def entry_view(entry: AuditEntry, *, shown: int = 12) -> dict[str, Any]:
    targets = list(entry.targets)
    return {"when": _when(entry.time), "iso": datetime.fromtimestamp(entry.time, UTC).isoformat(),
            "actor": entry.actor, "role": entry.role, "action": entry.action,
            "label": ACTION_LABELS.get(entry.action, entry.action), "targets": targets[:shown],
            "more": max(0, len(targets) - shown), "count": len(targets), "result": entry.result,
            "filter": entry.filter}


async def audit_page(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, _role = await require_course(request, request.match_info["ns"], "audit")
    actor = request.query.get("actor", "").strip().lstrip("@").lower()
    action = request.query.get("action", "").strip()
    problems = []
    if actor and not naming.is_valid_login(actor):
        problems.append("The name to filter by is not a GitHub login; showing everyone.")
        actor = ""
    if action and action not in AUDITED_ACTIONS:
        problems.append("Unknown action to filter by; showing every action.")
        action = ""
    entries = await audit_log(request).recent(course.namespace, count=PAGE_SIZE, actor=actor or None,
                                              action=action or None)
    return ctx.page(request, "audit.html", nav_courses=True, title=f"Audit log · {course.title}",
                    course=course,
                    entries=[entry_view(e) for e in entries], actor=actor, action=action,
                    actions=[(a, ACTION_LABELS[a]) for a in AUDITED_ACTIONS], problems=problems,
                    page_size=PAGE_SIZE)


def setup_audit_routes(app: web.Application) -> None:
    """The audit page; also makes the app's AuditLog (on the app's own Redis connection)."""
    ctx = app[WEB]
    ctx.extras[AUDIT] = AuditLog(ctx.redis)
    app.router.add_get("/courses/{ns}/audit", audit_page)
