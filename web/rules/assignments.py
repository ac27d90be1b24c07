"""What the web UI shows of Assignments, and the form that writes them (pure; no I/O).

From the cached Assignment objects (their spec and the operator's status): the course's list
(title, release, due, handed out n/N, collected n/N), the live table of every student, one
student's page, the grades as CSV rows, and a student's own view for /me (their deadline, what
they got, and after collection a receipt: "collected at 23:59, 14 files, 1.2 MB, receipt 3f2a9c01").
The form's fields become an Assignment spec here (checked by the very model the operator uses),
with times read in the teacher's time zone. Every word is for people: no Kubernetes terms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from userland.platform.model import naming
from userland.platform.model.assignments import CONFLICT_WORDS, AssignmentSpec
from userland.platform.model.coursework import receipt_words, size_words
from userland.platform.model.models import InvalidSpec, parse_time
from userland.web.rules.grading import CheckLine, GradingRow, check_line, grading_row

JSON = dict[str, Any]

STATE_WORDS = {
    "Scheduled": "Not released yet", "Waiting": "Waiting for their storage", "Pending": "Being handed out",
    "HandedOut": "Handed out", "Conflicts": "Handed out, some files kept as theirs",
    "Failed": "Could not be handed out", "NoEnvironment": "No environment",
}
# What a student reads of their own hand-out: never a state that blames them, never "being
# handed out" when it is not (a repository that cannot be read, their storage full).
MY_STATE_WORDS = {
    "Scheduled": "Not released yet", "HandedOut": "In your folder", "Conflicts": "In your folder",
    "Failed": "Not available yet: your teacher has been told",
}
STATE_BADGES = {
    "Scheduled": "phase-idle", "Waiting": "phase-starting", "Pending": "phase-starting",
    "HandedOut": "phase-ready", "Conflicts": "phase-ready", "Failed": "phase-failed",
    "NoEnvironment": "phase-failed",
}
PHASE_WORDS = {"Scheduled": "Scheduled", "HandingOut": "Handing out", "Open": "Open",
               "Collecting": "Collecting", "Collected": "Collected", "Failed": "Needs attention", "": "New"}
PHASE_BADGES = {"Scheduled": "phase-idle", "HandingOut": "phase-starting", "Open": "phase-ready",
                "Collecting": "phase-starting", "Collected": "phase-ready", "Failed": "phase-failed",
                "": "phase-starting"}
# For students: what each conflict means to them ("you", not "the student").
STUDENT_CONFLICT_WORDS = {
    "changed": "you changed it and your teacher updated it: your version was kept",
    "deleted": "you deleted it and your teacher updated it: it was not put back",
    "exists": "you have your own file with this name: yours was kept",
    "blocked": "something of yours is where it would go: it was not handed out",
    "kept": "your teacher removed it, but you had changed it: it stays",
}
MAX_NAME = 40


def when(text: Any) -> str:
    """`2026-12-07T23:59:00Z` -> `Mon 7 Dec 2026, 23:59 UTC` (pages turn it into local time)."""
    moment = parse_time(text) if isinstance(text, str) else None
    if moment is None:
        return ""
    moment = moment.astimezone(UTC)
    return f"{moment:%a} {moment.day} {moment:%b %Y}, {moment:%H:%M} UTC"


def phase_words(status: JSON) -> tuple[str, str]:
    """(words, badge) of an assignment's phase; a collection with empty copies is never green."""
    phase = str(status.get("phase") or "")
    empty = int(status.get("emptyCopies") or 0)
    if empty and phase in ("Collected", "Open"):
        return f"{PHASE_WORDS.get(phase, phase)}, {empty} empty", "phase-starting"
    return PHASE_WORDS.get(phase, phase), PHASE_BADGES.get(phase, "phase-idle")


def _ready(status: JSON) -> JSON:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


@dataclass(frozen=True)
class ListRow:
    name: str
    title: str
    release: str
    due: str
    handed_out: str
    collected: str
    phase: str
    phase_words: str
    badge: str
    message: str
    ready: bool


