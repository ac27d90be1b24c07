"""What happens to environments over time, measured where it is decided: the reconcile.

Every reconcile of a Userland tells `Lifecycle.seen` the status before and after (written or
not). From the changes of phase it keeps, per environment that is waiting to become ready, an
*episode*: what started the wait and since when. When the environment becomes Ready the wait is
observed (docs/metrics.md):

- created: from the Userland's creation to its first Ready (`userland_environment_start_seconds`);
- woken from sleep: from the request that woke it (the student's visit, a staff member's Start,
  start-all, a lecture: the sleep verdict's `since`, which the gateway stamps when the student
  asks) to Ready, its time in the wake line included (`userland_environment_wake_seconds`);
- resumed, restarted, recovering, or found waiting by a new leader: not timed (no request time
  is known), but counted while they wait.

An episode ends at Ready, Failed (a failed wake is counted), or when the environment goes to
sleep, is suspended or deleted. Counters: sleeps and wakes (by cause) and failures (by kind,
operator/rules/census.py). `longest_waits` gives, per course, how long its longest-waiting
environment has waited: what an alert on students waiting reads.

Only the leader reconciles, so only the leader counts. A new leader does not know the episodes
its predecessor saw begin: it counts those environments as waiting from the moment it saw
them, and does not time them (documented in docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from userland.operator.metrics import OperatorMetrics
from userland.operator.rules.census import failure_kind, phase_of
from userland.operator.rules.wake import WakeDecision

JSON = dict[str, Any]
Key = tuple[str, str]  # namespace, name
WAITING = frozenset({"Pending", "Starting"})


@dataclass(frozen=True)
class Episode:
    cause: str  # created, woken, resumed, restarted, retried, unknown
    since: datetime
    course: str
    template: str


def _seconds(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds())


class Lifecycle:
    def __init__(self, metrics: OperatorMetrics, clock: Callable[[], datetime]) -> None:
        self.metrics = metrics
        self.clock = clock
        self.episodes: dict[Key, Episode] = {}

    def seen(self, key: Key, template: str, old: JSON | None, new: JSON, *, created: datetime | None,
             decision: WakeDecision | None, now: datetime) -> None:
        """A reconcile found `old` and decided `new` (whether or not it had to write)."""
        course = key[0]
        written = bool((old or {}).get("phase"))
        before, after = (phase_of(old) if written else ""), phase_of(new)
        m = self.metrics
        if after == "Idle" and before != "Idle":
            m.sleeps.labels(course, template).inc()
        kind = failure_kind(new)
        if kind is not None and kind != failure_kind(old if written else None):
            m.failures.labels(course, template, kind).inc()
        episode = self.episodes.get(key)
        if episode is None and after not in ("Idle", "Suspended"):
            episode = self._begin(key, template, before, after, created=created, decision=decision, now=now)
        if episode is None:
            return
        if after == "Ready":
            del self.episodes[key]
            if episode.cause == "created":
                m.start_seconds.labels(course, template).observe(_seconds(now, episode.since))
            elif episode.cause == "woken":
                m.wake_seconds.labels(course, template).observe(_seconds(now, episode.since))
        elif after == "Failed":
            del self.episodes[key]
            if episode.cause == "woken":
                m.wake_failures.labels(course, template).inc()
        elif after not in WAITING:
            del self.episodes[key]  # asleep again, or suspended: nobody waits any more

    def _begin(self, key: Key, template: str, before: str, after: str, *, created: datetime | None,
               decision: WakeDecision | None, now: datetime) -> Episode | None:
        if before == "":
            episode = Episode("created", created or now, key[0], template)
        elif before == "Idle":
            woke_by = decision.verdict.cause if decision is not None else "visit"
            self.metrics.wakes.labels(key[0], template, woke_by).inc()
            asked = decision.asked_at if decision is not None else None
            episode = Episode("woken", asked or now, key[0], template)
            self.metrics.wake_failures.labels(key[0], template)  # its series, at 0 until one fails
        elif after not in WAITING:
            return None  # Ready or Failed, and it was not waiting before: nothing began
        else:
            cause = {"Suspended": "resumed", "Ready": "restarted", "Failed": "retried"}.get(before, "unknown")
            episode = Episode(cause, now, key[0], template)
        self.episodes[key] = episode
        return episode

    def forget(self, key: Key) -> None:
        """A deleted Userland: its wait ends untimed."""
        self.episodes.pop(key, None)

    def longest_waits(self) -> dict[str, float]:
        """Per course, how long its longest-waiting environment has waited (seconds), now."""
        now = self.clock()
        longest: dict[str, float] = {}
        for episode in self.episodes.values():
            waited = _seconds(now, episode.since)
            longest[episode.course] = max(longest.get(episode.course, 0.0), waited)
        return longest
