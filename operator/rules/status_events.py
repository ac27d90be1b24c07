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
- a Template: an Event when its Ready reason changes; when its images come to be on every
  node (`ImagesPulled`, Normal); and when whether its course is ready for the next lecture
  changes (`ReadyForLecture` Normal, `NotReadyForLecture` Warning: docs/capacity.md; none for
  a course with no students expected, `NoStudents`). The changing counts of a pull or of room
  say nothing new by themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from userland.operator.rules.capacity.readiness import NO_STUDENTS
from userland.operator.rules.sleep import Verdict, cause_words
from userland.platform.model.objects import JSON, ready_condition

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


def _condition(status: JSON, kind: str) -> JSON:
    found = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == kind]
    return found[0] if found else {}


def template_events(old: JSON, new: JSON) -> list[EventNote]:
    notes = []
    old_ready, new_ready = ready_condition(old), ready_condition(new)
    if old_ready.get("reason") != new_ready.get("reason"):
        normal = new_ready.get("status") == "True"
        notes.append(EventNote("Normal" if normal else "Warning", str(new_ready.get("reason") or ""),
                               str(new_ready.get("message") or "")))
    old_images, new_images = _condition(old, "ImagesPulled"), _condition(new, "ImagesPulled")
    if new_images.get("reason") == "Pulled" and old_images.get("reason") != "Pulled":
        notes.append(EventNote("Normal", "ImagesPulled", str(new_images.get("message") or "")))
    old_lecture, new_lecture = _condition(old, "LectureReady"), _condition(new, "LectureReady")
    # A course with no students expected is neither ready nor not: no event of its own, and the
    # first verdict once students come is told.
    was = None if old_lecture.get("reason") == NO_STUDENTS else old_lecture.get("status")
    if new_lecture and new_lecture.get("reason") != NO_STUDENTS and new_lecture.get("status") != was and \
            new_lecture.get("status") in ("True", "False"):
        ready = new_lecture.get("status") == "True"
        notes.append(EventNote("Normal" if ready else "Warning",
                               "ReadyForLecture" if ready else "NotReadyForLecture",
                               str(new_lecture.get("message") or "")))
    return notes
