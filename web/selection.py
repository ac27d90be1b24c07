"""What an action applies to, and what a teacher must be told first: pure rules, no I/O.

The actions form posts Userland names (or `scope=all` with the dashboard's filter); this
module turns that into the Userlands of *this* course it names (anything else is "missing",
never looked up elsewhere), decides which actions need a confirmation page, and words what
happens to each student's files per the Template's `storage.reclaimPolicy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from userland.platform import naming
from userland.web.courses import Action, Course

JSON = dict[str, Any]

CourseAction = Literal["restart", "suspend", "resume", "start", "remove"]
COURSE_ACTIONS: tuple[CourseAction, ...] = ("start", "restart", "suspend", "resume", "remove")
# The dashboard's phase filter (web/dashboard.py PHASE_FILTERS): its query value -> status.phase.
PHASE_FILTERS = {"ready": "Ready", "starting": "Starting", "waiting": "Pending", "failed": "Failed",
                 "suspended": "Suspended", "asleep": "Idle"}
MAX_TARGETS = 5000  # more names than any course has: a bigger form is not ours

ANNOTATION_NAME = "userland.dev/name"
ANNOTATION_EMAIL = "userland.dev/email"
ANNOTATION_SECTION = "userland.dev/section"

# Words for the teacher, one per action outcome (web/actions.py `Outcome`).
OUTCOME_WORDS: Mapping[str, str] = {
    "created": "Created",
    "exists": "Already there",
    "invalid": "Invalid",
    "not_allowed": "Not allowed",
    "removed": "Removed",
    "missing": "Not found",
    "restarted": "Restarted",
    "suspended": "Suspended",
    "resumed": "Resumed",
    "started": "Started",
    "unchanged": "No change needed",
    "error": "Error",
}
ACTION_WORDS: Mapping[str, tuple[str, str]] = {
    # action: (button / heading verb, past tense for the audit log)
    "start": ("Start", "started"),
    "restart": ("Restart", "restarted"),
    "suspend": ("Suspend", "suspended"),
    "resume": ("Resume", "resumed"),
    "remove": ("Remove", "removed"),
    "add": ("Add", "added"),
}

STORAGE_RETAIN = "Their files are kept and come back if you add them again."
STORAGE_DELETE = "Their files are deleted for good."
STORAGE_NONE = "This environment keeps no files: anything saved in it is lost."
STORAGE_UNKNOWN = "The environment's Template is missing, so what happens to the files is unknown."
SUSPEND_KEEPS = "Suspending stops the environment; their files are kept, and resuming brings it back."


def parse_action(text: str) -> CourseAction | None:
    return text if text in COURSE_ACTIONS else None  # type: ignore[return-value]


def permission_for(action: CourseAction, whole_course: bool) -> Action:
    """The course permission (web/courses.py) an action needs; course-wide runs need more.

    Course-wide runs are the instructor's (assistants help one student at a time); restarting
    everyone disrupts a class like starting everyone does, so it needs `start_all` too.
    """
    if whole_course:
        return {"start": "start_all", "resume": "start_all", "suspend": "suspend_all",
                "remove": "remove_all", "restart": "start_all"}[action]  # type: ignore[return-value]
    return action


def needs_confirmation(action: CourseAction, count: int) -> bool:
    """Remove always asks first; suspending more than one environment too (it stops a class)."""
    return action == "remove" or (action == "suspend" and count > 1)


def typed_name_matches(typed: str, course: Course) -> bool:
    """The course name typed to confirm removing a whole course (namespace or title)."""
    text = " ".join(typed.split()).casefold()
    return bool(text) and text in (course.namespace.casefold(), " ".join(course.title.split()).casefold())


def storage_sentence(template: JSON | None, action: CourseAction = "remove") -> str:
    if action == "suspend":
        return SUSPEND_KEEPS
    if template is None:
        return STORAGE_UNKNOWN
    storage = (template.get("spec") or {}).get("storage")
    if not isinstance(storage, dict):
        return STORAGE_NONE
    return STORAGE_DELETE if storage.get("reclaimPolicy") == "Delete" else STORAGE_RETAIN


@dataclass(frozen=True)
class Target:
    """One Userland an action would touch, with what the pages show about it."""

    name: str
    login: str
    template: str
    phase: str
    display_name: str = ""
    section: str = ""


def target_of(obj: JSON) -> Target:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return Target(name=str(meta.get("name") or ""), login=naming.login_of(spec.get("user")),
                  template=str(spec.get("template") or ""),
                  phase=str((obj.get("status") or {}).get("phase") or "Pending"),
                  display_name=str(annotations.get(ANNOTATION_NAME) or ""),
                  section=str(annotations.get(ANNOTATION_SECTION) or ""))


def student_details(userlands: Iterable[JSON]) -> dict[str, str]:
    """login -> "name email section" from any of the student's Userlands (the dashboard's rule:
    the first non-empty value of each wins), for the search."""
    details: dict[str, dict[str, str]] = {}
    for obj in userlands:
        login = naming.login_of((obj.get("spec") or {}).get("user"))
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        found = details.setdefault(login, {})
        for key in (ANNOTATION_NAME, ANNOTATION_EMAIL, ANNOTATION_SECTION):
            if annotations.get(key) and key not in found:
                found[key] = str(annotations[key])
    return {login: " ".join(found.values()) for login, found in details.items()}


def matches_filter(obj: JSON, q: str, phase: str, details: str = "") -> bool:
    """The dashboard's filter (web/dashboard.py Query.matches), per environment: every search
    word in the student's login, name, email or section (`details`), the Template or the
    environment's name, and the filtered phase (so "restart all failed" leaves a failed
    student's healthy environments alone). An unknown phase value filters nothing, as there."""
    target = target_of(obj)
    wanted = PHASE_FILTERS.get(phase.strip().lower())
    if wanted is not None and target.phase != wanted:
        return False
    words = q.casefold().split()
    haystack = f"{target.login} {details} {target.template} {target.name}".casefold()
    return all(word in haystack for word in words)


