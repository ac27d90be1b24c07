"""The audit trail of what staff did in the web UI: a queryable record in Redis, Events, log lines.

Three records, each for a different reader:
- `AuditLog` (Redis streams): what the web UI's audit page queries. One stream per course and
  one across all courses (platform/model/keyspace.py `audit_stream_key`), each capped at about
  `maxlen` entries (`XADD ... MAXLEN ~`, so trimming stays cheap). `record` also writes every
  entry as a structured log line first, so the log holds it even when Redis is down (then
  `record` raises the Redis error: the app answers 503, and the action, already done, stays in
  the log and in the Events).
- `record_event`: a Kubernetes Event on the touched Userland, so `kubectl describe userland`
  tells an admin who restarted or suspended it. Best effort: it logs and never raises, because
  an audit Event must never fail the action it describes.
- the log line above, for the cluster's log pipeline.

Targets ("bob (VS Code)": the environments an action changed) are stored up to `MAX_TARGETS`,
each at most `MAX_TARGET_CHARS`; a larger action (a whole roster) keeps the first ones and a last
element "+N more" (every target is in its Event and the log line), so one entry never grows past
about 2 KB. Redis runs with `noeviction` (deploy/redis.yaml): a full
Redis refuses new sessions on every course, so the audit log has a memory budget, not only a
length: a course's stream holds about `COURSE_MAXLEN` entries (at most
`AUDIT_COURSE_BUDGET_BYTES`, whatever its staff do), the stream across courses about
`ALL_MAXLEN` (at most `AUDIT_ALL_BUDGET_BYTES`). Size Redis as sessions + courses x the course
budget + the global one (deploy/README.md).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

import redis.asyncio

from userland.platform.clients.kube import EVENTS, JSON, KubeClient
from userland.platform.model import naming
from userland.platform.model.events import event_body as platform_event_body
from userland.platform.model.keyspace import audit_stream_key
from userland.platform.model.objects import rfc3339

log = logging.getLogger(__name__)

COMPONENT = "userland-web"
ALL_COURSES = ""  # recent(ALL_COURSES): the stream across every course
MAX_TARGETS = 32  # the audit page shows 12 and "N more"
MAX_TARGET_CHARS = 60  # "login (Template title)": a 39-character login and a shortened title
MAX_FILTER_CHARS = 120
COURSE_MAXLEN = 2_000
ALL_MAXLEN = 5_000
AUDIT_COURSE_BUDGET_BYTES = 6 * 1024 * 1024
AUDIT_ALL_BUDGET_BYTES = 16 * 1024 * 1024
_HOST = os.environ.get("HOSTNAME") or socket.gethostname()


@dataclass(frozen=True)
class AuditEntry:
    time: float
    actor: str
    role: str
    action: str
    course: str
    targets: tuple[str, ...]   # the environments it changed: "bob (VS Code)"
    result: str
    filter: str = ""           # a course-wide run's search and Status filter, in words


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stored_targets(targets: tuple[str, ...]) -> list[str]:
    if len(targets) <= MAX_TARGETS:
        return [_short(t, MAX_TARGET_CHARS) for t in targets]
    return [*(_short(t, MAX_TARGET_CHARS) for t in targets[: MAX_TARGETS - 1]),
            f"+{len(targets) - MAX_TARGETS + 1} more"]


def entry_fields(entry: AuditEntry) -> dict[str, str]:
    """The stream fields of an entry (all strings, so every Redis client reads them alike)."""
    return {
        "time": repr(float(entry.time)),
        "actor": entry.actor,
        "role": entry.role,
        "action": entry.action,
        "course": entry.course,
        "targets": json.dumps(_stored_targets(entry.targets), separators=(",", ":")),
        "result": entry.result,
        "filter": _short(entry.filter, MAX_FILTER_CHARS),
    }


def entry_from_fields(fields: dict[Any, Any]) -> AuditEntry | None:
    """An entry from stream fields (bytes or str); None for one that is not ours."""
    text = {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode(errors="replace")
            if isinstance(v, bytes) else str(v)) for k, v in fields.items()}
    try:
        targets = json.loads(text.get("targets") or "[]")
        return AuditEntry(
            time=float(text["time"]), actor=text.get("actor", ""), role=text.get("role", ""),
            action=text.get("action", ""), course=text.get("course", ""),
            targets=tuple(str(t) for t in targets) if isinstance(targets, list) else (),
            result=text.get("result", ""), filter=text.get("filter", ""),
        )
    except (KeyError, ValueError):
        return None


class AuditLog:
    def __init__(self, redis: redis.asyncio.Redis, *, maxlen: int = COURSE_MAXLEN,
                 all_maxlen: int = ALL_MAXLEN) -> None:
        self.redis = redis
        self.course_maxlen = maxlen
        self.all_maxlen = all_maxlen

    async def record(self, entry: AuditEntry) -> None:
        """XADD to the course's stream and the global one (one round trip). Logs first."""
        log.info("audit", extra={"actor": entry.actor, "role": entry.role, "action": entry.action,
                                 "course": entry.course, "targets": list(entry.targets[:20]),
                                 "target_count": len(entry.targets), "result": entry.result,
                                 "filter": entry.filter})
        fields: Any = entry_fields(entry)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(audit_stream_key(entry.course), fields, maxlen=self.course_maxlen, approximate=True)
            if entry.course != ALL_COURSES:
                pipe.xadd(audit_stream_key(ALL_COURSES), fields, maxlen=self.all_maxlen, approximate=True)
            await pipe.execute()

    async def recent(self, course: str, *, count: int = 100, actor: str | None = None,
                     action: str | None = None) -> list[AuditEntry]:
        """The newest `count` entries of `course` (ALL_COURSES: every course), newest first,
        optionally only those of one actor and/or one action."""
        found: list[AuditEntry] = []
        upper = "+"
        page = count if actor is None and action is None else max(count, 500)
        key = audit_stream_key(course)
        while len(found) < count:
            batch: list[Any] = await self.redis.xrevrange(key, max=upper, min="-", count=page) or []
            for _entry_id, fields in batch:
                entry = entry_from_fields(fields or {})
                if entry is None or (actor is not None and entry.actor != actor) or (
                        action is not None and entry.action != action):
                    continue
                found.append(entry)
                if len(found) == count:
                    break
            if len(batch) < page:
                break
            last = batch[-1][0]
            upper = "(" + (last.decode() if isinstance(last, bytes) else str(last))
        return found


def event_body(involved: JSON, *, reason: str, message: str, actor: str, now: str, host: str) -> JSON:
    """An audit Event: who did it is in the message and in an annotation (for filtering)."""
    return platform_event_body(involved, "Normal", reason, f"{message} (by {actor} in the web UI)",
                               component=COMPONENT, host=host, now=now,
                               annotations={naming.ANNOTATION_ACTOR: actor})


async def record_event(kube: KubeClient, obj: JSON, *, reason: str, message: str, actor: str) -> None:
    """A core/v1 Event on `obj` (a Userland), reported by userland-web. Never raises."""
    try:
        now = rfc3339()
        body = event_body(obj, reason=reason, message=message, actor=actor, now=now, host=_HOST)
        await kube.create(EVENTS, body["metadata"]["namespace"], body)
    except Exception as err:  # an audit Event must never fail the action it describes
        log.warning("could not record event", extra={"reason": reason, "error": str(err)[:300],
                                                     "error_type": type(err).__name__})
