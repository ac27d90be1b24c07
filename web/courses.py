"""Courses and who may do what in them: pure rules over namespaces and signed identities.

A course is a namespace labelled `userland.dev/course: "true"`. Its staff are named on it,
GitOps-friendly, in two annotations of comma-separated GitHub logins or `org/team` entries:
`userland.dev/instructors` and `userland.dev/assistants`. On top of that, the gateway's
global roles: an `admin` (USERLAND_ADMINS) manages every course, an `instructor`
(USERLAND_INSTRUCTORS) teaches every course. Everyone else sees only their own environments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from userland.platform import naming
from userland.platform.identity import Identity

CourseRole = Literal["admin", "instructor", "assistant"]
Action = Literal["view", "start", "restart", "suspend", "resume", "add", "remove",
                 "start_all", "suspend_all", "remove_all", "audit", "assign", "grade", "download"]

# What each course role may do. Assistants help in class: they see the course and get
# environments going again, but the roster (add/remove) and course-wide actions are the
# instructor's. With assignments they grade (download students' copies, write grades and
# feedback); creating, handing out, collecting, extending and returning ("assign") is the
# instructor's.
PERMISSIONS: Mapping[CourseRole, frozenset[str]] = {
    "admin": frozenset(Action.__args__),  # type: ignore[attr-defined]
    "instructor": frozenset(Action.__args__),  # type: ignore[attr-defined]
    "assistant": frozenset({"view", "start", "restart", "audit", "grade", "download"}),
}


def _entries(text: str | None) -> frozenset[str]:
    return frozenset(e.strip().lower().lstrip("@") for e in (text or "").replace("\n", ",").split(",")
                     if e.strip())


@dataclass(frozen=True)
class Course:
    namespace: str
    title: str
    instructors: frozenset[str] = frozenset()
    assistants: frozenset[str] = frozenset()

    @classmethod
    def from_namespace(cls, obj: Mapping[str, Any]) -> Course:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        name = str(meta.get("name") or "")
        return cls(namespace=name, title=str(annotations.get(naming.ANNOTATION_COURSE_TITLE) or name),
                   instructors=_entries(annotations.get(naming.ANNOTATION_INSTRUCTORS)),
                   assistants=_entries(annotations.get(naming.ANNOTATION_ASSISTANTS)))


def _named(entries: Iterable[str], who: Identity) -> bool:
    teams = set(who.teams)
    return any(entry in teams if "/" in entry else entry == who.login for entry in entries)


def course_role(who: Identity, course: Course) -> CourseRole | None:
    """The identity's role in `course`, strongest first; None: not staff (maybe a student)."""
    if who.role == "admin":
        return "admin"
    if who.role == "instructor" or _named(course.instructors, who):
        return "instructor"
    if _named(course.assistants, who):
        return "assistant"
    return None


def may(role: CourseRole | None, action: Action) -> bool:
    return role is not None and action in PERMISSIONS[role]
