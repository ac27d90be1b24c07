"""Grade passback, one student at a time: what to post, and what a post's answer means. Pure.

Each student of an Assignment linked to a line item has a `Passback`: the grade last accepted
by the LMS (`sent`), the grade being sent now (`value`), and a state staff see:

- `sent`: the LMS has this grade. Nothing is posted while the grade stays the same, however
  often the sync runs: the same value is never posted twice.
- `pending`: a grade waits to go, due now or at `next_at` (the LMS was down or slow: retried
  with backoff, 30 s doubling to an hour, for as long as it takes: a grade is never dropped).
- `failed`: the LMS refused this grade for a reason retrying will not fix (the student is not
  in the LMS course, the column was deleted, Userland's access was withdrawn). It is posted
  again when the grade changes, or when staff ask (`retry`).

`plan(grades, states, now)` says whose grade to post now; `after(state, outcome, now)` gives
the state after an answer; `outcome_of(status)` reads an HTTP status as an outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from userland.platform.model.lti_services_grades import Grade

State = Literal["pending", "sent", "failed"]
FIRST_RETRY_SECONDS = 30.0
MAX_RETRY_SECONDS = 3600.0


@dataclass(frozen=True)
class Passback:
    state: State
    value: Grade  # the grade being sent (pending, failed) or last sent (sent)
    sent: Grade | None = None  # the grade the LMS last accepted
    attempts: int = 0  # failed attempts for `value`
    next_at: datetime | None = None  # pending: not before this time
    reason: str = ""  # pending after a failure, failed: why, for staff
    sent_at: datetime | None = None


@dataclass(frozen=True)
class Outcome:
    kind: Literal["ok", "retry", "refused"]
    reason: str = ""


OK = Outcome("ok")


def backoff(attempts: int) -> timedelta:
    """30 s, 60 s, 2 min ... at most an hour, after the `attempts`-th failure in a row."""
    return timedelta(seconds=min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** max(0, attempts - 1)))


def want(grade: Grade, state: Passback | None) -> Passback:
    """The state once `grade` is what Userland holds: unchanged when it is already being sent,
    sent, or refused; a new pending value (due at once) when it changed."""
    if state is None:
        return Passback(state="pending", value=grade)
    if state.value == grade:
        return state
    if state.sent == grade:  # changed back to what the LMS already has
        return replace(state, state="sent", value=grade, attempts=0, next_at=None, reason="")
    return replace(state, state="pending", value=grade, attempts=0, next_at=None, reason="")


def due(state: Passback, now: datetime) -> bool:
    return state.state == "pending" and (state.next_at is None or state.next_at <= now)


def retry(state: Passback) -> Passback:
    """Staff asked to send a refused grade again."""
    if state.state != "failed":
        return state
    return replace(state, state="pending", attempts=0, next_at=None, reason="")


@dataclass(frozen=True)
class Plan:
    states: dict[str, Passback]  # every student's state once the grades are taken in
    post: tuple[str, ...]  # whose grade to post now, in order


def plan(grades: Mapping[str, Grade], states: Mapping[str, Passback], now: datetime) -> Plan:
    """`grades`: LMS user id -> the grade Userland holds (students with none are left out)."""
    updated = dict(states)
    for user, grade in grades.items():
        updated[user] = want(grade, states.get(user))
    post = tuple(sorted(user for user in grades if due(updated[user], now)))
    return Plan(states=updated, post=post)


def after(state: Passback, outcome: Outcome, now: datetime) -> Passback:
    if outcome.kind == "ok":
        return Passback(state="sent", value=state.value, sent=state.value, sent_at=now)
    if outcome.kind == "refused":
        return replace(
            state, state="failed", attempts=state.attempts + 1, next_at=None, reason=outcome.reason
        )
    attempts = state.attempts + 1
    wait = backoff(attempts)
    return replace(
        state,
        state="pending",
        attempts=attempts,
        next_at=now + wait,
        reason=f"{outcome.reason} Trying again in {_words(wait)} (attempt {attempts}).",
    )


def deferred(state: Passback, reason: str, until: datetime) -> Passback:
    """Not tried this round because the LMS was not answering: due again with the others."""
    return replace(state, state="pending", next_at=until, reason=reason)


def _words(wait: timedelta) -> str:
    seconds = int(wait.total_seconds())
    if seconds < 120:
        return f"{seconds} seconds"
    if seconds < 7200:
        return f"{seconds // 60} minutes"
    return f"{seconds // 3600} hours"


def outcome_of(status: int) -> Outcome:
    """An AGS score post's HTTP status as an outcome, with the reason in staff's words."""
    if status in (200, 201, 202, 204):
        return OK
    if status == 408 or status == 429 or status >= 500:
        return Outcome("retry", f"The LMS could not take the grade just now (HTTP {status}).")
    if status in (401, 403):
        return Outcome(
            "refused",
            f"The LMS refused Userland's grade (HTTP {status}): check that Assignment "
            "and Grade Services are enabled for Userland in the LMS.",
        )
    if status == 404:
        return Outcome(
            "refused",
            "The LMS no longer has this gradebook column (HTTP 404): it may have been deleted in the LMS.",
        )
    if status == 409:
        return Outcome("refused", "The LMS already holds a newer grade for this student (HTTP 409).")
    if status in (400, 422):
        return Outcome(
            "refused",
            f"The LMS refused the grade (HTTP {status}): the student may not be in the LMS course any more.",
        )
    return Outcome("refused", f"The LMS refused the grade (HTTP {status}).")
