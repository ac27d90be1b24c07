"""What an Assignment's status says of its grading (pure; docs/grading.md).

Added to the Assignment's own status: `graded` ("28/30": copies graded of all collected),
`grading` (the tests graded with, and how many copies are queued, running, graded, failed),
each student's entry's `grading` (state Queued, Running, Graded or Failed, with the score or the
reason), and the `Grading` condition: True once every collected copy is graded, False with the
reason otherwise (an invalid grader in the words of platform/model/grading.py, tests that cannot
be fetched, copies still being graded, copies that failed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from userland.operator.rules.grading.plan import GradingPlan
from userland.operator.rules.status import stamped_condition
from userland.platform.model.grading import Grader, GraderProblem
from userland.platform.model.models import Condition
from userland.platform.model.objects import rfc3339

JSON = dict[str, Any]
STATES = ("Queued", "Running", "Graded", "Failed")


def _condition(grader: Grader | GraderProblem, tests_problem: tuple[str, str] | None,
               plan: GradingPlan | None, counts: dict[str, int]) -> tuple[Literal["True", "False"], str, str]:
    """(status, reason, message)."""
    if isinstance(grader, GraderProblem):
        return "False", grader.reason, grader.message
    if tests_problem is not None:
        reason, message = tests_problem
        return "False", f"Tests{reason}", f"The tests cannot be fetched: {message}"
    if plan is None:
        return "False", "FetchingTests", "the tests are being fetched"
    total = sum(counts.values())
    if counts["Queued"] or counts["Running"]:
        return "False", "Grading", (f"{counts['Graded'] + counts['Failed']} of {total} copies graded; "
                                    f"{counts['Running']} running, {counts['Queued']} queued")
    if counts["Failed"]:
        failed = [e for e in plan.states.values() if e.get("state") == "Failed"]
        return "False", "GradingFailed", (f"{counts['Failed']} of {total} copies could not be graded: "
                                          f"{failed[0].get('message') or failed[0].get('reason')}")
    if not total:
        return "True", "NothingToGrade", "no copy has been collected yet"
    return "True", "Graded", f"every copy is graded ({total})"


def grading_status(grader: Grader | GraderProblem, tests: JSON | None, tests_problem: tuple[str, str] | None,
                   plan: GradingPlan | None, old_conditions: list[JSON], generation: int, *,
                   now: datetime) -> JSON:
    """The grading part of the status (merged into the Assignment's by the caller)."""
    counts = {state: 0 for state in STATES}
    for entry in (plan.states.values() if plan is not None else ()):
        counts[str(entry.get("state"))] = counts.get(str(entry.get("state")), 0) + 1
    status, reason, message = _condition(grader, tests_problem, plan, counts)
    condition = Condition("Grading", status, reason, message, "", generation)
    total = sum(counts.values())
    summary: JSON = {"tests": tests, **{state.lower(): counts[state] for state in STATES}}
    if isinstance(grader, Grader):
        summary["maxScore"] = grader.max_score
        summary["timeLimitSeconds"] = grader.time_limit
    return {
        "graded": f"{counts['Graded']}/{total}" if plan is not None else None,
        "grading": summary,
        "condition": stamped_condition(old_conditions, condition, rfc3339(now)),
        "students": dict(plan.states) if plan is not None else {},
    }


def merge(status: JSON, grading: JSON) -> JSON:
    """The Assignment's status with its grading part in it."""
    status["graded"] = grading["graded"]
    status["grading"] = grading["grading"]
    status["conditions"] = [*status.get("conditions", []), grading["condition"]]
    checks = grading.get("checks") or {}
    for entry in status.get("students") or []:
        key = f"{entry.get('template')}/{entry.get('user')}"
        found = grading["students"].get(key)
        if found is not None:
            entry["grading"] = found
        if key in checks:
            entry["check"] = checks[key]  # Check my work: the student's last check, never a grade
    return status
