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

from userland.platform import naming
from userland.platform.assignments import CONFLICT_WORDS, AssignmentSpec
from userland.platform.coursework import receipt_words, size_words
from userland.platform.models import InvalidSpec, parse_time

JSON = dict[str, Any]

STATE_WORDS = {
    "Scheduled": "Not released yet", "Waiting": "Waiting for their storage", "Pending": "Being handed out",
    "HandedOut": "Handed out", "Conflicts": "Handed out, some files kept as theirs",
    "Failed": "Could not be handed out", "NoEnvironment": "No environment",
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
        rows.append(ListRow(
            name=str(meta.get("name") or ""), title=str(spec.get("title") or meta.get("name") or ""),
            release=str(spec.get("release") or ""), due=str(spec.get("due") or ""),
            handed_out=str(status.get("handedOut") or ""), collected=str(status.get("collected") or ""),
            phase=phase, phase_words=PHASE_WORDS.get(phase, phase),
            badge=PHASE_BADGES.get(phase, "phase-idle"),
            message=str(ready.get("message") or ""), ready=ready.get("status") == "True"))
    return sorted(rows, key=lambda r: (r.due or "9999", r.title.lower(), r.name))


@dataclass(frozen=True)
class Copy:
    round: str
    taken_at: str
    files: int
    bytes: int
    sha256: str
    late: bool

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

    @property
    def key(self) -> str:
        return f"{self.template}/{self.login}"


def student_views(obj: JSON, templates: Mapping[str, JSON]) -> list[StudentView]:
    """One per student's environment in the status (and one per listed student without one)."""
    spec = obj.get("spec") or {}
    grades = spec.get("grades") or {}
    views = []
    for entry in (obj.get("status") or {}).get("students") or []:
        if not isinstance(entry, dict):
            continue
        login, template = str(entry.get("user") or ""), str(entry.get("template") or "")
        state = str(entry.get("state") or "Pending")
        collected = entry.get("collected") or None
        copy = Copy(round=str(collected.get("round") or ""), taken_at=str(collected.get("takenAt") or ""),
                    files=int(collected.get("files") or 0), bytes=int(collected.get("bytes") or 0),
                    sha256=str(collected.get("sha256") or ""), late=bool(collected.get("late"))) \
            if isinstance(collected, dict) else None
        grade = grades.get(login) or {}
        title = str(((templates.get(template) or {}).get("spec") or {}).get("displayName") or template)
        views.append(StudentView(
            login=login, template=template, template_title=title, state=state,
            state_words=STATE_WORDS.get(state, state), badge=STATE_BADGES.get(state, "phase-idle"),
            reason=str(entry.get("reason") or ""), commit=str(entry.get("commit") or ""),
            conflicts=tuple((str(c.get("path")), str(c.get("kind")), CONFLICT_WORDS.get(str(c.get("kind")),
                                                                                        ""))
                            for c in entry.get("conflicts") or [] if isinstance(c, dict)),
            conflict_count=int(entry.get("conflictCount") or 0), deadline=str(entry.get("deadline") or ""),
            extended=bool(entry.get("extended")), copy=copy,
            collect_reason=str(entry.get("collectReason") or ""),
            collecting=bool(entry.get("collecting")), grade=str(grade.get("grade") or ""),
            comment=str(grade.get("comment") or ""),
            feedback_returned=str(entry.get("feedbackReturnedAt") or ""),
            feedback_reason=str(entry.get("feedbackReason") or "")))
    return sorted(views, key=lambda v: (v.login, v.template))


def csv_rows(obj: JSON, templates: Mapping[str, JSON]) -> list[list[str]]:
    """The grades and copies as a spreadsheet: one row per student's environment."""
    rows = [["login", "environment", "handed out", "collected at", "files", "bytes", "receipt sha256",
             "late", "grade", "comment"]]
    for view in student_views(obj, templates):
        copy = view.copy
        rows.append([view.login, view.template_title, view.state_words, copy.taken_at if copy else "",
                     str(copy.files) if copy else "", str(copy.bytes) if copy else "",
                     copy.sha256 if copy else "", "yes" if copy and copy.late else "", view.grade,
                     view.comment])
    return rows


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
    collect_reason: str = ""
    grade: str = ""
    comment: str = ""
    feedback: bool = False


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
                state_words="Not released yet" if view.state == "Scheduled" else (
                    "In your folder" if view.state in ("HandedOut", "Conflicts") else view.state_words),
                badge=view.badge, path=str(spec.get("path") or ""),
                conflicts=tuple((p, STUDENT_CONFLICT_WORDS.get(k, w)) for p, k, w in view.conflicts),
                receipt=view.copy.details() if view.copy else "",
                taken_at=view.copy.taken_at if view.copy else "",
                late=bool(view.copy and view.copy.late),
                collect_reason=view.collect_reason, grade=view.grade if returned else "",
                comment=view.comment if returned else "", feedback=returned))
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


def spec_from_form(form: Form, course_templates: Iterable[str]) -> JSON:
    """The Assignment's spec from the form; FormProblem in words when it cannot be one."""
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