def list_rows(objects: Iterable[JSON]) -> list[ListRow]:
    rows = []
    for obj in objects:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        phase = str(status.get("phase") or "")
        ready = _ready(status)
        words, badge = phase_words(status)
        rows.append(ListRow(
            name=str(meta.get("name") or ""), title=str(spec.get("title") or meta.get("name") or ""),
            release=str(spec.get("release") or ""), due=str(spec.get("due") or ""),
            handed_out=str(status.get("handedOut") or ""), collected=str(status.get("collected") or ""),
            phase=phase, phase_words=words, badge=badge,
            message=teacher_words(str(ready.get("message") or "")), ready=ready.get("status") == "True"))
    return sorted(rows, key=lambda r: (r.due or "9999", r.title.lower(), r.name))


def minutes_words(seconds: int) -> str:
    """`3 minutes`, `1 hour 5 minutes`, `2 days`: how late the platform was, in words."""
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return f"{minutes} minute{'' if minutes == 1 else 's'}"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        text = f"{hours} hour{'' if hours == 1 else 's'}"
        return text + (f" {minutes} minute{'' if minutes == 1 else 's'}" if minutes else "")
    return f"{hours // 24} days"


def timing_words(late_seconds: int, past_due: bool, *, student: bool) -> str:
    """Why a copy was not taken at its moment, as the platform's doing (never the student's):
    "" when it was."""
    if past_due:
        return ("" if student else "taken as soon as the student had the files: the due date had "
                "already passed when the assignment was made")
    if late_seconds <= 0:
        return ""
    late = minutes_words(late_seconds)
    if student:
        return (f"It was copied {late} after your deadline because the platform was busy; anything you "
                "changed in that time is in the copy.")
    return (f"copied {late} after the deadline because the platform was busy (or still handing out the "
            "files): changes made in that time are in it")


# The Assignment's field names in the operator's messages, as the form calls them (a teacher
# never reads "spec.source.ref"; kubectl users still do, in `kubectl describe`).
_MESSAGE_FIELDS = {
    "spec.source.tokenSecret": "the token Secret (in the assignment's settings)",
    "spec.source.subPath": "the folder of the repository (in the assignment's settings)",
    "spec.source.ref": "the branch or tag (in the assignment's settings)",
    "spec.source.url": "the repository's address (in the assignment's settings)",
    "spec.students": "the student list", "spec.templates": "the environments",
    "spec.release": "the release", "spec.due": "the due date", "spec.path": "the folder in students' storage",
    "spec.title": "the title",
}


def teacher_words(message: str) -> str:
    """An operator's message with the Assignment's field names in the form's words."""
    for key in sorted(_MESSAGE_FIELDS, key=len, reverse=True):
        message = message.replace(key + ".name", key).replace(key, _MESSAGE_FIELDS[key])
    return message


@dataclass(frozen=True)
class Copy:
    round: str
    taken_at: str
    files: int
    bytes: int
    sha256: str
    late: bool
    late_seconds: int = 0
    past_due: bool = False

    @property
    def empty(self) -> bool:
        """A copy of no files: never shown as success."""
        return self.files == 0

    def timing(self, *, student: bool = False) -> str:
        return timing_words(self.late_seconds if self.late else 0, self.past_due, student=student)

    @property
    def size(self) -> str:
        return size_words(self.bytes)

    @property
    def receipt(self) -> str:
        return self.sha256[:8]

    def details(self) -> str:
        """`14 files, 1.2 MB, receipt 3f2a9c01` (the pages put the time before it, as a <time>)."""
        return receipt_words({"files": self.files, "bytes": self.bytes, "sha256": self.sha256})


