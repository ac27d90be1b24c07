"""Roster sync: what the LMS rosters change in a Userland course. Pure, no I/O.

`plan_sync(rosters, course, policy, ...)` takes every linked LMS context's members (one
Userland course may be fed by several LMS courses or sections), what the course has now, and
the course's policy for students who leave, and returns a `SyncPlan`: the students to add,
suspend, restore and remove, the staff who join or leave, the new identity bindings, and every
member skipped with the reason in a teacher's words. An unchanged roster gives an empty plan
(no writes).

The rules:
- A person is (issuer, LMS user id): the same student in two linked LMS courses is one student
  with one environment; active in either is active.
- Roles: Instructor -> instructor, TeachingAssistant -> assistant, Learner -> student; staff
  wins over student for a person with both. Other roles (Mentor, ContentDeveloper, ...) are
  skipped with the reason.
- A login comes from the binding already made for that person (stable for the term) or, at
  first sight, from the registration's login claim; a login taken by another person gets the
  first free `-2`, `-3`... suffix, in the order of LMS user ids, so two syncs agree.
- Only what the LMS brought is the LMS's to change: a student added by hand, or suspended by
  staff, is left alone; staff added by hand stay. A student the LMS brought who is no longer an
  active Learner is suspended (files kept); with the policy "remove after N days", one
  suspended by the sync for N days is removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from userland.platform.model.lti_services_roster import (
    CourseRole,
    Member,
    course_role,
    login_candidate,
    role_words,
)

Person = tuple[str, str]  # (issuer, LMS user id)
_BY_RANK: tuple[CourseRole, ...] = ("instructor", "assistant", "student")  # who wins with several
SuspendedBy = Literal["", "lms", "staff"]


@dataclass(frozen=True)
class Policy:
    dropped: Literal["suspend", "remove"] = "suspend"
    remove_after_days: int = 0  # with "remove": days after the sync suspended them
    login_claim: str = "email"

    def __post_init__(self) -> None:
        if self.dropped == "remove" and self.remove_after_days < 1:
            raise ValueError("remove after N days needs N of at least 1")


@dataclass(frozen=True)
class Student:
    """A student of the course now: their login and what the sync needs to know of them."""

    login: str
    person: Person | None = None  # the LMS person bound to this login; None: added by hand
    suspended: bool = False
    suspended_by: SuspendedBy = ""
    suspended_at: datetime | None = None


@dataclass(frozen=True)
class Course:
    students: Mapping[str, Student] = field(default_factory=dict)  # login -> student
    staff: Mapping[str, tuple[CourseRole, bool]] = field(default_factory=dict)  # login -> (role, from LMS)
    bindings: Mapping[Person, str] = field(default_factory=dict)  # every known LMS person -> login
    # Logins in use on the platform outside this course's LMS people (GitHub users, other
    # courses' students): a new LMS person never gets one of them.
    taken: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NewStudent:
    login: str
    person: Person
    name: str
    email: str


@dataclass(frozen=True)
class Skip:
    who: str  # the name a teacher sees in the LMS
    reason: str


@dataclass(frozen=True)
class SyncPlan:
    add: tuple[NewStudent, ...] = ()
    restore: tuple[str, ...] = ()
    suspend: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    staff_set: tuple[tuple[str, CourseRole], ...] = ()  # join or change role
    staff_drop: tuple[str, ...] = ()
    bind: tuple[tuple[Person, str], ...] = ()  # new bindings to store
    skipped: tuple[Skip, ...] = ()
    members: int = 0  # people in the LMS rosters

    @property
    def writes(self) -> int:
        """Changes to the course (bindings are stored with the students they come with)."""
        return (
            len(self.add)
            + len(self.restore)
            + len(self.suspend)
            + len(self.remove)
            + len(self.staff_set)
            + len(self.staff_drop)
        )

    def summary(self) -> str:
        parts = [f"{len(self.add)} added", f"{len(self.restore)} restored", f"{len(self.suspend)} suspended"]
        if self.remove:
            parts.append(f"{len(self.remove)} removed")
        if self.staff_set or self.staff_drop:
            parts.append(f"staff: {len(self.staff_set)} joined or changed, {len(self.staff_drop)} left")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        return f"{self.members} in the LMS: " + ", ".join(parts)


@dataclass
class _Person:
    key: Person
    member: Member
    role: CourseRole | None
    active: bool


def merge(rosters: Iterable[Sequence[Member]]) -> dict[Person, _Person]:
    """Everyone in all linked contexts, once: active if active in any, the highest role of
    their active entries (or of all entries when none is active)."""
    people: dict[Person, list[Member]] = {}
    for roster in rosters:
        for member in roster:
            people.setdefault(member.key, []).append(member)
    merged: dict[Person, _Person] = {}
    for key, entries in people.items():
        active = [m for m in entries if m.status == "Active"]
        counted = active or entries
        roles = [r for m in counted if (r := course_role(m.roles)) is not None]
        role = next((r for r in _BY_RANK if r in roles), None)
        best = next((m for m in counted if course_role(m.roles) == role), counted[0])
        merged[key] = _Person(key=key, member=best, role=role, active=bool(active))
    return merged


def _logins(
    people: Mapping[Person, _Person], course: Course, claim: str
) -> tuple[dict[Person, str], list[tuple[Person, str]], list[Skip]]:
    """Each person's login: bound, or new (collision-safe). Returns logins, new bindings, skips."""
    logins = {key: course.bindings[key] for key in people if key in course.bindings}
    used = set(course.taken) | set(course.bindings.values()) | set(course.students) | set(course.staff)
    new: list[tuple[Person, str]] = []
    skipped: list[Skip] = []
    reused: set[str] = set()
    for key in sorted(k for k in people if k not in logins):
        person = people[key]
        if person.role is None or not person.active:
            continue  # no login is made for someone the course does not take
        base, why = login_candidate(person.member, claim)
        if not base:
            skipped.append(Skip(person.member.display, f"Not added: {why}."))
            continue
        login, n = base, 1
        # Staff bindings are not stored: a staff member the LMS made keeps their login while the
        # LMS keeps them on staff (a role change does not rename them).
        lms_staff = course.staff.get(base, ("", False))[1]
        if person.role in ("instructor", "assistant") and lms_staff and base not in reused:
            reused.add(base)
            logins[key] = base
            continue
        while login in used:
            n += 1
            suffix = f"-{n}"
            login = base[: 39 - len(suffix)].rstrip("-") + suffix
        used.add(login)
        logins[key] = login
        new.append((key, login))
    return logins, new, skipped


