"""Fetching a source or a grader's tests once per fingerprint, with a back-off when it fails (the pure
part shared by operator/assignments.py and operator/grading.py: operator/rules/assignment/memory.py)."""

from __future__ import annotations

from userland.operator.rules.assignment.memory import (
    FETCH_RETRY_MAX,
    FetchOutcome,
    fetch_failed,
    fetch_settled,
)
from userland.operator.rules.reconcile import DONE


def test_a_fetch_that_worked_stands_for_its_fingerprint_only() -> None:
    done = FetchOutcome("f1", info={"key": "k", "commit": "c"})
    assert fetch_settled(done, "f1", 100.0) == (done, DONE)
    assert fetch_settled(done, "f2", 100.0) is None
    assert fetch_settled(None, "f1", 100.0) is None


def test_a_failed_fetch_waits_out_its_back_off_then_is_tried_again() -> None:
    failed = fetch_failed(None, "f1", "UnknownRef", "no such ref", 100.0)
    assert failed.delay == 15.0 and failed.retry_at == 115.0
    assert failed.problem == ("UnknownRef", "no such ref")
    settled = fetch_settled(failed, "f1", 105.0)
    assert settled is not None and settled[0] is failed and settled[1].after == 10.0
    assert fetch_settled(failed, "f1", 115.0) is None


def test_the_back_off_doubles_up_to_ten_minutes_and_starts_over_for_a_new_fingerprint() -> None:
    outcome = None
    delays = []
    for _ in range(8):
        outcome = fetch_failed(outcome, "f1", "Unauthorized", "no", 0.0)
        delays.append(outcome.delay)
    assert delays == [15.0, 30.0, 60.0, 120.0, 240.0, 480.0, FETCH_RETRY_MAX, FETCH_RETRY_MAX]
    assert fetch_failed(outcome, "f2", "Unauthorized", "no", 0.0).delay == 15.0


def test_a_store_that_does_not_answer_is_tried_again_sooner() -> None:
    first = fetch_failed(None, "f1", "StoreUnavailable", "down", 0.0)
    assert first.delay == 2.0
    assert fetch_failed(first, "f1", "StoreUnavailable", "down", 0.0).delay == 4.0