@dataclass(frozen=True)
class StudentView:
    login: str
    template: str
    template_title: str
    state: str
    state_words: str
    badge: str
    reason: str = ""
    commit: str = ""
    conflicts: tuple[tuple[str, str, str], ...] = ()  # (path, kind, words)
    conflict_count: int = 0
    deadline: str = ""
    extended: bool = False
    copy: Copy | None = None
    collect_reason: str = ""
    collecting: bool = False
    grade: str = ""
    comment: str = ""
    feedback_returned: str = ""
    feedback_reason: str = ""
    grading: GradingRow | None = None  # with a grader (docs/grading.md)
    check: CheckLine | None = None  # the student's last Check my work

    @property
    def key(self) -> str:
        return f"{self.template}/{self.login}"


def student_views(obj: JSON, templates: Mapping[str, JSON]) -> list[StudentView]:
    """One per student's environment in the status (and one per listed student without one)."""
    spec = obj.get("spec") or {}
    grades = spec.get("grades") or {}
    views = []
    status = obj.get("status") or {}
    failed = status.get("phase") == "Failed"
    problem = teacher_words(str(_ready(status).get("message") or ""))
    most = (status.get("grading") or {}).get("maxScore")
    max_score = float(most) if isinstance(most, int | float) and not isinstance(most, bool) else None
    for entry in status.get("students") or []:
        if not isinstance(entry, dict):
            continue
        login, template = str(entry.get("user") or ""), str(entry.get("template") or "")
        state = str(entry.get("state") or "Pending")
        reason = teacher_words(str(entry.get("reason") or ""))
        if state == "Pending" and failed:
            # Written by an operator before per-student states followed the assignment's failure.
            state, reason = "Failed", reason or f"the repository cannot be read: {problem}"
        collected = entry.get("collected") or None
        copy = Copy(round=str(collected.get("round") or ""), taken_at=str(collected.get("takenAt") or ""),
                    files=int(collected.get("files") or 0), bytes=int(collected.get("bytes") or 0),
                    sha256=str(collected.get("sha256") or ""), late=bool(collected.get("late")),
                    late_seconds=int(collected.get("lateSeconds") or 0),
                    past_due=bool(collected.get("pastDue"))) \
            if isinstance(collected, dict) else None
        grade = grades.get(login) or {}
        title = str(((templates.get(template) or {}).get("spec") or {}).get("displayName") or template)
        views.append(StudentView(
            login=login, template=template, template_title=title, state=state,
            state_words=STATE_WORDS.get(state, state), badge=STATE_BADGES.get(state, "phase-idle"),
            reason=reason, commit=str(entry.get("commit") or ""),
            conflicts=tuple((str(c.get("path")), str(c.get("kind")), CONFLICT_WORDS.get(str(c.get("kind")),
                                                                                        ""))
                            for c in entry.get("conflicts") or [] if isinstance(c, dict)),
            conflict_count=int(entry.get("conflictCount") or 0), deadline=str(entry.get("deadline") or ""),
            extended=bool(entry.get("extended")), copy=copy,
            collect_reason=str(entry.get("collectReason") or ""),
            collecting=bool(entry.get("collecting")), grade=str(grade.get("grade") or ""),
            comment=str(grade.get("comment") or ""),
            feedback_returned=str(entry.get("feedbackReturnedAt") or ""),
            feedback_reason=str(entry.get("feedbackReason") or ""),
            grading=grading_row(entry.get("grading"), max_score),
            check=check_line(spec, entry)))
    return sorted(views, key=lambda v: (v.login, v.template))


def csv_rows(obj: JSON, templates: Mapping[str, JSON]) -> list[list[str]]:
    """The grades and copies as a spreadsheet: one row per student's environment."""
    rows = [["login", "environment", "handed out", "collected at", "files", "bytes", "receipt sha256",
             "late", "grade", "comment", "autograded"]]
    for view in student_views(obj, templates):
        copy = view.copy
        rows.append([view.login, view.template_title, view.state_words, copy.taken_at if copy else "",
                     str(copy.files) if copy else "", str(copy.bytes) if copy else "",
                     copy.sha256 if copy else "", "yes" if copy and copy.late else "", view.grade,
                     view.comment, _autograded(view.grading)])
    return rows


