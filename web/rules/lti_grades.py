"""Grade passback for an Assignment linked to an LMS gradebook column. Pure, no I/O.

An Assignment is linked by its annotation `userland.dev/lti-line-item` (JSON: `registration`,
`context`: the LMS course link of its course it posts to; `scoreMaximum`: the points a full
grade is; optional `label`). Once staff return it (`spec.returnFeedback`), each student's grade
(`spec.grades`) is read as points (`8`, `8.5`, `8/10` scaled to the maximum, `85%`) and
posted as a Score (web/lti_grades.py, with platform/model/lti_services_passback.py's state
machine: once per value, again when it changes, retried with backoff while the LMS is down).

Each student's passback state lives in the Assignment's status, `status.lti`:
`{"lineItem": <URL>, "students": {<login>: {"state", "points", "sentPoints", "reason",
"attempts", "nextAt", "sentAt"}}}`. A grade that is not points, or a student the LMS does not
know (never in an LMS roster sync), is `failed` with the reason, without a request.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from userland.platform.model import naming
from userland.platform.model.assignments import Grade as AssignmentGrade
from userland.platform.model.lti_services_grades import Grade
from userland.platform.model.lti_services_passback import Passback
from userland.platform.model.models import parse_time
from userland.platform.model.objects import rfc3339

ANNOTATION_LINE_ITEM = naming.ANNOTATION_LTI_LINE_ITEM
_NUMBER = r"\d+(?:[.,]\d+)?"
_POINTS = re.compile(rf"^({_NUMBER})\s*(?:(/)\s*({_NUMBER})|(%))?$")


@dataclass(frozen=True)
class LineItemLink:
    registration: str
    context: str
    score_maximum: float
    label: str = ""


def parse_link(annotation: object) -> LineItemLink | None:
    if not isinstance(annotation, str):
        return None
    try:
        raw = json.loads(annotation)
        maximum = float(raw["scoreMaximum"])
        registration, context = raw["registration"], raw["context"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (isinstance(registration, str) and isinstance(context, str) and registration and context):
        return None
    if not math.isfinite(maximum) or maximum <= 0:
        return None
    label = raw.get("label")
    return LineItemLink(registration, context, maximum, label if isinstance(label, str) else "")


def points(text: str, maximum: float) -> tuple[float | None, str]:
    """The points a grade written by staff gives, or None and why (in staff's words)."""
    match = _POINTS.fullmatch(text.strip())
    if match is None:
        return None, (f"The grade {text!r} is not points: write a number such as {maximum:g}, "
                      f"{maximum:g}/{maximum:g} or 100%.")
    value = float(match[1].replace(",", "."))
    if match[2]:
        out_of = float(match[3].replace(",", "."))
        if out_of <= 0:
            return None, f"The grade {text!r} is out of nothing."
        value = value / out_of * maximum
    elif match[4]:
        value = value / 100 * maximum
    return round(value, 4), ""


@dataclass(frozen=True)
class Wanted:
    grades: dict[str, Grade]  # LMS user id -> the Score to send
    users: dict[str, str]  # LMS user id -> login
    refused: dict[str, str]  # login -> why nothing is sent


def wanted(grades: Mapping[str, AssignmentGrade], people: Mapping[str, str], maximum: float) -> Wanted:
    """`grades`: login -> the grade staff wrote; `people`: login -> their LMS user id."""
    out: dict[str, Grade] = {}
    users: dict[str, str] = {}
    refused: dict[str, str] = {}
    for login, grade in sorted(grades.items()):
        if not grade.grade:
            continue
        given, why = points(grade.grade, maximum)
        user = people.get(login)
        if given is None:
            refused[login] = why
        elif user is None:
            refused[login] = ("The LMS does not know this student: they were never in a roster sync "
                              "of this course's LMS course.")
        else:
            out[user] = Grade(given=given, maximum=maximum, comment=grade.comment[:1000])
            users[user] = login
    return Wanted(out, users, refused)


def _stamp(when: datetime | None) -> str | None:
    return rfc3339(when) if when is not None else None


def state_json(state: Passback) -> dict[str, Any]:
    return {"state": state.state, "points": state.value.given, "maximum": state.value.maximum,
            "comment": state.value.comment,
            "sentPoints": state.sent.given if state.sent is not None else None,
            "attempts": state.attempts, "reason": state.reason,
            "nextAt": _stamp(state.next_at), "sentAt": _stamp(state.sent_at)}


def state_of(raw: Any) -> Passback | None:
    """A state as status.lti keeps it (None: unreadable, started afresh)."""
    if not isinstance(raw, dict) or raw.get("state") not in ("pending", "sent", "failed"):
        return None
    try:
        maximum = float(raw["maximum"])
        given = raw.get("points")
        value = Grade(given=None if given is None else float(given), maximum=maximum,
                      comment=str(raw.get("comment") or ""))
        sent_points = raw.get("sentPoints")
        sent = (Grade(given=float(sent_points), maximum=maximum, comment=value.comment)
                if sent_points is not None and raw["state"] == "sent" else
                Grade(given=float(sent_points), maximum=maximum) if sent_points is not None else None)
    except (KeyError, TypeError, ValueError):
        return None
    return Passback(state=raw["state"], value=value, sent=sent, attempts=int(raw.get("attempts") or 0),
                    next_at=parse_time(raw.get("nextAt")), reason=str(raw.get("reason") or ""),
                    sent_at=parse_time(raw.get("sentAt")))


def states_by_user(status: Mapping[str, Any], users: Mapping[str, str]) -> dict[str, Passback]:
    """The kept states, keyed by LMS user id (`users`: LMS user id -> login)."""
    kept = ((status.get("lti") or {}).get("students") or {}) if isinstance(status, Mapping) else {}
    found: dict[str, Passback] = {}
    for user, login in users.items():
        state = state_of(kept.get(login)) if isinstance(kept, dict) else None
        if state is not None:
            found[user] = state
    return found


def status_lti(line_item: str, states: Mapping[str, Passback], users: Mapping[str, str],
               refused: Mapping[str, str], now: datetime) -> dict[str, Any]:
    students: dict[str, Any] = {users[user]: state_json(state) for user, state in states.items()
                                if user in users}
    for login, why in refused.items():
        students[login] = {"state": "failed", "reason": why, "points": None, "sentPoints": None,
                           "attempts": 0, "nextAt": None, "sentAt": None}
    return {"lineItem": line_item, "updated": rfc3339(now), "students": dict(sorted(students.items()))}


def summary(status: Mapping[str, Any]) -> dict[str, int]:
    """How many students are sent, pending, failed (for the Assignment's page)."""
    counts = {"sent": 0, "pending": 0, "failed": 0}
    students = ((status.get("lti") or {}).get("students") or {}) if isinstance(status, Mapping) else {}
    for entry in students.values() if isinstance(students, dict) else ():
        state = entry.get("state") if isinstance(entry, dict) else None
        if state in counts:
            counts[state] += 1
    return counts
