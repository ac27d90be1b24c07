"""Fetching a repository's folder to the store once per fingerprint, with a back-off when it fails:
the Assignment's source (operator/assignments.py) and its grader's tests (operator/grading.py).
The decisions are pure (operator/rules/assignment/memory.py `fetch_settled`, `fetch_failed`);
this is the call between them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from userland.operator.rules.assignment.memory import (
    STORE_UNAVAILABLE,
    FetchOutcome,
    fetch_failed,
    fetch_settled,
)
from userland.operator.rules.reconcile import DONE, Result
from userland.platform.clients.store_client import FetchRefused, StoreError

JSON = dict[str, Any]


class TokenProblem(Exception):
    """The repository's token cannot be used (no Secret, no key, not allowed for that host)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


async def fetch_once(known: FetchOutcome | None, wanted: str, fetch: Callable[[], Awaitable[JSON]],
                     info_of: Callable[[JSON], JSON]) -> tuple[FetchOutcome, Result, bool]:
    """`known` if it stands for `wanted`, else the outcome of `fetch()` now (its answer made the
    status entry by `info_of`); when to look again; and whether a fetch was made (for the caller's
    log, metrics and events)."""
    settled = fetch_settled(known, wanted, time.monotonic())
    if settled is not None:
        return settled[0], settled[1], False
    try:
        fetched = await fetch()
    except (TokenProblem, StoreError) as err:  # StoreUnavailable and FetchRefused are StoreErrors
        reason = err.reason if isinstance(err, FetchRefused | TokenProblem) else STORE_UNAVAILABLE
        outcome = fetch_failed(known, wanted, reason, err.message, time.monotonic())
        return outcome, Result.again_in(outcome.delay), True
    return FetchOutcome(wanted, info=info_of(fetched)), DONE, True
