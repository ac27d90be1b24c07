"""How a course's assignments stand: by phase, students by hand-out state, copies still missing.

Kept level with the Assignment watch by a handler, as operator/rules/census.py keeps the environments'
counts: each add, change and delete replaces that assignment's entry, so a scrape reads a few
counters and never walks 500 students' entries. Counted per course (and phase or state), never
per assignment or student: the labels stay bounded and carry no login (docs/metrics.md).

What is counted comes from the status the reconciler wrote (operator/rules/assignment/status.py), the
same words `kubectl get assignments` and the web UI show:
- `phase`: Scheduled, HandingOut, Open, Collecting, Collected, Failed;
- each student entry's `state`: Scheduled, Waiting, Pending, HandedOut, Conflicts, Failed,
  NoEnvironment (a Pending student of a Failed assignment counts as Failed: their hand-out is
  not under way, and UserlandAssignmentHandOutFailing counts failed students);
- copies missing: students whose moment (deadline, extension, "collect now") has come and whose
  copy of it is not taken, from `collected: "n/N"` (N - n);
- grading (docs/grading.md): copies waiting for a grading slot and copies being graded, from
  `grading.queued` and `grading.running` (the grading queue's length per course).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from userland.operator.rules.census import KeptLevel
from userland.platform.model.objects import meta

JSON = dict[str, Any]
PHASES = ("Scheduled", "HandingOut", "Open", "Collecting", "Collected", "Failed")
STATES = ("Scheduled", "Waiting", "Pending", "HandedOut", "Conflicts", "Failed", "NoEnvironment")
GRADING_STATES = ("Queued", "Running")


@dataclass(frozen=True)
class Entry:
    course: str
    phase: str
    states: tuple[tuple[str, int], ...]
    copies_missing: int
    grading: tuple[tuple[str, int], ...] = ()  # (Queued | Running, copies)


def entry_of(obj: JSON) -> Entry:
    """What one Assignment adds to its course's figures (pure)."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(status, dict)
    phase = str(status.get("phase") or "")
    # Not written yet (or an unknown word from a newer operator): on its way out to students.
    if phase not in PHASES:
        phase = "HandingOut"
    states: Counter[str] = Counter()
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = next((c for c in conditions if c.get("type") == "Ready"), {})
    source_failed = phase == "Failed" and ready.get("reason") != "StoreUnavailable"
    for student in status.get("students") or []:
        state = student.get("state") if isinstance(student, dict) else None
        if state == "Pending" and source_failed:
            # The assignment failed (its source cannot be read): nobody's hand-out is under way,
            # whatever an older operator wrote per student; counted so the alert can fire.
            state = "Failed"
        if state in STATES:
            states[str(state)] += 1
    grading = status.get("grading") if isinstance(status.get("grading"), dict) else {}
    assert isinstance(grading, dict)
    counts = tuple((state, int(grading[state.lower()])) for state in GRADING_STATES
                   if isinstance(grading.get(state.lower()), int) and grading[state.lower()] > 0)
    return Entry(str(meta(obj).get("namespace") or ""), phase, tuple(sorted(states.items())),
                 copies_missing(status.get("collected")), counts)


def copies_missing(collected: object) -> int:
    """N - n of a status's `collected: "n/N"`; 0 when there is nothing to collect yet."""
    if not isinstance(collected, str) or "/" not in collected:
        return 0
    taken, due = collected.split("/", 1)
    try:
        return max(0, int(due) - int(taken))
    except ValueError:
        return 0


class AssignmentCensus(KeptLevel[Entry]):
    """Counts over the Assignments a watch holds; `observe` is an informer handler."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: Counter[tuple[str, str]] = Counter()
        self.states: Counter[tuple[str, str]] = Counter()
        self.missing: Counter[str] = Counter()
        self.grading: Counter[tuple[str, str]] = Counter()
        self.assignments: Counter[str] = Counter()

    def entry(self, obj: JSON) -> Entry:
        return entry_of(obj)

    def _count(self, entry: Entry, sign: int) -> None:
        self.assignments[entry.course] += sign
        self.phases[(entry.course, entry.phase)] += sign
        for state, count in entry.states:
            self.states[(entry.course, state)] += sign * count
        self.missing[entry.course] += sign * entry.copies_missing
        for state, count in entry.grading:
            self.grading[(entry.course, state)] += sign * count
        for counter in (self.assignments, self.phases, self.states, self.missing, self.grading):
            for key in [k for k, v in counter.items() if v <= 0]:
                del counter[key]

    def courses(self) -> list[str]:
        """Every course with at least one Assignment."""
        return sorted(self.assignments)
