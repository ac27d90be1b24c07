"""Which collected copies to grade now, what each student's grading state is, and which grading
Pods are done with (pure; docs/grading.md).

From each student's newest copy (its round and receipt), the tests' key at the store, what the
store recorded of earlier gradings (`graded`: per environment the version graded, its state,
score or reason), the grading Pods that exist and the last "Regrade", `plan_grading` decides:

- a copy is graded once per **version** (the copy's digest with the tests' key): a record of the
  same version is kept, whatever happened since, unless a Regrade (for everyone, or for this
  student) was asked after it;
- a copy to grade with no grading Pod of its version is **queued** (the fair queue,
  operator/rules/grading/queue.py, says how many start); one with a live Pod is **running**;
- a grader running past its time limit is ended from outside: the Pod is deleted and the copy
  **failed**, "timed out after 60 s", whatever the node does (so a hung Pod never holds a slot);
  a Pod the kubelet ended at its `activeDeadlineSeconds` is the same; one whose image cannot be
  pulled or whose fetch failed is failed with that reason;
- Pods whose outcome the store has, and Pods of another version (a new copy, new tests), go.

Nothing here reads a clock: `now` comes in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from userland.operator.rules.grading.pods import GradeWork
from userland.platform.model import naming
from userland.platform.model.models import parse_time

JSON = dict[str, Any]
# A grader's time limit is enforced to within this much (the operator's look, the Pod's removal).
GRACE_SECONDS = 2.0
# A grading Pod whose grader has not started this long after the Pod was made (no node has room
# for its resources, its volumes or image take for ever) fails, and frees its slot.
START_SECONDS = 600.0
# Container states that will not get better by waiting: the copy fails with the reason.
STUCK = {
    "ImagePullBackOff": "the grader's image cannot be pulled",
    "InvalidImageName": "the grader's image name is not valid",
    "CreateContainerConfigError": "the grader's container cannot be made",
    "CreateContainerError": "the grader's container cannot be made",
    "ProgramNotInstalled": "the grader's program is not installed here",
    "NoCommand": "the grader has no command this machine can run",
    # The local runner starts a failing init container again (a cluster fails the Pod at once).
    "CrashLoopBackOff": "a step of the grading keeps failing",
}


@dataclass(frozen=True)
class Regrade:
    """The last "Regrade": when, and for whom (empty: everyone)."""

    at: datetime | None = None
    logins: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Regrade:
        """`2026-12-08T10:00:00Z` (everyone) or `2026-12-08T10:00:00Z alice bob`."""
        parts = (text or "").split()
        at = parse_time(parts[0]) if parts else None
        if at is None:
            return cls()
        return cls(at, tuple(p.lower() for p in parts[1:]))

    def asks(self, login: str, graded_at: datetime | None) -> bool:
        if self.at is None or (self.logins and login not in self.logins):
            return False
        return graded_at is None or graded_at < self.at

    def attempt(self, login: str) -> int:
        """A number that makes the Pod of a regrade another Pod than the first grading's."""
        if self.at is None or (self.logins and login not in self.logins):
            return 0
        return int(self.at.timestamp())


@dataclass(frozen=True)
class GradingPod:
    name: str
    env: str
    version: str
    phase: str = "Pending"
    deleting: bool = False
    time_limit: int = 60
    # When the grade step (the teacher's container) began, and whether it has ended.
    grade_started: datetime | None = None
    grade_ended: bool = False
    pod_reason: str = ""  # the Pod's status.reason (DeadlineExceeded)
    created: datetime | None = None
    grade_seconds: float | None = None  # how long the grader ran, once it has ended
    # (container, reason, message) of a container that ended badly or cannot start.
    trouble: tuple[str, str, str] | None = None
    kind: str = "grade"  # or "check": a student's Check my work (operator/rules/grading/checks.py)

    @property
    def live(self) -> bool:
        return not self.deleting and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Failure:
    """A grading that ended without a report, to be recorded at the store."""

    work: GradeWork
    reason: str  # TimedOut, OutOfMemory, GraderFailed
    message: str


@dataclass
class GradingPlan:
    start: list[tuple[GradeWork, int]] = field(default_factory=list)  # (work, attempt), in line order
    delete: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    states: dict[str, JSON] = field(default_factory=dict)  # env -> its grading entry for the status
    look_again: datetime | None = None

    def later(self, moment: datetime) -> None:
        if self.look_again is None or moment < self.look_again:
            self.look_again = moment


def timed_out_words(seconds: int) -> str:
    return f"timed out after {seconds} s"


def ended_badly(pod: GradingPod, now: datetime) -> tuple[str, str] | None:
    """(reason, message) when this Pod's grading is over without a report, else None."""
    if pod.pod_reason == "DeadlineExceeded":
        return "TimedOut", timed_out_words(pod.time_limit)
    if pod.grade_started is not None and not pod.grade_ended and \
            now >= pod.grade_started + timedelta(seconds=pod.time_limit + GRACE_SECONDS):
        return "TimedOut", timed_out_words(pod.time_limit)
    if pod.trouble is not None:
        container, reason, message = pod.trouble
        if reason == "OOMKilled":
            return "OutOfMemory", f"ran out of memory (the {container} step was killed)"
        if reason in STUCK:
            return "GraderFailed", f"{STUCK[reason]}: {message}".rstrip(": ")
        if pod.phase == "Failed":
            step = {"snapshot": "copying the folder", "fetch": "fetching the copy and the tests",
                    "grade": "running the grader",
                    "report": "reporting the results"}.get(container, container)
            return "GraderFailed", f"the grading failed while {step} ({reason or 'error'})"
    if pod.phase == "Failed":
        return "GraderFailed", "the grading Pod failed"
    if pod.grade_started is None and pod.created is not None and \
            now >= pod.created + timedelta(seconds=START_SECONDS):
        return "GraderFailed", (f"the grader did not start within {START_SECONDS / 60:g} minutes (no node "
                                "has room for its resources, or its image cannot be had)")
    return None


