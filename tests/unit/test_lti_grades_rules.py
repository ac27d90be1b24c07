"""Grade passback's rules (web/rules/lti_grades.py) and the sync record (web/rules/lti_sync.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from userland.platform.model.assignments import Grade as Written
from userland.platform.model.lti_services_grades import Grade
from userland.platform.model.lti_services_passback import Passback, want
from userland.platform.model.lti_services_roster_diff import Skip, SyncPlan
from userland.web.rules import lti_grades
from userland.web.rules.lti_sync import SyncRecord, failed, record

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def test_grades_read_as_points() -> None:
    assert lti_grades.points("8", 10) == (8.0, "")
    assert lti_grades.points(" 8,5 ", 10) == (8.5, "")
    assert lti_grades.points("9/10", 20) == (18.0, "")
    assert lti_grades.points("85%", 10) == (8.5, "")
    for text in ("A-", "", "8/0", "-3", "eight"):
        given, why = lti_grades.points(text, 10)
        assert given is None and why, text


def test_the_link_annotation_is_read_strictly() -> None:
    good = {"registration": "canvas", "context": "c1", "scoreMaximum": 10}
    assert lti_grades.parse_link(json.dumps(good)) == lti_grades.LineItemLink("canvas", "c1", 10.0)
    for bad in ({**good, "scoreMaximum": 0}, {**good, "context": ""}, {"registration": "x"}, "nope"):
        assert lti_grades.parse_link(json.dumps(bad)) is None
    assert lti_grades.parse_link(None) is None


def test_who_gets_a_score_and_who_is_refused_with_a_reason() -> None:
    want_ = lti_grades.wanted({"al": Written("8", "good"), "bo": Written("A"), "cy": Written("5"),
                               "di": Written("", "comment only")}, {"al": "u-1", "bo": "u-2"}, 10)
    assert want_.grades == {"u-1": Grade(given=8.0, maximum=10, comment="good")}
    assert want_.users == {"u-1": "al"}
    assert set(want_.refused) == {"bo", "cy"}  # not points; not known to the LMS
    assert "not points" in want_.refused["bo"] and "does not know" in want_.refused["cy"]


def test_states_survive_the_status_round_trip_so_a_value_is_never_sent_twice() -> None:
    grade = Grade(given=8.0, maximum=10, comment="ok")
    sent = Passback(state="sent", value=grade, sent=grade, sent_at=NOW)
    status = {"lti": lti_grades.status_lti("https://lms/li/1", {"u-1": sent}, {"u-1": "al"}, {}, NOW)}
    back = lti_grades.states_by_user(status, {"u-1": "al"})["u-1"]
    assert want(grade, back) == back and back.state == "sent"  # the same grade: nothing to post
    assert want(Grade(given=7.0, maximum=10, comment="ok"), back).state == "pending"
    assert lti_grades.summary(status) == {"sent": 1, "pending": 0, "failed": 0}
    assert lti_grades.states_by_user({"lti": {"students": {"al": {"state": "weird"}}}}, {"u-1": "al"}) == {}


def test_the_sync_record_says_what_changed_and_why_members_were_skipped() -> None:
    why = "Not added: their role in the LMS (Mentor) has no place."
    plan = SyncPlan(skipped=(Skip("Mo", why),), members=3)
    rec = record([plan], [("s1", "created", ""), ("s2", "suspended", "x"), ("s3", "exists", "")],
                 actor="teacher", now=1.0)
    assert rec.changes == (("s1", "added: their environment was made"),
                           ("s2", "suspended (their files are kept)"))
    assert rec.skipped == (("Mo", why),)
    assert rec.changed and SyncRecord.from_json(rec.to_json()) == rec
    bad = failed("LMS course c1: HTTP 404", actor="schedule", now=2.0)
    assert not bad.ok and not bad.changed and "could not be read" in bad.summary
    assert SyncRecord.from_json("{") is None


def _status(**gradings: dict[str, object]) -> dict[str, object]:
    """An Assignment's status as the operator writes it, with a grader out of 10."""
    return {"grading": {"maxScore": 10},
            "students": [{"user": login, "template": "lab", "grading": g} for login, g in gradings.items()]}


def test_the_graders_score_is_the_grade_unless_staff_wrote_one() -> None:
    status = _status(al={"state": "Graded", "score": 7, "shown": 4, "passed": 3},
                     bo={"state": "Graded", "score": 10, "shown": 1, "passed": 1},
                     cy={"state": "Graded", "score": 2.5},
                     di={"state": "Failed", "reason": "TimedOut"},
                     ed={"state": "Running"})
    staff = {"bo": Written("6", "late"), "cy": Written("", "see me")}
    merged = lti_grades.grades_with_autograde(staff, status)
    assert merged == {"al": Written("7/10", "Graded automatically: 7/10. 3 of 4 tests passed."),
                      "bo": Written("6", "late"),  # staff's grade wins
                      "cy": Written("2.5/10", "Graded automatically: 2.5/10.\n\nsee me")}
    # Scaled to the column's maximum like any "7/10" staff write.
    want_ = lti_grades.wanted(merged, {"al": "u-1"}, 20)
    assert want_.grades["u-1"] == Grade(given=14.0, maximum=20,
                                        comment="Graded automatically: 7/10. 3 of 4 tests passed.")
    # No grader's maximum in the status: nothing is read as a score.
    assert lti_grades.autogrades({"students": status["students"]}) == {}


def test_a_changed_score_of_a_returned_assignment_is_a_reason_to_pass_back_now() -> None:
    def obj(returned: bool, **gradings: dict[str, object]) -> dict[str, object]:
        return {"metadata": {"name": "week1"}, "spec": {"returnFeedback": returned},
                "status": _status(**gradings)}

    before = obj(True, al={"state": "Running"})
    graded = obj(True, al={"state": "Graded", "score": 7, "shown": 2, "passed": 1})
    assert lti_grades.autograde_changed(before, graded)
    assert not lti_grades.autograde_changed(graded, graded)  # another status write: nothing new
    assert not lti_grades.autograde_changed(graded, before)  # graded again: wait for the score
    assert lti_grades.autograde_changed(graded, obj(True, al={"state": "Graded", "score": 9, "shown": 2,
                                                                "passed": 2}))
    assert not lti_grades.autograde_changed(obj(False, al={"state": "Running"}),
                                            obj(False, al={"state": "Graded", "score": 7}))
    assert not lti_grades.autograde_changed(None, graded)  # the watch's first sight: the minute's pass