@dataclass(frozen=True)
class Selection:
    targets: tuple[Target, ...]
    missing: tuple[str, ...]  # names asked for that are not Userlands of this course


def select(userlands: Iterable[JSON], *, names: Sequence[str] = (), whole_course: bool = False,
           q: str = "", phase: str = "") -> Selection:
    """The course's Userlands an action names: by name, or all of them (filtered).

    Only objects of the course namespace's own list are candidates, so a name from another
    course (or a made-up one) can never be acted on: it comes back as missing.
    """
    userlands = list(userlands)
    by_name: dict[str, JSON] = {}
    for obj in userlands:
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue  # already on its way out: nothing to start, restart or remove
        by_name[str(meta.get("name") or "")] = obj
    if whole_course:
        details = student_details(userlands)
        chosen = [obj for obj in by_name.values()
                  if matches_filter(obj, q, phase, details.get(target_of(obj).login, ""))]
        targets = tuple(sorted((target_of(obj) for obj in chosen), key=lambda t: (t.login, t.template)))
        return Selection(targets=targets, missing=())
    seen: set[str] = set()
    found: list[Target] = []
    missing: list[str] = []
    for name in names:
        name = name.strip()
        if not name or name in seen:
            continue
        seen.add(name)
        found_obj = by_name.get(name) if naming.is_valid_dns_label(name) else None
        if found_obj is None:
            missing.append(name[:80])
        else:
            found.append(target_of(found_obj))
    return Selection(targets=tuple(found), missing=tuple(missing))


@dataclass(frozen=True)
class StorageGroup:
    template: str
    title: str
    sentence: str
    targets: tuple[Target, ...]


def storage_groups(targets: Sequence[Target], templates: Mapping[str, JSON],
                   action: CourseAction) -> list[StorageGroup]:
    """Targets grouped by Template, each group with what happens to its students' files."""
    groups: dict[str, list[Target]] = {}
    for target in targets:
        groups.setdefault(target.template, []).append(target)
    result = []
    for name in sorted(groups):
        template = templates.get(name)
        title = str(((template or {}).get("spec") or {}).get("displayName") or name)
        result.append(StorageGroup(template=name, title=title, sentence=storage_sentence(template, action),
                                   targets=tuple(groups[name])))
    return result
