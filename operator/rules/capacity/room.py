"""Room held before a lecture by placeholder Pods (pure).

Some minutes before a lecture of a Template's schedule (`USERLAND_HOLD_ROOM_SECONDS`, longer
than the schedule's `wakeBefore`), a Deployment of placeholder Pods of the lowest priority holds
room on the nodes for every environment of the course that has none yet (asleep, or waiting for
a node): each requests what one environment requests, so a cluster autoscaler adds nodes for
them before students arrive, and an environment that starts preempts one at once (its priority
is higher). They are counted down as environments find room, and go at the lecture's start.

- `lectures(schedule, around)`: the lectures (start, end) a week around a moment;
- `next_lecture(schedule, now)`: the first lecture starting after `now`;
- `pod_requests(pod_spec)`: what one Pod of the Template requests, as the scheduler counts it;
- `hold_window(...)` and `placeholders_wanted(...)`: whether room is held now, and for how many;
- `desired_placeholders(...)`: the Deployment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from userland.operator.rules.builders import owner_reference, spec_hash
from userland.operator.rules.capacity.images import (
    CONTAINER_SECURITY,
    POD_SECURITY,
    capacity_labels,
    placement,
)
from userland.platform.model import naming
from userland.platform.model.models import Schedule, Template
from userland.platform.model.settings import Settings

JSON = dict[str, Any]
CAPACITY_ROOM = "room"
_QUANTITY_RE = re.compile(r"([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?"
                          r"(?:[eE]([+-]?[0-9]+))?")
_SUFFIXES: dict[str, Fraction] = {
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60), "m": Fraction(1, 1000), "k": Fraction(10**3),
    "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15),
    "E": Fraction(10**18)}


def lectures(schedule: Schedule, around: datetime) -> list[tuple[datetime, datetime]]:
    """The lectures (start, end, UTC) from a week before `around` to a week after, in order; each
    day's times read in the schedule's zone (a lecture at 09:00 stays at 09:00 across DST)."""
    zone = ZoneInfo(schedule.time_zone)
    local = around.astimezone(zone)
    found = []
    for offset in range(-8, 9):
        day = (local + timedelta(days=offset)).date()
        for lecture in schedule.lectures:
            if day.weekday() in lecture.days:
                midnight = datetime(day.year, day.month, day.day, tzinfo=zone)
                found.append(((midnight + timedelta(minutes=lecture.start_minute)).astimezone(UTC),
                              (midnight + timedelta(minutes=lecture.end_minute)).astimezone(UTC)))
    return sorted(found)


def next_lecture(schedule: Schedule, now: datetime) -> datetime | None:
    return next((start for start, _ in lectures(schedule, now) if start > now), None)


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity (`500m`, `2Gi`, `1.5`, `1e3`) as an exact number (0 when it is not
    one: the API server refuses such a Pod anyway, and its Template's status says so)."""
    match = _QUANTITY_RE.fullmatch(str(text).strip())
    if match is None:
        return Fraction(0)
    number, suffix, exponent = match.groups()
    amount = Fraction(number) * (_SUFFIXES[suffix] if suffix else Fraction(1))
    return amount * Fraction(10) ** int(exponent or 0)


def format_quantity(resource: str, amount: Fraction) -> str:
    """CPU in millicores (`1500m`), anything else as a whole number (bytes, devices), rounded up."""
    if resource == "cpu":
        return f"{-(-amount * 1000 // 1)}m"
    return str(-(-amount // 1))


def pod_requests(pod_spec: JSON) -> dict[str, str]:
    """What the scheduler reserves for one Pod: per resource, the sum of its containers'
    requests, or the largest init container's if that is more (they run one at a time, first)."""
    def requests(container: Any) -> dict[str, Fraction]:
        if not isinstance(container, dict):
            return {}
        found = (container.get("resources") or {}).get("requests") or {}
        return {k: parse_quantity(v) for k, v in found.items() if isinstance(k, str)}
    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in requests(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    for container in pod_spec.get("initContainers") or []:
        for name, amount in requests(container).items():
            total[name] = max(total.get(name, Fraction(0)), amount)
    return {name: format_quantity(name, amount) for name, amount in sorted(total.items()) if amount > 0}


@dataclass(frozen=True)
class Window:
    """Room is held from `opens` until `start` (the lecture's); `start` None: no lecture ahead."""

    start: datetime | None
    opens: datetime | None
    holding: bool

    def recheck_at(self, now: datetime) -> datetime | None:
        """When the window next opens or closes."""
        moments = [m for m in (self.opens, self.start) if m is not None and m > now]
        return min(moments) if moments else None


def hold_window(schedule: Schedule | None, now: datetime, hold_seconds: int) -> Window:
    if schedule is None:
        return Window(None, None, False)
    start = next_lecture(schedule, now)
    if start is None:
        return Window(None, None, False)
    opens = start - timedelta(seconds=hold_seconds)
    return Window(start, opens, hold_seconds > 0 and opens <= now < start)


@dataclass(frozen=True)
class Environment:
    """What capacity needs to know of one expected environment (a Userland not suspended)."""

    failed: bool = False  # its status is Failed: it will not start by itself
    has_room: bool = False  # its Pod is on a node (scheduled, or Ready)


def environment_of(userland_status: JSON) -> Environment:
    """From a Userland's status (operator/rules/status.py writes it)."""
    phase = userland_status.get("phase")
    progress = userland_status.get("progress") or []
    return Environment(failed=phase == "Failed", has_room=phase == "Ready" or "Scheduled" in progress)


def placeholders_wanted(environments: list[Environment], window: Window, requests: dict[str, str]) -> int:
    """One placeholder for each environment that could start and has no room yet, while the
    window is open (and the Template requests something to hold)."""
    if not window.holding or not requests:
        return 0
    return sum(1 for e in environments if not e.failed and not e.has_room)


def desired_placeholders(template: Template, settings: Settings, replicas: int) -> JSON:
    requests = pod_requests(template.spec.pod_spec)
    labels = capacity_labels(template, CAPACITY_ROOM)
    body: JSON = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": naming.placeholders_name(template.name),
            "namespace": template.ref.namespace,
            "labels": {**labels, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
            "ownerReferences": [owner_reference("Template", template.name, template.ref.uid)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate", "rollingUpdate": None},
            "template": {"metadata": {"labels": labels}, "spec": {
                "priorityClassName": settings.placeholder_priority_class,
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "terminationGracePeriodSeconds": 0,
                "securityContext": POD_SECURITY,
                **placement(template.spec.pod_spec),
                "containers": [{"name": "pause", "image": settings.pause_image,
                                "imagePullPolicy": "IfNotPresent",
                                # Limits as requests: a quota that asks for limits admits them.
                                "resources": {"requests": requests, "limits": requests},
                                "securityContext": CONTAINER_SECURITY}],
            }},
        },
    }
    body["metadata"]["annotations"] = {naming.ANNOTATION_SPEC_HASH: spec_hash(body)}
    return body
