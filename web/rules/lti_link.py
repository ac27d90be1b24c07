"""What the LMS course page (web/lti_link.py) does for a launch. Pure: plain data in, a decision out.

An Instructor or TeachingAssistant launching from an LMS course lands on `/lms/course` with the
launch's LMS course (what the gateway kept: auth/lti.py `_course_payload`):

- the LMS course is linked already: they get their role (Instructor -> instructor,
  TeachingAssistant -> assistant) in the Userland course(s) it is linked to, and no other, then
  go to its class dashboard;
- it is not linked, and they are an Instructor: they choose one of the Userland courses they
  teach (with the Template its students get) to link it to;
- not linked, and a TeachingAssistant: they are told an instructor must link it first;
- a Learner (or no course role at all) never reaches any of it: a 403 page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from userland.platform.model.identity import Identity
from userland.platform.model.lti_links import LmsLink, StaffRole, staff_role
from userland.web.rules.courses import Course, course_role

Outcome = Literal["expired", "not-yours", "not-staff", "linked", "wait-for-instructor", "choose",
                  "nothing-to-choose"]


@dataclass(frozen=True)
class LaunchCourse:
    """The LMS course a launch came from (as the gateway kept it)."""

    login: str
    registration: str
    context: str
    title: str
    role: str  # instructor, assistant, student or ""
    memberships: str = ""
    lineitems: str = ""
    picker: bool = False  # a deep-linking launch's: the content picker comes after linking

    @classmethod
    def parse(cls, raw: object) -> LaunchCourse | None:
        if not isinstance(raw, dict):
            return None
        fields = {k: raw.get(k, "") for k in ("login", "registration", "context", "title", "role",
                                              "memberships", "lineitems")}
        if not all(isinstance(v, str) for v in fields.values()):
            return None
        found = cls(**fields, picker=isinstance(raw.get("deep_link"), dict))
        return found if found.login and found.registration and found.context else None

    def link(self, template: str) -> LmsLink:
        return LmsLink(self.registration, self.context, template, self.title, self.memberships,
                       self.lineitems)


@dataclass(frozen=True)
class Choice:
    """A course the instructor may link the LMS course to, with its Templates."""

    course: Course
    templates: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    role: StaffRole | None = None
    linked: tuple[str, ...] = ()  # namespaces the LMS course feeds
    choices: tuple[Choice, ...] = field(default_factory=tuple)


def decide(launch: LaunchCourse | None, who: Identity, linked: Iterable[str],
           courses: Iterable[Course], templates: Mapping[str, Iterable[str]]) -> Decision:
    """What the page does. `linked`: the namespaces of the courses the launch's LMS course feeds;
    `courses`: every course; `templates`: each course's Template names."""
    if launch is None:
        return Decision("expired")
    if launch.login != who.login:
        return Decision("not-yours")
    role = staff_role(launch.role)
    if role is None:
        return Decision("not-staff")
    linked = tuple(sorted(set(linked)))
    if linked:
        return Decision("linked", role=role, linked=linked)
    if role != "instructor":
        return Decision("wait-for-instructor", role=role)
    choices = tuple(
        Choice(course, tuple(sorted(templates.get(course.namespace, ()))))
        for course in sorted(courses, key=lambda c: (c.title.lower(), c.namespace))
        if course_role(who, course) in ("instructor", "admin") and templates.get(course.namespace)
    )
    return Decision("choose" if choices else "nothing-to-choose", role=role, choices=choices)


def may_link(decision: Decision, namespace: str, template: str) -> bool:
    """Whether the form's choice is one the page offered (never trust the posted value)."""
    return decision.outcome == "choose" and any(
        choice.course.namespace == namespace and template in choice.templates
        for choice in decision.choices
    )


def namespace_annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}
