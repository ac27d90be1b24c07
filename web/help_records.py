"""The record of every help grant: an entry in the course's audit log and an Event on each of the
student's Userlands in the course, when it starts and when it ends (whoever or whatever ends it).

Both are written by the web UI, which makes and ends grants (web/routes_help.py) and notices the
ones that run out or lose their staff member (web/help_monitor.py). The audit entry is the
course's record (web/audit.py: Redis, and a log line first, so the log keeps it even when Redis
fails); the Events tell `kubectl describe userland` who had access to that environment. Events
are best effort (they never fail the action they describe).
"""

from __future__ import annotations

import logging
import time

import redis.exceptions

from userland.platform.clients.kube import USERLANDS, KubeClient, KubeError
from userland.platform.model.grants import Grant
from userland.web.audit import AuditEntry, AuditLog, record_event
from userland.web.rules.dashboard import StudentRow
from userland.web.rules.help import END_WORDS, clock, day

log = logging.getLogger(__name__)

# Audit actions (web/routes_audit.py shows and filters by them).
STARTED_ACTIONS = {"request": "help_join", "instructors": "help_open"}
ENDED_ACTION = "help_end"
EVENT_STARTED = "HelpAccessGranted"
EVENT_ENDED = "HelpAccessEnded"
SYSTEM_ACTOR = "userland"


def targets_of(row: StudentRow | None, student: str) -> tuple[str, ...]:
    """The environments a grant opens, as the audit log names them: "alice (VS Code)"."""
    if row is None or not row.environments:
        return (f"{student} (no environment)",)
    return tuple(f"{student} ({env.template_title})" for env in row.environments)


def started_words(grant: Grant) -> str:
    why = "asked for help" if grant.basis == "request" else "the course lets instructors open environments"
    return (f"{grant.staff} ({grant.role}) can open {grant.student}'s environments until "
            f"{clock(grant.expires)} on {day(grant.expires)}: {why}")


def ended_words(grant: Grant) -> str:
    how = END_WORDS.get(grant.end_reason, "ended")
    named = grant.ended_by and grant.end_reason in ("done", "student", "ended")
    by = f" by {grant.ended_by}" if named else ""
    if named and grant.end_reason == "student":
        how, by = f"ended by {grant.ended_by}", ", the student"  # not "by the student by alice"
    until = grant.until
    return (f"{grant.staff} ({grant.role}) no longer has access to {grant.student}'s environments "
            f"({how}{by}, {clock(grant.started)}-{clock(until)})")


async def record_grant(audit: AuditLog, kube: KubeClient | None, grant: Grant, row: StudentRow | None, *,
                       actor: str, actor_role: str, started: bool) -> bool:
    """Audit entry and Events for a grant that started (or ended: `started=False`); False when
    the audit entry could not be written (Redis failed meanwhile; the log line is written)."""
    action = STARTED_ACTIONS.get(grant.basis, "help_join") if started else ENDED_ACTION
    result = started_words(grant) if started else ended_words(grant)
    entry = AuditEntry(time=time.time(), actor=actor, role=actor_role, action=action, course=grant.course,
                       targets=targets_of(row, grant.student), result=result)
    written = True
    try:
        await audit.record(entry)
    except (redis.exceptions.RedisError, OSError) as err:
        log.error("audit record lost", extra={"course": grant.course, "actor": actor, "action": action,
                                              "error": type(err).__name__})
        written = False
    if kube is not None and row is not None:
        for env in row.environments:
            reason = EVENT_STARTED if started else EVENT_ENDED
            await _event(kube, grant.course, env.name, reason, result, actor)
    return written


async def _event(kube: KubeClient, course: str, name: str, reason: str, message: str, actor: str) -> None:
    try:
        # The Userland as the API server has it (uid and all): `kubectl describe` finds its
        # Events by the object's uid.
        userland = await kube.get(USERLANDS, course, name)
    except KubeError as err:
        log.warning("help event not recorded", extra={"userland": f"{course}/{name}",
                                                      "error": str(err)[:200]})
        return
    await record_event(kube, userland, reason=reason, message=message, actor=actor)
