"""Whether an environment should be awake now, and when to look again (docs/sleep.md).

Pure: the Userland (its creation time, `userland.dev/last-activity`, and a staff member's
Start: `userland.dev/started-at`), its Template (`idleTimeout`, `schedule`,
`userland.dev/wake-all`) and the time in, a verdict out. The controller scales the Deployment
to zero for an asleep verdict and requeues the Userland at `recheck_at`, so nothing polls
(operator/rules/wake.py adds the wake line).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from userland.platform.model.models import Schedule, Template, Userland

# Why it was last woken (or kept awake): what the Waking Event says.
Cause = Literal["created", "visit", "staff-start", "start-all", "lecture"]
CAUSE_WORDS: dict[Cause, str] = {
    "created": "it was just created",
    "visit": "its student opened it",
    "staff-start": "a staff member started it",
    "start-all": "the whole class was started",
    "lecture": "a lecture is about to start",
}


@dataclass(frozen=True)
class Verdict:
    asleep: bool
    # The latest moment that counts as use (the newest of the sources below) and what it was.
    since: datetime | None = None
    cause: Cause = "created"
    # When the verdict changes by the clock alone (None: never, e.g. no idleTimeout).
    recheck_at: datetime | None = None
    # Who, when a staff member's Start is the cause (`userland.dev/started-by`).
    by: str = ""


def cause_words(verdict: Verdict) -> str:
    """Why it was woken (or kept awake), in words: who, for a staff member's Start."""
    if verdict.cause == "staff-start" and verdict.by:
        return f"{verdict.by} started it"
    return CAUSE_WORDS[verdict.cause]


def _lecture_windows(schedule: Schedule, around: datetime) -> list[tuple[datetime, datetime]]:
    """The wake windows (start - wakeBefore .. end) of the lectures from a week before
    `around` to a week after, as aware datetimes (UTC), in order. Each day's times are read in
    the schedule's zone, so a lecture at 10:15 stays at 10:15 across a DST change."""
    zone = ZoneInfo(schedule.time_zone)
    local = around.astimezone(zone)
    windows = []
    for offset in range(-8, 9):
        day = (local + timedelta(days=offset)).date()
        for lecture in schedule.lectures:
            if day.weekday() not in lecture.days:
                continue
            midnight = datetime(day.year, day.month, day.day, tzinfo=zone)
            start = (midnight + timedelta(minutes=lecture.start_minute)).astimezone(UTC)
            end = (midnight + timedelta(minutes=lecture.end_minute)).astimezone(UTC)
            windows.append((start - timedelta(seconds=schedule.wake_before_seconds), end))
    return sorted(windows)


def verdict(userland: Userland, template: Template, now: datetime, *,
            woke: datetime | None = None) -> Verdict:
    """`woke`: when the operator last scaled it up from sleep (its turn in the wake line came):
    a woken environment gets a whole idleTimeout from then, however long it waited for its turn."""
    idle = template.spec.idle_timeout_seconds
    sources: list[tuple[datetime, Cause]] = []
    if userland.created is not None:
        sources.append((userland.created, "created"))
    if woke is not None:
        sources.append((woke, "visit"))
    if userland.last_activity is not None:
        sources.append((userland.last_activity, "visit"))
    if userland.started_at is not None:
        sources.append((userland.started_at, "staff-start"))
    if template.wake_all is not None:
        sources.append((template.wake_all, "start-all"))
    recheck: datetime | None = None
    schedule = template.spec.schedule
    if schedule is not None:
        windows = _lecture_windows(schedule, now)
        for start, end in windows:
            if start <= now < end:
                # In a lecture: awake whatever happened before; look again when it ends.
                return Verdict(False, start, "lecture", end)
        begun = [start for start, _ in windows if start <= now]
        if begun:
            # The last lecture's wake counts as use, so everyone gets idleTimeout after it.
            sources.append((max(begun), "lecture"))
        upcoming = [start for start, _ in windows if start > now]
        recheck = min(upcoming) if upcoming else None
    # No data at all (an object without a creation time) never counts as idle.
    if not sources:
        return Verdict(False, None, "created", recheck)
    since, cause = max(sources, key=lambda s: s[0])
    by = userland.started_by if cause == "staff-start" else ""
    if idle is None:
        return Verdict(False, since, cause, recheck, by)
    deadline = since + timedelta(seconds=idle)
    if now >= deadline:
        return Verdict(True, since, cause, recheck, by)
    return Verdict(False, since, cause, deadline if recheck is None else min(deadline, recheck), by)
