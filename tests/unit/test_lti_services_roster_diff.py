"""The roster sync's decisions (platform/model/lti_services_roster_diff.py): plain data in, a plan out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from userland.platform.model.lti_services_roster import LIS, Member
from userland.platform.model.lti_services_roster_diff import Course, Policy, Student, plan_sync

NOW = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
LEARNER, INSTRUCTOR, TA = f"{LIS}#Learner", f"{LIS}#Instructor", f"{LIS}/Instructor#TeachingAssistant"


def m(
    user: str,
    role: str = LEARNER,
    status: str = "Active",
    context: str = "c1",
    email: str = "",
    name: str = "",
) -> Member:
    return Member(
        issuer="https://lms",
        context=context,
        user_id=user,
        roles=(role,),
        status=status,  # type: ignore[arg-type]
        name=name or user.upper(),
        email=email or f"{user}@uni.edu",
    )


def lms_student(login: str, user: str, **kw: object) -> Student:
    return Student(login=login, person=("https://lms", user), **kw)  # type: ignore[arg-type]


def test_a_first_sync_adds_every_active_learner_and_the_staff() -> None:
    plan = plan_sync(
        [[m("ana"), m("bo"), m("cy", INSTRUCTOR), m("di", TA), m("ed", status="Inactive")]],
        Course(),
        Policy(),
        NOW,
    )
    assert [s.login for s in plan.add] == ["ana", "bo"]
    assert plan.staff_set == (("cy", "instructor"), ("di", "assistant"))
    assert dict(plan.bind) == {("https://lms", u): u for u in ("ana", "bo", "cy", "di")}
    assert plan.suspend == () and plan.skipped == () and plan.writes == 4 and plan.members == 5
    assert (
        plan.summary() == "5 in the LMS: 2 added, 0 restored, 0 suspended, staff: 2 joined or changed, 0 left"
    )


def test_an_unchanged_roster_writes_nothing() -> None:
    course = Course(
        students={"ana": lms_student("ana", "ana")},
        staff={"cy": ("instructor", True)},
        bindings={("https://lms", "ana"): "ana", ("https://lms", "cy"): "cy"},
    )
    plan = plan_sync([[m("ana"), m("cy", INSTRUCTOR)]], course, Policy(), NOW)
    assert plan.writes == 0 and plan.bind == ()


def test_dropped_and_inactive_students_are_suspended_and_come_back_when_active_again() -> None:
    course = Course(
        students={
            "ana": lms_student("ana", "ana"),
            "bo": lms_student("bo", "bo"),
            "cy": lms_student("cy", "cy", suspended=True, suspended_by="lms", suspended_at=NOW),
        },
        bindings={("https://lms", u): u for u in ("ana", "bo", "cy")},
    )
    plan = plan_sync([[m("ana"), m("bo", status="Inactive"), m("cy")]], course, Policy(), NOW)
    assert plan.suspend == ("bo",) and plan.restore == ("cy",) and plan.add == ()
    gone = plan_sync([[m("cy")]], course, Policy(), NOW)
    assert gone.suspend == ("ana", "bo")


def test_remove_after_n_days_removes_only_those_the_sync_suspended_that_long_ago() -> None:
    policy = Policy(dropped="remove", remove_after_days=14)
    course = Course(
        students={
            "old": lms_student(
                "old", "old", suspended=True, suspended_by="lms", suspended_at=NOW - timedelta(days=15)
            ),
            "new": lms_student(
                "new", "new", suspended=True, suspended_by="lms", suspended_at=NOW - timedelta(days=2)
            ),
            "staffs": lms_student(
                "staffs",
                "staffs",
                suspended=True,
                suspended_by="staff",
                suspended_at=NOW - timedelta(days=99),
            ),
        }
    )
    plan = plan_sync([[]], course, policy, NOW)
    assert plan.remove == ("old",) and plan.suspend == ()
    assert plan_sync([[]], course, Policy(), NOW).remove == ()  # the default policy only suspends
    with pytest.raises(ValueError):
        Policy(dropped="remove", remove_after_days=0)


def test_what_staff_did_by_hand_is_left_alone() -> None:
    course = Course(
        students={
            "hand": Student("hand"),
            "paused": lms_student("paused", "paused", suspended=True, suspended_by="staff"),
        },
        staff={"boss": ("instructor", False)},
        bindings={("https://lms", "paused"): "paused"},
    )
    plan = plan_sync([[m("paused")]], course, Policy(), NOW)
    assert plan.writes == 0  # the hand-added student stays, the one staff suspended stays suspended


def test_staff_follow_the_lms() -> None:
    course = Course(
        staff={"cy": ("instructor", True), "di": ("assistant", True), "boss": ("instructor", False)},
        bindings={("https://lms", "cy"): "cy", ("https://lms", "di"): "di"},
    )
    plan = plan_sync([[m("cy", TA)]], course, Policy(), NOW)
    assert plan.staff_set == (("cy", "assistant"),) and plan.staff_drop == ("di",)


def test_a_student_in_two_linked_lms_courses_is_one_student() -> None:
    plan = plan_sync(
        [[m("ana", context="c1")], [m("ana", context="c2", status="Inactive"), m("bo", context="c2")]],
        Course(),
        Policy(),
        NOW,
    )
    assert [s.login for s in plan.add] == ["ana", "bo"] and plan.members == 2
    course = Course(students={"ana": lms_student("ana", "ana")}, bindings={("https://lms", "ana"): "ana"})
    # Dropped from one section, still in the other: kept.
    assert (
        plan_sync([[m("ana", status="Inactive")], [m("ana", context="c2")]], course, Policy(), NOW).suspend
        == ()
    )
    # A TA in one section who is a Learner in another is staff.
    both = plan_sync([[m("ana", TA)], [m("ana", context="c2")]], Course(), Policy(), NOW)
    assert both.add == () and both.staff_set == (("ana", "assistant"),)


def test_logins_are_collision_safe_stable_and_never_take_anothers() -> None:
    members = [m("u1", email="jo@uni.edu"), m("u2", email="jo@other.edu"), m("u3", email="sam@uni.edu")]
    plan = plan_sync([members], Course(taken=frozenset({"sam"})), Policy(), NOW)
    assert [(s.person[1], s.login) for s in plan.add] == [("u1", "jo"), ("u2", "jo-2"), ("u3", "sam-2")]
    # Bound logins stay: a renamed email does not move the environment.
    course = Course(students={"jo": lms_student("jo", "u1")}, bindings={("https://lms", "u1"): "jo"})
    renamed = plan_sync([[m("u1", email="jo.smith@uni.edu")]], course, Policy(), NOW)
    assert renamed.writes == 0
    # A login bound to another person is never handed over, even when a hand-made entry has it.
    clash = plan_sync([[m("u9", email="jo@x.edu")]], course, Policy(), NOW)
    assert [s.login for s in clash.add] == ["jo-2"] and clash.suspend == ("jo",)


def test_skipped_members_say_why_in_words_a_teacher_understands() -> None:
    members = [
        m("ana", email="-"),
        Member("https://lms", "c1", "mo", (f"{LIS}#Mentor",), name="Mo"),
        m("cy", INSTRUCTOR),
        m("cy2", email="cy@uni.edu"),
    ]
    course = Course(staff={"cy": ("instructor", True)}, bindings={("https://lms", "cy"): "cy"})
    plan = plan_sync([members], course, Policy(), NOW)
    reasons = {skip.who: skip.reason for skip in plan.skipped}
    assert reasons["ANA"] == (
        "Not added: the LMS roster gives no email address for them, and this LMS link "
        "makes logins from email addresses."
    )
    assert reasons["Mo"] == "Not added: their role in the LMS (Mentor) has no place in a Userland course."
    assert [s.login for s in plan.add] == ["cy-2"]  # cy is staff: the other cy gets cy-2
    custom = plan_sync([[m("zed")]], Course(), Policy(login_claim="custom:username"), NOW)
    assert "custom field 'username'" in custom.skipped[0].reason and custom.add == ()


def test_five_thousand_members_plan_in_one_pass() -> None:
    members = [m(f"s{i:04d}") for i in range(5000)]
    plan = plan_sync([members], Course(), Policy(), NOW)
    assert len(plan.add) == 5000 and len({s.login for s in plan.add}) == 5000
