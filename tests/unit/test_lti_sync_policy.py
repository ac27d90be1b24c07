"""The roster sync's policy for dropped students (web/rules/lti_sync.py): read from the course,
and the dashboard's list of who will be removed when. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from userland.platform.model.lti_services_roster import LIS, Member
from userland.platform.model.lti_services_roster_diff import Course, Policy, Student, SyncPlan, plan_sync
from userland.web.rules.lti_sync import (
    ANNOTATION_REMOVE_AFTER,
    DroppedPolicy,
    SyncRecord,
    dropped_policy,
    record,
    removals,
)

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
ISS = "https://lms.example"


def learner(user: str) -> Member:
    return Member(ISS, "c1", user, (f"{LIS}#Learner",), email=f"{user}@uni.edu")


def test_the_default_is_suspend_and_a_number_of_days_removes() -> None:
    assert dropped_policy({}) == DroppedPolicy()
    assert dropped_policy({ANNOTATION_REMOVE_AFTER: "0"}) == DroppedPolicy()
    assert dropped_policy({ANNOTATION_REMOVE_AFTER: " 14 "}) == DroppedPolicy(14)
    assert dropped_policy({ANNOTATION_REMOVE_AFTER: "365"}).policy("email") == Policy("remove", 365, "email")
    assert DroppedPolicy().policy("sourcedid") == Policy("suspend", 0, "sourcedid")
    assert "removed 14 days later" in DroppedPolicy(14).words()
    assert "removed 1 day later" in DroppedPolicy(1).words()
    assert "files are kept" in DroppedPolicy().words()


@pytest.mark.parametrize("bad", ["-3", "2w", "366", "1.5", "forever", "x" * 300])
def test_a_bad_value_is_said_and_removes_nobody(bad: str) -> None:
    policy = dropped_policy({ANNOTATION_REMOVE_AFTER: bad})
    assert policy.remove_after_days == 0 and policy.policy("email").dropped == "suspend"
    assert ANNOTATION_REMOVE_AFTER in policy.problem and "only suspended" in policy.problem
    assert len(policy.problem) < 250


def test_who_will_be_removed_when() -> None:
    before = NOW - timedelta(days=3)
    students = {
        "old": Student("old", (ISS, "old"), True, "lms", before),  # suspended by the sync 3 days ago
        "back": Student("back", (ISS, "back"), True, "lms", before),  # active again: restored now
        "staff": Student("staff", (ISS, "staff"), True, "staff"),  # staff's suspension: not the LMS's
        "hand": Student("hand"),  # added by hand: never the sync's
        "going": Student("going", (ISS, "going")),  # dropped now
    }
    course = Course(students=students, bindings={s.person: s.login for s in students.values() if s.person})
    plan = plan_sync([[learner("back"), learner("hand")]], course, Policy("remove", 7), NOW)
    assert plan.suspend == ("going",) and plan.restore == ("back",) and plan.remove == ()
    assert removals(course, plan, DroppedPolicy(7), NOW) == (
        ("old", (before + timedelta(days=7)).timestamp()),
        ("going", (NOW + timedelta(days=7)).timestamp()),
    )
    assert removals(course, plan, DroppedPolicy(), NOW) == ()  # suspend only: nobody
    # Seven days on, "old" is removed by the plan and no longer listed.
    later = NOW + timedelta(days=4, seconds=1)
    plan = plan_sync([[learner("back"), learner("hand")]], course, Policy("remove", 7), later)
    assert plan.remove == ("old",)
    assert [login for login, _ in removals(course, plan, DroppedPolicy(7), later)] == ["going"]


def test_the_record_keeps_the_policy_and_the_removals_through_redis() -> None:
    rec = record([SyncPlan(suspend=("s1",), members=3)], [("s1", "suspended", "")], actor="schedule",
                 now=NOW.timestamp(), policy=DroppedPolicy(2).words(),
                 removals=[("s2", 20.0), ("s1", 10.0)])
    assert rec.removals == (("s1", 10.0), ("s2", 20.0))
    again = SyncRecord.from_json(rec.to_json())
    assert again == rec and "removed 2 days later" in again.policy
    # A record written before the policy existed still reads.
    old = SyncRecord.from_json('{"time": 1, "actor": "schedule", "ok": true}')
    assert old is not None and old.removals == () and old.policy == ""
