"""Help in the lab: a grant lets one member of a course's staff into one student's environments
of that course, for a limited time. This module is the pure part: what a grant is, how it is
written down, and a course's help settings from its annotations (its Redis keys: platform/model/keyspace.py).
The Redis store is platform/clients/grant_store.py; the web UI writes grants (web/routes_help.py), the
gateway honours them (proxy/rules/decision.py) and the handoff binds an origin session to one
(auth/origin_sessions.py).

A grant names the course (namespace), the student, the staff member and their role in the
course, why it exists (`request`: the student asked; `instructors`: the course lets its
instructors open any student's environment) and when it ends. It is live while its key exists
in Redis: the key expires with the grant (PX), and ending it early deletes the key. Every record
stays readable for `HISTORY_SECONDS` afterwards, so the student sees who had access and when.

Course settings (namespace annotations, platform/model/naming.py):
- `userland.dev/staff-access`: `on-request` (default) or `instructors`. Anything else is taken
  as `on-request` (the stricter one) and reported to staff on the dashboard.
- `userland.dev/help-limit`: how long a grant lasts, a duration such as `1h` or `45m`, between
  `MIN_LIMIT_SECONDS` and `MAX_LIMIT_SECONDS`; default `DEFAULT_LIMIT_SECONDS` (1 h).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, cast, get_args

from userland.platform.model import naming
from userland.platform.model.models import InvalidSpec, parse_duration

StaffAccess = Literal["on-request", "instructors"]
STAFF_ACCESS_VALUES: tuple[str, ...] = get_args(StaffAccess)
Basis = Literal["request", "instructors"]
EndReason = Literal["done", "student", "staff-removed", "policy", "course-gone", "expired", "ended"]

DEFAULT_LIMIT_SECONDS = 3600
MIN_LIMIT_SECONDS = 5 * 60
MAX_LIMIT_SECONDS = 8 * 3600
# How long ended grants stay in a student's history (and their records in Redis), and how many.
HISTORY_SECONDS = 30 * 24 * 3600
HISTORY_KEEP = 20
# A student's one-line message with a request for help.
MESSAGE_MAX = 200


def is_grant_id(text: str) -> bool:
    """Ids are `secrets.token_urlsafe(16)`: 22 URL-safe characters."""
    return 16 <= len(text) <= 64 and text.isascii() and all(c.isalnum() or c in "-_" for c in text)


@dataclass(frozen=True)
class Grant:
    id: str
    course: str                   # the course's namespace
    student: str
    staff: str
    role: str                     # the staff member's role in the course: admin, instructor, assistant
    basis: Basis
    started: float                # epoch seconds
    expires: float
    message: str = ""             # the student's, when they asked
    # Who the staff member was when the grant was made (the signed identity's global role and
    # teams), so the web UI can tell later whether the course still names them.
    staff_global_role: str = "student"
    staff_teams: str = ""         # comma-separated org/team
    ended: float | None = None
    ended_by: str = ""
    end_reason: str = ""

    def live(self, now: float) -> bool:
        return self.ended is None and now < self.expires

    def made_for(self, role: str, teams: tuple[str, ...] | list[str]) -> bool:
        """Whether a session of the staff member with this global role and these teams is the
        person the grant was made for: the course judged them with the role and teams they had
        at Join, so a later login with others (taken off USERLAND_INSTRUCTORS, out of a team a
        course names) must join again."""
        return role == self.staff_global_role and ",".join(sorted(teams)) == self.staff_teams

    @property
    def until(self) -> float:
        """When access stopped (or will): the end, or the planned end."""
        return self.ended if self.ended is not None else self.expires

    def ended_at(self, when: float, by: str, reason: EndReason) -> Grant:
        return replace(self, ended=when, ended_by=by, end_reason=reason)


def encode_grant(grant: Grant) -> str:
    return json.dumps(asdict(grant), separators=(",", ":"))


def decode_grant(raw: str | bytes | None) -> Grant | None:
    """The grant in `raw`, or None when it is missing or not a well-formed grant."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            return None
        basis = data.get("basis")
        ended = data.get("ended")
        grant = Grant(
            id=str(data["id"]), course=str(data["course"]), student=str(data["student"]),
            staff=str(data["staff"]), role=str(data["role"]),
            basis=cast(Basis, basis if basis in get_args(Basis) else "request"),
            started=float(data["started"]), expires=float(data["expires"]),
            message=str(data.get("message") or "")[:MESSAGE_MAX],
            staff_global_role=str(data.get("staff_global_role") or "student"),
            staff_teams=str(data.get("staff_teams") or ""),
            ended=None if ended is None else float(ended), ended_by=str(data.get("ended_by") or ""),
            end_reason=str(data.get("end_reason") or ""),
        )
    except (ValueError, TypeError, KeyError):
        return None
    if not (is_grant_id(grant.id) and naming.is_valid_dns_label(grant.course)
            and naming.is_valid_login(grant.student) and naming.is_valid_login(grant.staff)):
        return None
    return grant


@dataclass(frozen=True)
class HelpSettings:
    """A course's help settings, from its namespace's annotations."""

    staff_access: StaffAccess = "on-request"
    limit_seconds: int = DEFAULT_LIMIT_SECONDS
    # What was wrong with the annotations, in words for staff (the defaults apply instead).
    problems: tuple[str, ...] = ()


def help_settings(annotations: Mapping[str, Any] | None) -> HelpSettings:
    annotations = annotations or {}
    problems = []
    access_text = str(annotations.get(naming.ANNOTATION_STAFF_ACCESS) or "").strip().lower()
    access: StaffAccess = "on-request"
    if access_text in STAFF_ACCESS_VALUES:
        access = cast(StaffAccess, access_text)
    elif access_text:
        problems.append(f"{naming.ANNOTATION_STAFF_ACCESS} is {access_text[:40]!r}, which is not "
                        "on-request or instructors: staff open environments only when asked")
    limit = DEFAULT_LIMIT_SECONDS
    limit_text = str(annotations.get(naming.ANNOTATION_HELP_LIMIT) or "").strip()
    if limit_text:
        try:
            seconds = parse_duration(limit_text)
        except InvalidSpec:
            seconds = -1
        if MIN_LIMIT_SECONDS <= seconds <= MAX_LIMIT_SECONDS:
            limit = seconds
        else:
            problems.append(f"{naming.ANNOTATION_HELP_LIMIT} is {limit_text[:40]!r}, which is not a "
                            "duration between 5m and 8h: access lasts 1 h")
    return HelpSettings(staff_access=access, limit_seconds=limit, problems=tuple(problems))


def clean_message(text: str | None) -> str:
    """A student's message as one line of at most MESSAGE_MAX characters."""
    line = " ".join((text or "").split())
    return line[:MESSAGE_MAX]
