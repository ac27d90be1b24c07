"""Which students' "Check my work" to run now, and each one's state (pure; docs/grading.md).

A student asks (the web UI writes `check.userland.dev/<login>` on the Assignment: when, which
environment); the operator runs the grader's tests on a snapshot of their folder as it is now, in
a grading Pod of its own (operator/rules/grading/pods.py with `check`), and the store keeps the
outcome as their last check (`checks`), never as a grade. `plan_checks` decides:

- an ask is done once the store has an outcome for its moment (`asked`): nothing runs twice;
- an ask at or after the student's own deadline (with extensions) is refused: a check is for
  before it (the web UI refuses it first; this holds whoever wrote the annotation);
- an ask with no Pod is **queued**: checks start only in slots no deadline grading waits for
  (operator/rules/grading/queue.py `grant_checks`); with a live Pod it is **running**;
- the time limit is the grader's, enforced from outside as for a grading (`ended_badly`);
- Pods of an older ask of the student, or of a student no longer in the assignment, go.

Nothing here reads a clock: `now` comes in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from userland.operator.rules.grading.plan import GRACE_SECONDS, START_SECONDS, GradingPod, ended_badly
from userland.platform.model.checks import CheckAsk
from userland.platform.model.coursework import round_id

JSON = dict[str, Any]
AFTER_DEADLINE = "it was asked after the deadline"


@dataclass
class CheckPlan:
    start: list[CheckAsk] = field(default_factory=list)  # in the order asked
    delete: list[str] = field(default_factory=list)
    failures: list[tuple[CheckAsk, str, str]] = field(default_factory=list)  # (ask, reason, message)
    states: dict[str, JSON] = field(default_factory=dict)  # env -> its `check` entry for the status
    look_again: datetime | None = None

    def later(self, moment: datetime) -> None:
        if self.look_again is None or moment < self.look_again:
            self.look_again = moment


def _entry(record: Mapping[str, Any]) -> JSON:
    keep = ("state", "asked", "at", "visible", "passed", "reason")
    entry = {k: record[k] for k in keep if record.get(k) is not None}
    if record.get("state") == "Failed":
        # The student's words: a time limit or memory, never the harness's output.
        entry["message"] = {"TimedOut": "the tests took longer than their time limit",
                            "OutOfMemory": "the tests ran out of memory"}.get(
            str(record.get("reason")), "the tests could not run")
        if record.get("reason") == "AfterDeadline":
            entry["message"] = AFTER_DEADLINE
    return entry


def plan_checks(asks: Mapping[str, CheckAsk], deadlines: Mapping[str, datetime | None],
                checked: Mapping[str, Mapping[str, Any]], pods: list[GradingPod], *,
                now: datetime) -> CheckPlan:
    """`asks`: each student's last ask by environment; `deadlines`: the environments of the
    assignment's students with their own deadline (None: none); `checked`: the store's last
    outcome per environment; `pods`: the check Pods that exist."""
    plan = CheckPlan()
    wanted = {env: round_id(ask.at) for env, ask in asks.items() if env in deadlines}
    mine: dict[str, list[GradingPod]] = {}
    for pod in pods:
        if wanted.get(pod.env) == pod.version:
            mine.setdefault(pod.env, []).append(pod)
        elif not pod.deleting:
            plan.delete.append(pod.name)  # an older ask, or a student no longer here
    for env, ask in sorted(asks.items(), key=lambda item: (item[1].at, item[0])):
        if env not in deadlines:
            continue
        asked = wanted[env]
        same = mine.get(env, [])
        record = checked.get(env) or {}
        if record.get("asked") == asked:
            plan.states[env] = _entry(record)
            plan.delete.extend(p.name for p in same if not p.live and not p.deleting)
            continue
        deadline = deadlines[env]
        if deadline is not None and ask.at >= deadline:
            plan.states[env] = {"state": "Failed", "asked": asked, "reason": "AfterDeadline",
                                "message": AFTER_DEADLINE}
            plan.delete.extend(p.name for p in same if not p.deleting)
            continue
        over = next(((p, bad) for p in same if not p.deleting and (bad := ended_badly(p, now))), None)
        if over is not None:
            pod, (reason, message) = over
            plan.failures.append((ask, reason, message))
            plan.delete.append(pod.name)
            plan.states[env] = _entry({"state": "Failed", "asked": asked, "reason": reason})
            continue
        live = [p for p in same if p.live]
        if live or any(p.phase == "Succeeded" and not p.deleting for p in same):
            plan.states[env] = {"state": "Running", "asked": asked}
            pod = (live or same)[0]
            if pod.grade_started is not None and not pod.grade_ended:
                plan.later(pod.grade_started + timedelta(seconds=pod.time_limit + GRACE_SECONDS))
            elif pod.grade_started is None and pod.created is not None:
                plan.later(pod.created + timedelta(seconds=START_SECONDS))
            continue
        plan.states[env] = {"state": "Queued", "asked": asked}
        if not any(p.deleting for p in same):
            plan.start.append(ask)
    return plan
