"""Who may join whom, when a grant must end, and what the help pages show: pure tables
(web/rules/courses.py, web/rules/help.py)."""

from __future__ import annotations

import pytest

from userland.platform.model.grants import Grant, help_settings
from userland.web.rules.courses import Course, CourseRole, grant_still_allowed, may_join, may_open_unasked
from userland.web.rules.dashboard import StudentRow
from userland.web.rules.help import HelpRequest, queue_view, student_help

ON_REQUEST = Course("cs101", "CS 101", instructors=frozenset({"teacher"}),
                    assistants=frozenset({"tina", "uni/tas"}))
INSTRUCTORS = Course("cs101", "CS 101", instructors=frozenset({"teacher"}), assistants=frozenset({"tina"}),
                     help=help_settings({"userland.dev/staff-access": "instructors"}))

# (role, course, asked) -> may join
JOIN = [
    ("assistant", ON_REQUEST, True, True),
    ("instructor", ON_REQUEST, True, True),
    ("admin", ON_REQUEST, True, True),
    ("assistant", ON_REQUEST, False, False),
    ("instructor", ON_REQUEST, False, False),     # on-request: nobody opens an environment unasked
    ("admin", ON_REQUEST, False, False),
    ("assistant", INSTRUCTORS, False, False),     # assistants only ever on request
    ("instructor", INSTRUCTORS, False, True),
    ("admin", INSTRUCTORS, False, True),
    ("assistant", INSTRUCTORS, True, True),
    (None, ON_REQUEST, True, False),              # a student
    (None, INSTRUCTORS, False, False),
]


@pytest.mark.parametrize(("role", "course", "asked", "expected"), JOIN)
def test_who_may_join(role: CourseRole | None, course: Course, asked: bool, expected: bool) -> None:
    assert may_join(role, course, asked=asked) is expected
    if not asked:
        assert may_open_unasked(role, course) is expected


NOW = 1_800_000_000.0


def grant(staff: str = "tina", *, basis: str = "request", global_role: str = "student", teams: str = "",
          role: str = "assistant") -> Grant:
    return Grant(id="G" * 22, course="cs101", student="alice", staff=staff, role=role,
                 basis=basis, started=NOW - 60, expires=NOW + 3600,  # type: ignore[arg-type]
                 staff_global_role=global_role, staff_teams=teams)


# (grant, course now) -> why it must end, or None
STILL = [
    (grant(), ON_REQUEST, None),
    (grant(), Course("cs101", "CS 101", instructors=frozenset({"teacher"})), "staff-removed"),
    (grant(), None, "course-gone"),
    # Named through a team: leaving the course's team entry ends it.
    (grant("ann", teams="uni/tas"), ON_REQUEST, None),
    (grant("ann", teams="uni/other"), ON_REQUEST, "staff-removed"),
    # A global admin or instructor stays staff of every course.
    (grant("root", global_role="admin", role="admin"), Course("cs101", "CS 101"), None),
    # Opened without a request: only while the course allows it and they are an instructor.
    (grant("teacher", basis="instructors", role="instructor"), INSTRUCTORS, None),
    (grant("teacher", basis="instructors", role="instructor"), ON_REQUEST, "policy"),
    (grant("teacher", basis="instructors", role="instructor"),
     Course("cs101", "CS 101", assistants=frozenset({"teacher"}), help=INSTRUCTORS.help), "policy"),
    (grant("teacher", role="instructor"), ON_REQUEST, None),  # asked for: the policy does not matter
]


@pytest.mark.parametrize(("found", "course", "expected"), STILL)
def test_when_a_grant_must_end(found: Grant, course: Course | None, expected: str | None) -> None:
    assert grant_still_allowed(found, course) == expected


ROWS = {login: StudentRow(login=login, name=f"{login.title()} Doe") for login in ("alice", "bob")}


def test_the_queue_is_oldest_first_and_leaves_out_who_is_not_in_the_course() -> None:
    requests = [HelpRequest("cs101", "alice", "stuck", NOW - 300), HelpRequest("cs101", "bob", "", NOW - 30),
                HelpRequest("cs101", "gone", "left the course", NOW - 900)]
    view = queue_view(ON_REQUEST, "assistant", "tina", requests, [], ROWS, NOW)
    assert [(w.student, w.waited, w.may_join) for w in view.waiting] == [("alice", "5 min", True),
                                                                         ("bob", "less than a minute", True)]
    assert not view.open_unasked and view.limit_words == "1 h"


def test_who_is_helping_and_who_may_end_it() -> None:
    tina, other = grant(), Grant(id="H" * 22, course="cs101", student="bob", staff="sam", role="assistant",
                                 basis="request", started=NOW - 60, expires=NOW + 120)
    over = Grant(id="I" * 22, course="cs101", student="bob", staff="ann", role="assistant", basis="request",
                 started=NOW - 7200, expires=NOW - 3600)
    as_tina = queue_view(ON_REQUEST, "assistant", "tina", [], [tina, other, over], ROWS, NOW)
    assert [(h.student, h.staff, h.mine, h.may_end, h.left) for h in as_tina.helping] == [
        ("alice", "tina", True, True, "1 h"), ("bob", "sam", False, False, "2 min")]
    as_teacher = queue_view(INSTRUCTORS, "instructor", "teacher", [], [tina, other], ROWS, NOW)
    assert [h.may_end for h in as_teacher.helping] == [True, True] and as_teacher.open_unasked
    # A student never joins themselves (a TA who is also a student of the course).
    own = [HelpRequest("cs101", "alice", "", NOW)]
    view = queue_view(ON_REQUEST, "assistant", "alice", own, [], ROWS, NOW)
    assert not view.waiting[0].may_join


def test_the_student_sees_who_has_access_now_and_who_had_it() -> None:
    now_in = grant()
    def past(staff: str, role: str, started: float) -> Grant:
        return Grant(id=staff.upper() * 11, course="cs101", student="alice", staff=staff, role=role,
                     basis="request", started=started, expires=started + 3600)
    done = past("sam", "instructor", NOW - 4000).ended_at(NOW - 3000, "sam", "done")
    ended_by_her = past("ann", "assistant", NOW - 9000).ended_at(NOW - 8000, "alice", "student")
    ran_out = past("bo", "assistant", NOW - 20000)
    panel = student_help(ON_REQUEST, "alice", None, [now_in, done, ended_by_her, ran_out], NOW)
    assert [(g.staff, g.role) for g in panel.now_in] == [("tina", "assistant")]
    assert [(p.staff, p.until, p.how) for p in panel.past] == [
        ("sam", NOW - 3000, "left"), ("ann", NOW - 8000, "ended by you"), ("bo", NOW - 16400, "time ran out")]
    asked = student_help(INSTRUCTORS, "alice", HelpRequest("cs101", "alice", "help", NOW - 120), [], NOW)
    assert asked.waited == "2 min" and asked.instructors_may_open and not asked.now_in