def _autograded(row: GradingRow | None) -> str:
    if row is None:
        return ""
    return row.score if row.state == "Graded" else f"{row.words}: {row.reason}" if row.reason else row.words


def csv_safe(cell: str) -> str:
    """A cell a spreadsheet never runs as a formula (a comment starting with = is text)."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


@dataclass(frozen=True)
class MyAssignment:
    """What a student sees of one assignment in one of their environments."""

    title: str
    template_title: str
    deadline: str
    extended: bool
    state: str
    state_words: str
    badge: str
    path: str
    conflicts: tuple[tuple[str, str], ...]
    receipt: str = ""  # the copy's details (files, size, receipt), taken at `taken_at`
    taken_at: str = ""
    late: bool = False
    timing: str = ""  # why the copy was not taken at the deadline (the platform's words), if so
    empty: bool = False
    collect_reason: str = ""
    grade: str = ""
    comment: str = ""
    feedback: bool = False
    # With a grader: the Assignment's name and the environment, for the link to the results.
    name: str = ""
    template: str = ""
    graded: str = ""  # queued, being graded, graded, not graded
    check: CheckLine | None = None  # Check my work: whether it may be asked now, the last one


def my_assignments(objects: Iterable[JSON], login: str, templates: Mapping[str, JSON]) -> list[MyAssignment]:
    found = []
    for obj in objects:
        spec = obj.get("spec") or {}
        for view in student_views(obj, templates):
            if view.login != login or view.state == "NoEnvironment":
                continue
            returned = bool(view.feedback_returned) and bool(spec.get("returnFeedback"))
            found.append(MyAssignment(
                title=str(spec.get("title") or ""), template_title=view.template_title,
                deadline=view.deadline, extended=view.extended, state=view.state,
                state_words=MY_STATE_WORDS.get(view.state, view.state_words),
                # Amber, not red: nothing for the student to fix (their teacher has been told).
                badge="phase-starting" if view.state == "Failed" else view.badge,
                path=str(spec.get("path") or ""),
                conflicts=tuple((p, STUDENT_CONFLICT_WORDS.get(k, w)) for p, k, w in view.conflicts),
                receipt=view.copy.details() if view.copy else "",
                taken_at=view.copy.taken_at if view.copy else "",
                late=bool(view.copy and view.copy.late),
                timing=view.copy.timing(student=True) if view.copy else "",
                empty=bool(view.copy and view.copy.empty),
                collect_reason=view.collect_reason, grade=view.grade if returned else "",
                comment=view.comment if returned else "", feedback=returned,
                name=str((obj.get("metadata") or {}).get("name") or ""), template=view.template,
                graded=view.grading.words if view.grading is not None else "", check=view.check))
    return sorted(found, key=lambda m: (m.deadline or "9999", m.title))


# ----- the form -----

@dataclass
class Form:
    name: str = ""
    title: str = ""
    templates: list[str] = field(default_factory=list)
    url: str = ""
    ref: str = ""
    sub_path: str = ""
    secret: str = ""
    path: str = ""
    release: str = ""  # datetime-local, in `zone`
    due: str = ""
    zone: str = "UTC"
    students: str = ""
    # "Collect what they have now": a due date in the past is meant (docs/decisions.md).
    collect_past: bool = False

    @classmethod
    def from_spec(cls, name: str, spec: JSON, zone: str = "UTC") -> Form:
        source = spec.get("source") or {}
        return cls(name=name, title=str(spec.get("title") or ""), templates=list(spec.get("templates") or []),
                   url=str(source.get("url") or ""), ref=str(source.get("ref") or ""),
                   sub_path=str(source.get("subPath") or ""),
                   secret=str((source.get("tokenSecret") or {}).get("name") or ""),
                   path=str(spec.get("path") or ""),
                   release=local_input(spec.get("release"), zone), due=local_input(spec.get("due"), zone),
                   zone=zone, students="\n".join(spec.get("students") or []))


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise FormProblem(f"{name[:60]!r} is not a time zone: reload the page") from None


class FormProblem(ValueError):
    """What to change in the form (one sentence)."""


class PastDue(FormProblem):
    """The due date is in the past and "collect what they have now" is not ticked."""


def local_input(text: Any, zone: str) -> str:
    """An RFC 3339 time as a datetime-local value in `zone` (`2026-12-07T23:59`)."""
    moment = parse_time(text) if isinstance(text, str) else None
    if moment is None:
        return ""
    try:
        return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")
    except (ZoneInfoNotFoundError, ValueError):
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def rfc3339_from_input(text: str, zone: str, what: str) -> str | None:
    text = text.strip()
    if not text:
        return None
    try:
        local = datetime.strptime(text[:16], "%Y-%m-%dT%H:%M")
    except ValueError:
        raise FormProblem(f"The {what} {text[:30]!r} is not a date and time.") from None
    aware = local.replace(tzinfo=_zone(zone))
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slug(title: str) -> str:
    """A short name for addresses from a title: `Week 1: Python basics` -> `week-1-python-basics`."""
    text = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:MAX_NAME].strip("-")
    return text or "assignment"


def spec_from_form(form: Form, course_templates: Iterable[str], *, now: datetime | None = None,
                   current_due: Any = None) -> JSON:
    """The Assignment's spec from the form; FormProblem in words when it cannot be one.

    With `now`, a due date at or before it is refused (PastDue) unless the form says "collect
    what they have now": every copy would be taken at once. An edit that keeps the due date it
    had (`current_due`) is never refused for it, past or not."""
    available = set(course_templates)
    if not form.templates:
        raise FormProblem("Choose the environments (at least one) whose students receive it.")
    unknown = [t for t in form.templates if t not in available]
    if unknown:
        raise FormProblem(f"This course has no environment {unknown[0][:63]!r}: reload the page and "
                          "choose again.")
    students = [s.strip().lstrip("@") for s in re.split(r"[\s,;]+", form.students) if s.strip()]
    source: JSON = {"url": form.url.strip(), "ref": form.ref.strip()}
    if form.sub_path.strip():
        source["subPath"] = form.sub_path.strip()
    if form.secret.strip():
        source["tokenSecret"] = {"name": form.secret.strip()}
    spec: JSON = {"title": form.title.strip(), "templates": form.templates, "source": source,
                  "path": form.path.strip()}
    for key, text, what in (("release", form.release, "release"), ("due", form.due, "due date")):
        value = rfc3339_from_input(text, form.zone, what)
        if value is not None:
            spec[key] = value
    if students:
        spec["students"] = students
    try:
        AssignmentSpec.parse(spec)
    except InvalidSpec as err:
        raise FormProblem(_form_words(str(err))) from None
    due = parse_time(spec.get("due"))
    if now is not None and due is not None and due <= now and not form.collect_past and \
            due != parse_time(current_due if isinstance(current_due, str) else None):
        typed = form.due.strip().replace("T", " ")
        raise PastDue(f"The due date {typed} is in the past: every student's copy would be taken at once, "
                      "as soon as they have the files. Choose a later due date, or tick \u201cCollect what "
                      "they have now\u201d below and save again.")
    return spec


# The model's field names, as the form calls them.
_FIELDS = {"spec.title": "The title", "spec.source.url": "The repository address",
           "spec.source.ref": "The branch or tag", "spec.source.subPath": "The folder in the repository",
           "spec.source.tokenSecret": "The token Secret", "spec.path": "The folder in students' storage",
           "spec.release": "The release", "spec.due": "The due date", "spec.students": "The student list",
           "spec.templates": "The environments"}


def _form_words(message: str) -> str:
    for key in sorted(_FIELDS, key=len, reverse=True):
        if key in message:
            message = message.replace(key + ".name", _FIELDS[key]).replace(key, _FIELDS[key])
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def is_name(text: str) -> bool:
    return naming.is_valid_dns_label(text) and len(text) <= MAX_NAME
