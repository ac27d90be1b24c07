"""Help in the lab as the pages show it (pure): the class dashboard's help queue, a student's
help panel on "my environments", and the words both use.

Inputs are plain data read by the handlers (web/routes_help.py): open requests from the course's
queue (web/help_queue.py), grants (platform/model/grants.py), the dashboard's rows and the viewer's
role. Times are epoch seconds; the words are made here from `now`, so a view is right whenever
it is rendered. Clock times are written in UTC (`clock`) inside a `<time>` element, which the
pages' own script shows in the reader's time zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from userland.platform.model.grants import Grant
from userland.web.rules.courses import Course, CourseRole, may_join, may_open_unasked
from userland.web.rules.dashboard import StudentRow, duration_words

# What a grant's end is called, for staff and for the student.
END_WORDS = {
    "done": "left", "student": "ended by the student", "staff-removed": "ended: no longer course staff",
    "policy": "ended: the course no longer allows it", "course-gone": "ended: the course was removed",
    "expired": "time ran out", "ended": "ended",
}
ROLE_WORDS = {"assistant": "assistant", "instructor": "instructor", "admin": "admin"}


def clock(moment: float) -> str:
    """`14:02 UTC` (the pages' script turns it into the reader's local time)."""
    return datetime.fromtimestamp(moment, UTC).strftime("%H:%M UTC")


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def day(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class HelpRequest:
    """A student's open request for help (kept by web/help_queue.py)."""

    course: str
    student: str
    message: str
    asked: float  # epoch seconds


@dataclass(frozen=True)
class Waiting:
    student: str
    name: str
    message: str
    asked: float
    waited: str          # "4 min"
    may_join: bool


@dataclass(frozen=True)
class Helping:
    grant_id: str
    student: str
    name: str
    staff: str
    role: str
    started: float
    expires: float
    left: str            # "52 min"
    basis: str
    message: str
    mine: bool           # the viewer is the one helping
    may_end: bool        # the viewer may end it (theirs; instructors and admins: anyone's)


@dataclass(frozen=True)
class QueueView:
    waiting: tuple[Waiting, ...]
    helping: tuple[Helping, ...]
    open_unasked: bool   # the viewer may open any student's environments (staff-access: instructors)
    limit_words: str     # how long access lasts in this course
    problems: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.waiting and not self.helping


def queue_view(course: Course, role: CourseRole, viewer: str, requests: Iterable[HelpRequest],
               grants: Iterable[Grant], rows: Mapping[str, StudentRow], now: float) -> QueueView:
    """The dashboard's help card. Requests of students no longer in the course are left out."""
    waiting = tuple(
        Waiting(student=r.student, name=rows[r.student].name, message=r.message, asked=r.asked,
                waited=duration_words(now - r.asked),
                may_join=may_join(role, course, asked=True) and r.student != viewer)
        for r in requests if r.student in rows)
    helping = tuple(
        Helping(grant_id=g.id, student=g.student, name=rows[g.student].name if g.student in rows else "",
                staff=g.staff, role=ROLE_WORDS.get(g.role, g.role), started=g.started, expires=g.expires,
                left=duration_words(g.expires - now), basis=g.basis, message=g.message,
                mine=g.staff == viewer, may_end=g.staff == viewer or role in ("instructor", "admin"))
        for g in grants if g.live(now))
    return QueueView(waiting=waiting, helping=helping, open_unasked=may_open_unasked(role, course),
                     limit_words=duration_words(course.help.limit_seconds), problems=course.help.problems)


@dataclass(frozen=True)
class PastAccess:
    staff: str
    role: str
    started: float
    until: float
    how: str             # "left", "ended by you", "time ran out"


@dataclass(frozen=True)
class StudentHelp:
    """A student's help panel for one course on "my environments"."""

    course: str
    title: str
    request: HelpRequest | None
    waited: str
    now_in: tuple[Helping, ...]     # staff with access right now
    past: tuple[PastAccess, ...]    # who had it, newest first
    instructors_may_open: bool      # the course lets its instructors open it unasked


def student_help(course: Course, student: str, request: HelpRequest | None, history: Sequence[Grant],
                 now: float, *, past_shown: int = 10) -> StudentHelp:
    live = tuple(
        Helping(grant_id=g.id, student=student, name="", staff=g.staff, role=ROLE_WORDS.get(g.role, g.role),
                started=g.started, expires=g.expires, left=duration_words(g.expires - now), basis=g.basis,
                message=g.message, mine=False, may_end=True)
        for g in history if g.live(now))
    past = tuple(
        PastAccess(staff=g.staff, role=ROLE_WORDS.get(g.role, g.role), started=g.started,
                   until=min(g.until, now),
                   how="ended by you" if g.end_reason == "student" else END_WORDS.get(
                       g.end_reason or "expired", "ended"))
        for g in history if not g.live(now))[:past_shown]
    return StudentHelp(course=course.namespace, title=course.title, request=request,
                       waited="" if request is None else duration_words(now - request.asked),
                       now_in=live, past=past, instructors_may_open=course.help.staff_access == "instructors")