def _entry(record: Mapping[str, Any]) -> JSON:
    keep = ("state", "reason", "message", "score", "maxScore", "seconds", "at", "round", "tests", "shown",
            "passed", "exitStatus")
    return {k: record[k] for k in keep if record.get(k) is not None}


def plan_grading(copies: Mapping[str, tuple[str, str, str, str]], tests_key: str,
                 graded: Mapping[str, Mapping[str, Any]], pods: list[GradingPod], regrade: Regrade, *,
                 now: datetime) -> GradingPlan:
    """`copies`: env -> (login, template, round, copy sha256) of each student's newest copy."""
    plan = GradingPlan()
    by_env: dict[str, list[GradingPod]] = {}
    for pod in pods:
        by_env.setdefault(pod.env, []).append(pod)
    for env in sorted(by_env):
        if env not in copies:  # a student no longer in the assignment
            plan.delete.extend(p.name for p in by_env[env] if not p.deleting)
    for env, (login, template, round_, sha) in sorted(copies.items(), key=lambda item: item[0]):
        work = GradeWork(login=login, template=template, round=round_, copy_sha256=sha, tests_key=tests_key)
        record = graded.get(env) or {}
        mine = by_env.get(env, [])
        same = [p for p in mine if p.version == work.version]
        plan.delete.extend(p.name for p in mine if p.version != work.version and not p.deleting)
        done = record.get("version") == work.version and \
            not regrade.asks(login, parse_time(record.get("at")))
        if done:
            plan.states[env] = _entry(record)
            plan.delete.extend(p.name for p in same if not p.live and not p.deleting)
            continue
        live = [p for p in same if p.live]
        over = next(((p, bad) for p in same if not p.deleting and (bad := ended_badly(p, now))), None)
        if over is not None:
            pod, (reason, message) = over
            plan.failures.append(Failure(work, reason, message))
            plan.delete.append(pod.name)
            plan.states[env] = {"state": "Failed", "reason": reason, "message": message, "round": round_}
            continue
        if live:
            pod = live[0]
            plan.states[env] = {"state": "Running", "round": round_}
            if pod.grade_started is not None and not pod.grade_ended:
                plan.later(pod.grade_started + timedelta(seconds=pod.time_limit + GRACE_SECONDS))
            elif pod.grade_started is None and pod.created is not None:
                plan.later(pod.created + timedelta(seconds=START_SECONDS))
            continue
        if any(p.phase == "Succeeded" and not p.deleting for p in same):
            plan.states[env] = {"state": "Running", "round": round_}  # its report is on its way
            continue
        if any(p.deleting for p in same):
            plan.states[env] = {"state": "Queued", "round": round_}
            continue  # the Pod of an earlier attempt is going; the next look starts this one
        plan.states[env] = {"state": "Queued", "round": round_}
        plan.start.append((work, regrade.attempt(login)))
    return plan


def grading_pod_of(pod: Mapping[str, Any]) -> GradingPod | None:
    """A grading Pod as the plan reads it (None: not a grading Pod, or its annotation unreadable)."""
    metadata = pod.get("metadata") or {}
    text = (metadata.get("annotations") or {}).get(naming.ANNOTATION_JOB)
    try:
        summary = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(summary, dict) or summary.get("kind") not in ("grade", "check") or \
            not summary.get("members"):
        return None
    status = pod.get("status") or {}
    steps = {str(c.get("name")): c.get("state") or {}
             for key in ("initContainerStatuses", "containerStatuses") for c in status.get(key) or []}
    grade = steps.get("grade") or {}
    started = parse_time((grade.get("running") or grade.get("terminated") or {}).get("startedAt"))
    finished = parse_time((grade.get("terminated") or {}).get("finishedAt"))
    seconds = (finished - started).total_seconds() if started is not None and finished is not None else None
    trouble = None
    for name in ("snapshot", "fetch", "grade", "report"):
        state = steps.get(name) or {}
        ended, waiting = state.get("terminated") or {}, state.get("waiting") or {}
        if ended and (ended.get("exitCode") or ended.get("reason") == "OOMKilled"):
            trouble = (name, str(ended.get("reason") or "Error"), "")
            break
        if waiting.get("reason") in STUCK:
            trouble = (name, str(waiting["reason"]), str(waiting.get("message") or ""))
            break
    limit = summary.get("timeLimit")
    return GradingPod(
        name=str(metadata.get("name") or ""), env=str(summary["members"][0]),
        version=str(summary.get("key") or ""),
        phase=str(status.get("phase") or "Pending"), deleting=bool(metadata.get("deletionTimestamp")),
        time_limit=int(limit) if isinstance(limit, int) else 60, grade_started=started,
        grade_ended="terminated" in grade, pod_reason=str(status.get("reason") or ""), trouble=trouble,
        created=parse_time(metadata.get("creationTimestamp")), grade_seconds=seconds,
        kind=str(summary["kind"]))
