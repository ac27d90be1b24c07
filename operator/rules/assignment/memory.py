"""What the Assignment reconciler remembers of each Assignment between passes, and how a new
leader rebuilds it from the Assignment's status (pure; operator/rules/reconcile.py has the contract).

- `fetch`: the last fetch of its source (`FetchOutcome`). Rebuilt from `status.source`: the
  commit the status names for a fingerprint is not fetched again. A fetch that failed is not in
  the status (only its reason is): a new leader tries it again at once, then backs off.
- `store_delay`: the back-off while the store does not answer (starts over with a new leader).
- `members_told`: the students the store was last told of (told again once by a new leader:
  the store takes the same list twice without harm, and skipping it could lose a change).
- `copies_seen`: the copies whose delay after their moment was measured (each once). Rebuilt
  from `status.students[].collected`: a copy of a round the status already shows was measured
  by the leader that wrote it; one that came since is measured by the new leader.
- `status_written`: the last status write (operator/rules/reconcile.py `ObjectMemory`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from userland.operator.rules.assignment.plan import Source
from userland.operator.rules.reconcile import DONE, ObjectMemory, Result
from userland.platform.model.coursework import env_key, round_id
from userland.platform.model.models import parse_time

JSON = dict[str, Any]
# A source (or tests) that cannot be had is tried again after 15 s, then twice as long each time,
# at most 10 minutes; a store that does not answer (yet: it may be starting) from 2 s.
FETCH_RETRY_FIRST, FETCH_RETRY_MAX = 15.0, 600.0
STORE_RETRY_FIRST = 2.0
STORE_UNAVAILABLE = "StoreUnavailable"


@dataclass(frozen=True)
class FetchOutcome:
    """The last fetch of a source of one fingerprint (url, ref, folder, token, "hand out again"):
    its status entry (`info`), or the problem (reason, message) and when to try again."""

    fingerprint: str
    info: JSON | None = None
    problem: tuple[str, str] | None = None
    retry_at: float = 0.0  # monotonic seconds
    delay: float = 0.0  # the back-off that led to `retry_at`; doubled after the next failure

    @property
    def source(self) -> Source | None:
        if self.info is None:
            return None
        return Source(str(self.info["key"]), str(self.info["commit"]))


def fetch_settled(known: FetchOutcome | None, wanted: str, now: float) -> tuple[FetchOutcome, Result] | None:
    """What stands without fetching (fetched once per fingerprint): `known`'s fetch of `wanted`
    that worked (done), or one that failed while its back-off runs (look again when it ends).
    None: fetch now (`now` and `retry_at` are monotonic seconds)."""
    if known is None or known.fingerprint != wanted:
        return None
    if known.info is not None:
        return known, DONE
    if now < known.retry_at:
        return known, Result.again_in(known.retry_at - now)
    return None


def fetch_failed(known: FetchOutcome | None, wanted: str, reason: str, message: str,
                 now: float) -> FetchOutcome:
    """A fetch of `wanted` that failed: tried again after twice the last back-off (of the same
    fingerprint), from 2 s (the store not answering) or 15 s (anything else), at most 10 minutes."""
    last = known.delay if known is not None and known.fingerprint == wanted else 0.0
    first = STORE_RETRY_FIRST if reason == STORE_UNAVAILABLE else FETCH_RETRY_FIRST
    delay = min(max(last * 2, first), FETCH_RETRY_MAX)
    return FetchOutcome(wanted, problem=(reason, message), retry_at=now + delay, delay=delay)


@dataclass
class AssignmentMemory(ObjectMemory):
    fetch: FetchOutcome | None = None
    tests: FetchOutcome | None = None  # the grader's tests (operator/grading.py)
    store_delay: float | None = None
    members_told: tuple[str, list[tuple[str, str]]] | None = None
    copies_seen: set[tuple[str, str]] = field(default_factory=set)  # (round id, env key)
    # Per env key, the newest round the status shows a copy of: that round and earlier were seen.
    copies_shown: dict[str, str] = field(default_factory=dict)

    def first_sight(self, round_name: str, env: str) -> bool:
        """Whether this copy is new to this leader (and remember it)."""
        if (round_name, env) in self.copies_seen or round_name <= self.copies_shown.get(env, ""):
            return False
        self.copies_seen.add((round_name, env))
        return True


def rebuild(obj: JSON) -> AssignmentMemory:
    """What the Assignment's status says was done: the commit fetched, the copies shown."""
    status = obj.get("status") or {}
    memory = AssignmentMemory()
    source = status.get("source") or {}
    if source.get("fingerprint") and source.get("key") and source.get("commit"):
        memory.fetch = FetchOutcome(str(source["fingerprint"]), info=dict(source))
    tests = (status.get("grading") or {}).get("tests") or {}
    if tests.get("fingerprint") and tests.get("key") and tests.get("commit"):
        memory.tests = FetchOutcome(str(tests["fingerprint"]), info=dict(tests))
    for entry in status.get("students") or []:
        collected = entry.get("collected") if isinstance(entry, dict) else None
        moment = parse_time((collected or {}).get("round")) if isinstance(collected, dict) else None
        if moment is not None:
            env = env_key(str(entry.get("template")), str(entry.get("user")))
            memory.copies_shown[env] = round_id(moment)
    return memory
