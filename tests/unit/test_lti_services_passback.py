"""The grade passback state machine (platform/model/lti_services_passback.py), with its own clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from userland.platform.model import lti_services_passback as pb
from userland.platform.model.lti_services_grades import Grade

T0 = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
EIGHT, NINE = Grade(8, 10), Grade(9, 10, "regraded")


def test_a_new_grade_is_posted_once_and_never_again_for_the_same_value() -> None:
    first = pb.plan({"u1": EIGHT}, {}, T0)
    assert first.post == ("u1",) and first.states["u1"].state == "pending"
    sent = pb.after(first.states["u1"], pb.OK, T0)
    assert (sent.state, sent.sent, sent.sent_at) == ("sent", EIGHT, T0)
    for minutes in (1, 15, 600):
        again = pb.plan({"u1": Grade(8, 10)}, {"u1": sent}, T0 + timedelta(minutes=minutes))
        assert again.post == () and again.states["u1"] == sent


def test_a_changed_grade_is_posted_again_and_a_grade_changed_back_is_not() -> None:
    sent = pb.after(pb.want(EIGHT, None), pb.OK, T0)
    changed = pb.plan({"u1": NINE}, {"u1": sent}, T0)
    assert (
        changed.post == ("u1",) and changed.states["u1"].value == NINE and changed.states["u1"].sent == EIGHT
    )
    back = pb.plan({"u1": EIGHT}, {"u1": changed.states["u1"]}, T0)  # changed back before it went out
    assert back.post == () and back.states["u1"].state == "sent"


def test_the_lms_down_means_retries_with_backoff_for_as_long_as_it_takes() -> None:
    state = pb.want(EIGHT, None)
    now = T0
    waits = []
    for _ in range(10):
        assert pb.due(state, now)
        state = pb.after(
            state, pb.Outcome("retry", "The LMS could not take the grade just now (HTTP 503)."), now
        )
        assert state.state == "pending" and "HTTP 503" in state.reason
        assert not pb.due(state, now) and not pb.plan({"u1": EIGHT}, {"u1": state}, now).post
        waits.append((state.next_at - now).total_seconds())
        now = state.next_at
    assert waits == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    assert "Trying again in 60 minutes (attempt 10)" in state.reason
    done = pb.after(state, pb.OK, now)
    assert done.state == "sent" and done.attempts == 0 and done.reason == ""


def test_a_refused_grade_fails_with_the_reason_until_it_changes_or_staff_retry() -> None:
    state = pb.after(pb.want(EIGHT, None), pb.outcome_of(404), T0)
    assert state.state == "failed" and "no longer has this gradebook column" in state.reason
    assert pb.plan({"u1": EIGHT}, {"u1": state}, T0 + timedelta(days=1)).post == ()
    assert pb.plan({"u1": NINE}, {"u1": state}, T0).post == ("u1",)
    assert pb.due(pb.retry(state), T0)


def test_a_grade_that_changes_while_waiting_to_retry_goes_at_once() -> None:
    waiting = pb.after(pb.want(EIGHT, None), pb.Outcome("retry", "down."), T0)
    assert pb.plan({"u1": NINE}, {"u1": waiting}, T0).post == ("u1",)


def test_http_statuses_read_as_outcomes() -> None:
    assert [pb.outcome_of(s).kind for s in (200, 201, 202, 204)] == ["ok"] * 4
    assert [pb.outcome_of(s).kind for s in (408, 429, 500, 502, 503)] == ["retry"] * 5
    assert [pb.outcome_of(s).kind for s in (400, 401, 403, 404, 409, 422, 418)] == ["refused"] * 7
    assert "newer grade" in pb.outcome_of(409).reason


def test_only_students_with_grades_are_planned() -> None:
    sent = pb.after(pb.want(EIGHT, None), pb.OK, T0)
    plan = pb.plan({"u2": NINE}, {"u1": sent}, T0)
    assert plan.post == ("u2",) and plan.states["u1"] == sent
