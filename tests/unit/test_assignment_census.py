"""The assignment census (operator/rules/assignment/census.py) and its collector: counts by course
follow adds, changes and deletes exactly; every phase and state the reconciler writes is one the
census knows; the exposition carries no login and no assignment name."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from userland.operator.metrics import AssignmentCollector, OperatorMetrics
from userland.operator.rules.assignment.census import (
    PHASES,
    STATES,
    AssignmentCensus,
    copies_missing,
    entry_of,
)
from userland.operator.rules.assignment.plan import DONE_STATES

REPO = Path(__file__).resolve().parents[2]


def assignment(name: str, course: str = "c1", phase: str | None = "Open", collected: str | None = None,
               states: tuple[str, ...] = ()) -> dict[str, Any]:
    status: dict[str, Any] = {"students": [{"user": f"s{i}", "template": "lab", "state": state}
                                           for i, state in enumerate(states)]}
    if phase is not None:
        status["phase"] = phase
    if collected is not None:
        status["collected"] = collected
    return {"metadata": {"namespace": course, "name": name}, "spec": {}, "status": status}


def test_copies_missing_reads_the_status_count() -> None:
    assert copies_missing("3/5") == 2
    assert copies_missing("5/5") == 0
    assert copies_missing(None) == 0  # nothing due yet
    assert copies_missing("garbled") == 0
    assert copies_missing("x/5") == 0


def test_an_assignment_not_written_yet_is_on_its_way_out() -> None:
    entry = entry_of({"metadata": {"namespace": "c1", "name": "a"}})
    assert (entry.course, entry.phase, entry.states, entry.copies_missing) == ("c1", "HandingOut", (), 0)


def test_counts_follow_adds_changes_and_deletes() -> None:
    census = AssignmentCensus()
    first = assignment("hw1", states=("HandedOut", "HandedOut", "Conflicts", "Failed"))
    census.observe(None, first)
    census.observe(None, assignment("hw1", course="c2", phase="Scheduled", states=("Scheduled",)))
    assert census.courses() == ["c1", "c2"]
    assert dict(census.phases) == {("c1", "Open"): 1, ("c2", "Scheduled"): 1}
    assert dict(census.states) == {("c1", "HandedOut"): 2, ("c1", "Conflicts"): 1, ("c1", "Failed"): 1,
                                   ("c2", "Scheduled"): 1}
    # The deadline comes: two of four copies taken.
    due = assignment("hw1", phase="Collecting", collected="2/4", states=("HandedOut",) * 4)
    census.observe(first, due)
    assert dict(census.phases) == {("c1", "Collecting"): 1, ("c2", "Scheduled"): 1}
    assert census.states[("c1", "HandedOut")] == 4 and ("c1", "Failed") not in census.states
    assert census.missing["c1"] == 2
    # All taken, then the assignment is deleted: c1 is gone from every count.
    done = assignment("hw1", phase="Collected", collected="4/4", states=("HandedOut",) * 4)
    census.observe(due, done)
    assert "c1" not in census.missing
    census.observe(done, None)
    assert census.courses() == ["c2"]
    assert all(course == "c2" for course, _ in census.phases) and "c1" not in census.missing


def _exposition(census: AssignmentCensus, *, leader: bool = True) -> str:
    metrics = OperatorMetrics()
    metrics.is_leader = leader
    metrics.registry.register(AssignmentCollector(metrics, census))
    return generate_latest(metrics.registry).decode()


def test_the_exposition_has_every_phase_and_state_per_course_and_no_names() -> None:
    census = AssignmentCensus()
    census.observe(None, assignment("secret-hw", phase="Collecting", collected="1/3",
                                    states=("HandedOut", "Failed", "NoEnvironment")))
    text = _exposition(census)
    for phase in PHASES:
        value = 1.0 if phase == "Collecting" else 0.0
        assert f'userland_assignments{{course="c1",phase="{phase}"}} {value}' in text
    for state in STATES:
        value = 1.0 if state in ("HandedOut", "Failed", "NoEnvironment") else 0.0
        assert f'userland_assignment_students{{course="c1",state="{state}"}} {value}' in text
    assert 'userland_assignment_copies_missing{course="c1"} 2.0' in text
    assert "secret-hw" not in text and 's0"' not in text and "s1" not in text
    # The standby exports no state (the leader's figures would be counted twice).
    assert "userland_assignments{" not in _exposition(census, leader=False)


def test_the_grading_queue_per_course_follows_the_statuses() -> None:
    """userland_grading_queue_length and _running (UserlandGradingQueueSlow reads the first): the
    sum of the course's assignments' `grading.queued` and `.running`, kept level on change."""
    def grading(name: str, **counts: int) -> dict[str, Any]:
        obj = assignment(name)
        obj["status"]["grading"] = counts
        return obj
    census = AssignmentCensus()
    one, two = grading("one", queued=40, running=20, graded=3), grading("two", queued=10, running=0)
    census.observe(None, one)
    census.observe(None, two)
    text = _exposition(census)
    assert 'userland_grading_queue_length{course="c1"} 50.0' in text
    assert 'userland_grading_running{course="c1"} 20.0' in text
    census.observe(one, grading("one", queued=0, running=2))
    census.observe(two, None)
    text = _exposition(census)
    assert 'userland_grading_queue_length{course="c1"} 0.0' in text
    assert 'userland_grading_running{course="c1"} 2.0' in text


def _first_words_returned(path: Path, function: str) -> set[str]:
    """The strings a function can return as the first item of its tuples."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                    first = ret.value.elts[0]
                    found |= {n.value for n in ast.walk(first)
                              if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return found


def _states_assigned(path: Path) -> set[str]:
    """Every string assigned to `entry["state"]` or given as a dict's "state" in a module."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                and isinstance(node.targets[0].slice, ast.Constant) and node.targets[0].slice.value == "state"
                and isinstance(node.value, ast.Constant)):
            found.add(node.value.value)
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "state" and isinstance(value, ast.Constant):
                    found.add(value.value)
    return found


def test_every_phase_and_state_the_reconciler_writes_is_counted() -> None:
    status = REPO / "operator" / "rules" / "assignment" / "status.py"
    assert _first_words_returned(status, "_summary") == set(PHASES)
    written = _states_assigned(status) | set(DONE_STATES)
    assert written == set(STATES)
