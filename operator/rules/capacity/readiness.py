"""Will a course be ready for its next lecture? (pure)

From the cluster as the operator sees it: the Template's expected environments (its Userlands
that are not suspended) and which of them can start, on how many servers (nodes) its images are,
and how much room is held (environments already on a node, placeholders running), a verdict and
one line a teacher reads on the class dashboard, in their words (no Pods, nodes or images):

    Ready for the lecture at 09:00: 300 of 300 environments can start; software on all 4
    servers; room for all 300
    Not ready for the lecture at 09:00: 300 of 300 environments can start; software on all 4
    servers; room for 280 of 300 (20 would wait for a server to be added)
    No students yet for the lecture at 09:00: no environment to start ahead (none in this
    course, or all suspended)

The verdict is the Template's `LectureReady` condition (True, False; Unknown while the room is
not held yet, before the hold window), /metrics' `userland_lecture_ready`, and the alert when a
lecture is 10 minutes away and the course is not ready (docs/runbooks/UserlandLectureNotReady.md).
Its reason says which part is missing for an admin; the details an admin needs are elsewhere
(the `ImagesPulled` condition says "images on 3/4 nodes", the placeholders' Deployment why they
cannot start).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from userland.operator.rules.capacity.images import ImageProgress
from userland.operator.rules.capacity.room import Environment, Window

Status = Literal["True", "False", "Unknown"]
NO_STUDENTS = "NoStudents"  # the verdict's reason when no environment is expected


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


def _when(moment: datetime, zone: str, now: datetime) -> str:
    """`at 09:00`, or `on Tue at 09:00` when the lecture is not today, in the schedule's zone."""
    local, today = moment.astimezone(ZoneInfo(zone)), now.astimezone(ZoneInfo(zone))
    return f"at {local:%H:%M}" if local.date() == today.date() else f"on {local:%a} at {local:%H:%M}"


def _clock(moment: datetime, zone: str, now: datetime) -> str:
    """`09:00`, or `Tue 09:00` when it is not today."""
    local, today = moment.astimezone(ZoneInfo(zone)), now.astimezone(ZoneInfo(zone))
    return f"{local:%H:%M}" if local.date() == today.date() else f"{local:%a %H:%M}"


def software(images: ImageProgress) -> str:
    """Where the Template's images are, as a teacher reads it."""
    if images.reason == "ImagesLocal":
        return "software on this machine"
    if images.reason == "NoNodes":
        return "no server can run these environments: tell your admin"
    if images.reason == "Pulled" and images.nodes:
        return "software on the server" if images.nodes == 1 else f"software on all {images.nodes} servers"
    if images.reason in ("Pulled", "NotInUse"):
        return "software ready"  # nothing to pull yet (no environment uses the Template)
    copying = (f"software on {images.ready} of {images.nodes} servers, still copying" if images.nodes
               else "software being copied to the servers")
    return f"{copying} (taking long: students may wait for it)" if images.late else copying


def readiness(environments: list[Environment], images: ImageProgress, room: Room, window: Window, *,
              time_zone: str, now: datetime) -> Readiness | None:
    """None when no lecture lies ahead (no schedule)."""
    if window.start is None:
        return None
    expected = len(environments)
    if expected == 0:
        # Nobody to start: "0 of 0 environments can start ... room for 0" says nothing true.
        # Nothing can fail for want of room or software either, so the verdict is True (no alert),
        # with a reason of its own that tells no event (operator/rules/status_events.py).
        return Readiness("True", NO_STUDENTS,
                         f"No students yet for the lecture {_when(window.start, time_zone, now)}: no "
                         "environment to start ahead (none in this course, or all suspended)", window.start)
    failed = sum(1 for e in environments if e.failed)
    can_start = expected - failed
    on_nodes = sum(1 for e in environments if e.has_room and not e.failed)
    room_for = min(can_start, on_nodes + room.placeholders)
    waiting = can_start - room_for
    parts = [f"{can_start} of {expected} environment{'' if expected == 1 else 's'} can start",
             software(images)]
    if room.note:
        parts.append(room.note)
    elif not room.held and waiting:
        parts.append(f"room will be held from {_clock(room.opens, time_zone, now)}" if room.opens is not None
                     else "no room held")
    elif room.problem and waiting:
        parts.append(f"room for {room_for} of {can_start} ({waiting} would wait: room for them cannot be "
                     "held ahead, tell your admin)")
    elif waiting:
        parts.append(f"room for {room_for} of {can_start} ({waiting} would wait for a server to be added)")
    else:
        parts.append(f"room for all {room_for}" if room_for > 1 else f"room for {room_for}")
    reason, status = "Ready", "True"
    status_: Status
    if failed:
        reason, status = "EnvironmentsFailing", "False"
    elif not images.complete:
        reason, status = ("ImagesPulling" if images.reason == "Pulling" else images.reason), "False"
    elif room.held and waiting:
        reason, status = ("RoomRefused" if room.problem else "WaitingForNodes"), "False"
    elif not room.held and not room.note and waiting:
        # (Everyone already on a node needs no room held: ready, even before the window opens,
        # so a hold window shorter than the alert's 10 minutes does not page for a full class.)
        reason, status = "RoomNotHeldYet", "Unknown"
    status_ = "True" if status == "True" else "False" if status == "False" else "Unknown"
    words = {"True": "Ready", "False": "Not ready", "Unknown": "Getting ready"}[status_]
    message = f"{words} for the lecture {_when(window.start, time_zone, now)}: " + "; ".join(parts)
    return Readiness(status_, reason, message, window.start, expected, can_start, room_for, waiting)
