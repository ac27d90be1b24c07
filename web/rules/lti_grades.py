"""Grade passback for an Assignment linked to an LMS gradebook column. Pure, no I/O.

An Assignment is linked by its annotation `userland.dev/lti-line-item` (JSON: `registration`,
`context`: the LMS course link of its course it posts to; `scoreMaximum`: the points a full
grade is; optional `label`). Once staff return it (`spec.returnFeedback`), each student's grade
(`spec.grades`) is read as points (`8`, `8.5`, `8/10` scaled to the maximum, `85%`) and
posted as a Score (web/lti_grades.py, with platform/model/lti_services_passback.py's state
machine: once per value, again when it changes, retried with backoff while the LMS is down).

A student's score from the grader (docs/grading.md: their status entry's `grading`, state
`Graded`) is their grade when staff wrote none (`grades_with_autograde`): `7/10` of the grader's
maximum, scaled to the column's, with the tests' summary as the comment ("Graded automatically:
7/10. 3 of 4 tests passed.", counting only the tests the student is shown once the results are
returned, never a hidden one); a grade staff wrote wins. A regrade that gives the same score posts
nothing; one that changes it posts again. While a student's copy is being graded again (no score
for a moment), the state of what the LMS has is kept, so the same score coming back is not posted
twice.

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
from userland.platform.model.gradescope import score_words
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


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def autograde_comment(entry: Mapping[str, Any], words: str) -> str:
    """The gradebook's comment for a grader's score (`entry`: a status entry's `grading`)."""
    shown, good = entry.get("shown"), entry.get("passed")
    text = f"Graded automatically: {words}."
    if isinstance(shown, int) and isinstance(good, int) and shown > 0:
        text += f" {good} of {shown} test{'' if shown == 1 else 's'} passed."
    return text


def autogrades(status: Mapping[str, Any]) -> dict[str, AssignmentGrade]:
    """login -> the grade in words (`7/10` of the grader's maximum) and the gradebook's comment, of
    each student the grader graded (their first environment by template when they have several)."""
    grading = status.get("grading") if isinstance(status, Mapping) else None
    maximum = _number((grading or {}).get("maxScore")) if isinstance(grading, Mapping) else None
    found: dict[str, AssignmentGrade] = {}
    if maximum is None or maximum <= 0:
        return found
    entries = [e for e in status.get("students") or [] if isinstance(e, dict)]
    for entry in sorted(entries, key=lambda e: (str(e.get("user")), str(e.get("template")))):
        login, graded = str(entry.get("user") or ""), entry.get("grading")
        if not login or login in found or not isinstance(graded, dict) or graded.get("state") != "Graded":
            continue
        score = _number(graded.get("score"))
        if score is not None:
            words = score_words(score, maximum)
            found[login] = AssignmentGrade(words, autograde_comment(graded, words))
    return found


def grades_with_autograde(grades: Mapping[str, AssignmentGrade],
                          status: Mapping[str, Any]) -> dict[str, AssignmentGrade]:
    """Staff's grades, and the grader's score for each student staff gave no grade (a grade
    written by hand wins; a comment staff wrote with no grade goes after the tests' summary)."""
    merged = dict(grades)
    for login, auto in autogrades(status).items():
        staff = merged.get(login, AssignmentGrade())
        if not staff.grade:
            note = f"{auto.comment}\n\n{staff.comment}" if staff.comment else auto.comment
            merged[login] = AssignmentGrade(auto.grade, note)
    return merged


def autograde_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether a change of an Assignment (as the web UI's watch sees it) gives a returned
    Assignment a new grader's score or summary: its passback should run now. A score going away
    for a moment (the copy being graded again) is not one: nothing would be posted."""
    if old is None or new is None or not (new.get("spec") or {}).get("returnFeedback"):
        return False
    before = autogrades(old.get("status") or {})
    return any(before.get(login) != grade for login, grade in autogrades(new.get("status") or {}).items())


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
