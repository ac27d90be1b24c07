"""Which Kubernetes Events a status change tells (pure): the story `kubectl describe` reads.

An Event says what happened and its real cause, once, when it happens:

- falling asleep: `Sleeping`, with the Ready condition's words (asleep since when, after how
  long without use);
- waking from sleep: `Waking`, "<app> is waking up: <why>" (its student opened it, <login>
  started it, the whole class was started, a lecture is about to start, ...);
- any other change of the Ready condition's status or reason: an Event of that reason with its
  message; `Normal` for Ready, Starting, Waking and Suspended, `Warning` for the rest (a
  failure an admin should look at). The first "Starting" of a new Userland is not told: the
  "Created" Event of its children already says it.
- a Template: an Event when its Ready reason changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from userland.operator.sleep import Verdict, cause_words
from userland.platform.objects import JSON, ready_condition

NORMAL_REASONS = ("Starting", "Waking", "Suspended")


@dataclass(frozen=True)
class EventNote:
    type: str  # Normal | Warning
    reason: str
    message: str


def userland_events(old: JSON, new: JSON, *, app: str, verdict: Verdict | None) -> list[EventNote]:
    """The Events for a Userland whose status goes from `old` to `new` (`app`: its display name;
    `verdict`: the sleep verdict it followed, None without a Template)."""
    old_ready, new_ready = ready_condition(old), ready_condition(new)
    if new.get("phase") == "Idle" and old.get("phase") != "Idle":
        return [EventNote("Normal", "Sleeping", str(new_ready.get("message") or ""))]
    if old.get("phase") == "Idle" and new.get("phase") != "Idle" and verdict is not None:
        return [EventNote("Normal", "Waking", f"{app} is waking up: {cause_words(verdict)}")]
    first_start = not old_ready and new_ready.get("reason") == "Starting"
    if first_start or (old_ready.get("status"), old_ready.get("reason")) == (
            new_ready.get("status"), new_ready.get("reason")):
        return []
    normal = new_ready.get("status") == "True" or new_ready.get("reason") in NORMAL_REASONS
    return [EventNote("Normal" if normal else "Warning", str(new_ready.get("reason") or ""),
                      str(new_ready.get("message") or ""))]


def invalid_userland_events(old: JSON, new: JSON) -> list[EventNote]:
    """A Userland whose spec cannot be read: said each time what is wrong changes."""
    ready = ready_condition(new)
    if ready_condition(old) == ready and old.get("phase") == new.get("phase"):
        return []
    return [EventNote("Warning", "InvalidSpec", str(ready.get("message") or ""))]


def template_events(old: JSON, new: JSON) -> list[EventNote]:
    old_ready, new_ready = ready_condition(old), ready_condition(new)
    if old_ready.get("reason") == new_ready.get("reason"):
        return []
    normal = new_ready.get("status") == "True"
    return [EventNote("Normal" if normal else "Warning", str(new_ready.get("reason") or ""),
                      str(new_ready.get("message") or ""))]
