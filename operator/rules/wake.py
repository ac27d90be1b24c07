"""Sleep, wake and the wake line, decided: what the environment should be now, and when to look
again (pure; operator/rules/sleep.py has the verdict, operator/rules/wake_rate.py the line).

A wake goes through the line (a fair rate limit for a class arriving at once). The reconcile
asks in three steps, so that only the middle one touches the line's state:

1. `sleep.verdict(...)`: asleep or awake by the clock and the sources of use;
2. `wants_turn(...)`: does it need a turn in the wake line (it is scaled down, not suspended,
   and either awake by the verdict or already waiting)? Only then the line is asked
   (`WakeRate.wait`: 0 = its turn is now, else seconds until it may be);
3. `decide(...)`: the verdict the children and the status follow, whether it waits in line,
   whether it woke now, and when to look again.

A wake, once asked, is carried out: an environment waiting in the line stays in it even if its
idleTimeout passes while it waits (a class of 300 at 5 a second waits up to a minute), and it
gets a whole idleTimeout from the moment it is scaled up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from userland.operator.rules import sleep
from userland.operator.rules.sleep import Verdict
from userland.platform.model.models import Template, Userland

# Look again a little after the moment, so the clock has certainly passed it.
RECHECK_MARGIN = timedelta(seconds=0.5)


@dataclass(frozen=True)
class WakeDecision:
    verdict: Verdict  # what the children (replicas) and the status follow
    waking: bool = False  # waiting for its turn in the wake line: stays scaled down for now
    in_line: bool = False  # keeps (or takes) its place in the line; False: it leaves the line
    woke: bool = False  # scaled up from sleep now: it gets a whole idleTimeout from `now`
    look_again_at: datetime | None = None  # when the decision changes by the clock alone
    # While waking (in line, or its turn now): when it was asked for, the use or start that woke
    # it (the verdict's `since`); the wake's latency counts from here (operator/lifecycle.py).
    asked_at: datetime | None = None


def wants_turn(userland: Userland, verdict: Verdict, *, scaled_down: bool, in_line: bool) -> bool:
    return not userland.spec.suspended and scaled_down and (not verdict.asleep or in_line)


def _earliest(*moments: datetime | None) -> datetime | None:
    found = [m for m in moments if m is not None]
    return min(found) if found else None


def decide(userland: Userland, template: Template, verdict: Verdict, *, now: datetime,
           turn_in: float | None) -> WakeDecision:
    """`verdict`: step 1's; `turn_in`: the line's answer (step 2), None when not asked."""
    recheck = None if verdict.recheck_at is None else verdict.recheck_at + RECHECK_MARGIN
    if turn_in is None:
        return WakeDecision(verdict, look_again_at=recheck)
    if turn_in > 0:
        return WakeDecision(replace(verdict, asleep=False), waking=True, in_line=True,
                            look_again_at=_earliest(recheck, now + timedelta(seconds=turn_in)),
                            asked_at=verdict.since)
    # Its turn: awake from now on; the cause stays what woke it (for the Waking Event).
    awake = sleep.verdict(userland, template, now, woke=now)
    awake = replace(awake, cause=verdict.cause, by=verdict.by)
    later = None if awake.recheck_at is None else awake.recheck_at + RECHECK_MARGIN
    return WakeDecision(awake, woke=True, look_again_at=_earliest(recheck, later), asked_at=verdict.since)
