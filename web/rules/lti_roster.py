"""The LMS roster sync's view of a course, read from its objects. Pure, no I/O.

`course_state(userlands, template, instructors, assistants)` turns the course's Userlands of the
LMS link's Template and its staff lists into what the sync plan reads
(platform/model/lti_services_roster_diff.py): each student's login, the LMS person it was made
for (the `userland.dev/lti-person` annotation; none: added by hand), whether it is suspended and
whether by the sync (`userland.dev/suspended-by: lms`, with `userland.dev/suspended-at`).
Staff come from the namespace's lists: those written by hand, and those the LMS made
(`userland.dev/lti-instructors`, `lti-assistants`), which the sync follows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from userland.platform.model import naming
from userland.platform.model.lti_services_roster import CourseRole
from userland.platform.model.lti_services_roster_diff import Course, Person, Student, SuspendedBy
from userland.platform.model.models import parse_time

SUSPENDED_BY_LMS: SuspendedBy = "lms"


def person_value(person: Person) -> str:
    return json.dumps(list(person), separators=(",", ":"))


def parse_person(text: object) -> Person | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) and v for v in value):
        return (value[0], value[1])
    return None


def _student(obj: Mapping[str, Any]) -> Student | None:
    spec = obj.get("spec") or {}
    login = naming.login_of(spec.get("user"))
    if not login:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    suspended = spec.get("suspended") is True
    by: SuspendedBy = ""
    if suspended:
        by = (
            SUSPENDED_BY_LMS
            if annotations.get(naming.ANNOTATION_SUSPENDED_BY) == SUSPENDED_BY_LMS
            else "staff"
        )
    return Student(
        login=login,
        person=parse_person(annotations.get(naming.ANNOTATION_LTI_PERSON)),
        suspended=suspended,
        suspended_by=by,
        suspended_at=parse_time(annotations.get(naming.ANNOTATION_SUSPENDED_AT)) if by == "lms" else None,
    )


def course_state(
    userlands: Iterable[Mapping[str, Any]],
    template: str,
    *,
    instructors: Iterable[str] = (),
    assistants: Iterable[str] = (),
    lms_instructors: Iterable[str] = (),
    lms_assistants: Iterable[str] = (),
) -> Course:
    students: dict[str, Student] = {}
    taken: set[str] = set()
    for obj in userlands:
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            continue
        student = _student(obj)
        if student is None:
            continue
        if (obj.get("spec") or {}).get("template") == template:
            students[student.login] = student
        else:
            taken.add(student.login)  # a student of another Template here: never given to someone else
    staff: dict[str, tuple[CourseRole, bool]] = {login: ("assistant", False) for login in assistants}
    staff.update({login: ("instructor", False) for login in instructors})
    # The staff the LMS made (platform/model/lti_links.py): the sync may take them back.
    staff.update({login: ("assistant", True) for login in lms_assistants})
    staff.update({login: ("instructor", True) for login in lms_instructors})
    bindings = {s.person: s.login for s in students.values() if s.person is not None}
    return Course(students=students, staff=staff, bindings=bindings, taken=frozenset(taken - set(students)))
