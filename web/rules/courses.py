"""Courses and who may do what in them: pure rules over namespaces and signed identities.

A course is a namespace labelled `userland.dev/course: "true"`. Its staff are named on it,
GitOps-friendly, in two annotations of comma-separated GitHub logins or `org/team` entries:
`userland.dev/instructors` and `userland.dev/assistants` (and those an LMS made staff, in
`userland.dev/lti-instructors` / `lti-assistants`: platform/model/lti_links.py). On top of that, the gateway's
global roles: an `admin` (USERLAND_ADMINS) manages every course, an `instructor`
(USERLAND_INSTRUCTORS) teaches every course. Everyone else sees only their own environments.

Help in the lab (platform/model/grants.py): every member of staff may join a student who asked for
help; a course annotated `userland.dev/staff-access: instructors` also lets its instructors (and
admins) open any student's environments without being asked; assistants never may.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from userland.platform.model import naming
from userland.platform.model.grants import EndReason, Grant, HelpSettings, help_settings
from userland.platform.model.identity import Identity
from userland.platform.model.lti_links import ANNOTATION_LTI_ASSISTANTS, ANNOTATION_LTI_INSTRUCTORS

CourseRole = Literal["admin", "instructor", "assistant"]
Action = Literal["view", "start", "restart", "suspend", "resume", "add", "remove",
                 "start_all", "suspend_all", "remove_all", "audit", "assign", "grade", "download", "help"]

# What each course role may do. Assistants help in class: they see the course and get
# environments going again, but the roster (add/remove) and course-wide actions are the
# instructor's. With assignments they grade (download students' copies, write grades and
# feedback); creating, handing out, collecting, extending and returning ("assign") is the
# instructor's.
PERMISSIONS: Mapping[CourseRole, frozenset[str]] = {
    "admin": frozenset(Action.__args__),  # type: ignore[attr-defined]
    "instructor": frozenset(Action.__args__),  # type: ignore[attr-defined]
    "assistant": frozenset({"view", "start", "restart", "audit", "grade", "download", "help"}),
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
    help: HelpSettings = field(default_factory=HelpSettings)

    @classmethod
    def from_namespace(cls, obj: Mapping[str, Any]) -> Course:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        name = str(meta.get("name") or "")
        return cls(namespace=name, title=str(annotations.get(naming.ANNOTATION_COURSE_TITLE) or name),
                   instructors=_entries(annotations.get(naming.ANNOTATION_INSTRUCTORS))
                   | _entries(annotations.get(ANNOTATION_LTI_INSTRUCTORS)),
                   assistants=_entries(annotations.get(naming.ANNOTATION_ASSISTANTS))
                   | _entries(annotations.get(ANNOTATION_LTI_ASSISTANTS)),
                   help=help_settings(annotations))


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


def may_open_unasked(role: CourseRole | None, course: Course) -> bool:
    """Whether `role` may open a student's environments who has not asked for help: only
    instructors and admins, and only in a course that allows it (`staff-access: instructors`)."""
    return course.help.staff_access == "instructors" and role in ("instructor", "admin")


def may_join(role: CourseRole | None, course: Course, *, asked: bool) -> bool:
    """Whether `role` may join a student: every member of staff when the student asked."""
    if not may(role, "help"):
        return False
    return asked or may_open_unasked(role, course)


def grant_still_allowed(grant: Grant, course: Course | None) -> EndReason | None:
    """Why a live grant must end now (an end reason of platform/model/grants.py), or None.

    The staff member is judged as they were when they joined (their signed login, global role
    and teams, kept with the grant): named on the course no longer (removed from its staff, or
    from the team the course names) ends it; so does the course ending, and a grant made without
    a request once the course stops allowing that (or its maker is no longer an instructor)."""
    if course is None:
        return "course-gone"
    staff = Identity(login=grant.staff, role=grant.staff_global_role,
                     teams=tuple(t for t in grant.staff_teams.split(",") if t))
    role = course_role(staff, course)
    if role is None:
        return "staff-removed"
    if grant.basis == "instructors" and not may_open_unasked(role, course):
        return "policy"
    return None


def being_deleted(namespace: Mapping[str, Any] | None) -> bool:
    """A course namespace being deleted: its environments and work are going, so no page lists it
    or answers for it (the namespace controller may take minutes to empty it)."""
    return namespace is not None and bool((namespace.get("metadata") or {}).get("deletionTimestamp"))