def _days(policy: Policy) -> timedelta:
    return timedelta(days=policy.remove_after_days)


def plan_sync(
    rosters: Iterable[Sequence[Member]], course: Course, policy: Policy, now: datetime | None = None
) -> SyncPlan:
    now = now or datetime.now(UTC)
    people = merge(rosters)
    logins, new_bindings, skipped = _logins(people, course, policy.login_claim)
    bind = dict(new_bindings)
    add: list[NewStudent] = []
    restore: list[str] = []
    staff_set: list[tuple[str, CourseRole]] = []
    lms_students: set[str] = set()
    lms_staff: set[str] = set()
    for key in sorted(people):
        person = people[key]
        who = person.member.display
        if person.role is None:
            if person.active:
                skipped.append(
                    Skip(
                        who,
                        f"Not added: their role in the LMS ({role_words(person.member.roles)}) "
                        "has no place in a Userland course.",
                    )
                )
            continue
        login = logins.get(key)
        if login is None or not person.active:
            continue
        if person.role == "student":
            if login in course.staff:
                skipped.append(Skip(who, f"Not added as a student: {login} is on this course's staff."))
                continue
            lms_students.add(login)
            current = course.students.get(login)
            if current is None:
                add.append(NewStudent(login, key, person.member.name, person.member.email))
            elif current.person not in (None, key):
                skipped.append(Skip(who, f"Not added: the login {login} belongs to another student."))
                lms_students.discard(login)
            elif current.suspended and current.suspended_by == "lms":
                restore.append(login)
        else:
            lms_staff.add(login)
            if login in course.students and course.students[login].person not in (None, key):
                skipped.append(Skip(who, f"Not added to staff: the login {login} belongs to a student."))
                continue
            if course.staff.get(login, (None, False))[0] != person.role:
                staff_set.append((login, person.role))
    suspend: list[str] = []
    remove: list[str] = []
    for login, student in sorted(course.students.items()):
        if student.person is None or login in lms_students:
            continue  # added by hand, or still an active Learner
        if not student.suspended:
            suspend.append(login)
        elif (
            student.suspended_by == "lms"
            and policy.dropped == "remove"
            and student.suspended_at is not None
            and now - student.suspended_at >= _days(policy)
        ):
            remove.append(login)
    staff_drop = sorted(
        login for login, (_, from_lms) in course.staff.items() if from_lms and login not in lms_staff
    )
    # A new binding is stored with the student or staff member it comes with, never alone.
    kept = {s.login for s in add} | {login for login, _ in staff_set}
    return SyncPlan(
        add=tuple(add),
        restore=tuple(restore),
        suspend=tuple(suspend),
        remove=tuple(remove),
        staff_set=tuple(staff_set),
        staff_drop=tuple(staff_drop),
        bind=tuple((k, v) for k, v in bind.items() if v in kept),
        skipped=tuple(skipped),
        members=len(people),
    )
