"""Will a course be ready for its next lecture? (pure)

From the cluster as the operator sees it: the Template's expected environments (its Userlands
that are not suspended) and which of them can start, on how many nodes its images are, and how
much room is held (environments already on a node, placeholders running), a verdict and one
line a teacher reads:

    Ready for 09:00: 300 of 300 environments can start; images on 4/4 nodes; room for 300
    Not ready for 09:00: 300 of 300 environments can start; images on 4/4 nodes; room for 280,
    20 waiting for a node

The verdict is the Template's `LectureReady` condition (True, False; Unknown while the room is
not held yet, before the hold window), /metrics' `userland_lecture_ready`, and the alert when a
lecture is 10 minutes away and the course is not ready (docs/runbooks/UserlandLectureNotReady.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from userland.operator.rules.capacity.images import ImageProgress
from userland.operator.rules.capacity.room import Environment, Window

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Room:
    """Room for the environments: `held` while placeholders hold it (the hold window is open);
    `placeholders`: how many run; `opens`: when the window opens, before it does; `note`: why
    no room is held at all (holding is off, `make run`, nothing to hold); `problem`: why
    placeholders cannot be made (their Deployment's ReplicaFailure: a missing PriorityClass)."""

    held: bool
    placeholders: int = 0
    opens: datetime | None = None
    note: str = ""
    problem: str = ""


@dataclass(frozen=True)
class Readiness:
    status: Status
    reason: str
    message: str
    starts_at: datetime
    expected: int = 0
    can_start: int = 0
    room: int = 0
    waiting: int = 0

    @property
    def ready(self) -> bool:
        return self.status == "True"


def _clock(moment: datetime, zone: str, now: datetime) -> str:
    """`09:00`, or `Tue 09:00` when the lecture is not today, in the schedule's zone."""
    local, today = moment.astimezone(ZoneInfo(zone)), now.astimezone(ZoneInfo(zone))
    return local.strftime("%H:%M") if local.date() == today.date() else local.strftime("%a %H:%M")


def readiness(environments: list[Environment], images: ImageProgress, room: Room, window: Window, *,
              time_zone: str, now: datetime) -> Readiness | None:
    """None when no lecture lies ahead (no schedule)."""
    if window.start is None:
        return None
    expected = len(environments)
    failed = sum(1 for e in environments if e.failed)
    can_start = expected - failed
    on_nodes = sum(1 for e in environments if e.has_room and not e.failed)
    room_for = min(can_start, on_nodes + room.placeholders)
    waiting = can_start - room_for
    parts = [f"{can_start} of {expected} environment{'' if expected == 1 else 's'} can start", images.message]
    if room.note:
        parts.append(room.note)
    elif not room.held:
        parts.append(f"room held from {_clock(room.opens, time_zone, now)}" if room.opens is not None
                     else "no room held")
    else:
        parts.append(f"room for {room_for}" + (f", {waiting} waiting for a node" if waiting else ""))
        if room.problem:
            parts.append(f"placeholders cannot start: {room.problem}")
    reason, status = "Ready", "True"
    status_: Status
    if failed:
        reason, status = "EnvironmentsFailing", "False"
    elif not images.complete:
        reason, status = ("ImagesPulling" if images.reason == "Pulling" else images.reason), "False"
    elif room.held and waiting:
        reason, status = "WaitingForNodes", "False"
    elif not room.held and not room.note:
        reason, status = "RoomNotHeldYet", "Unknown"
    status_ = "True" if status == "True" else "False" if status == "False" else "Unknown"
    words = {"True": "Ready", "False": "Not ready", "Unknown": "Getting ready"}[status_]
    message = f"{words} for {_clock(window.start, time_zone, now)}: " + "; ".join(parts)
    return Readiness(status_, reason, message, window.start, expected, can_start, room_for, waiting)
