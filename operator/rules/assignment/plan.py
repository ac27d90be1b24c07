"""What an Assignment needs done now, and when to look again (pure; docs/assignments.md).

From the Assignment, its students' environments (`Env`), what the store has recorded (`StoreState`:
hand-out outcomes, copies, uploads, returned feedback) and the worker Pods that exist (`WorkerPod`),
`plan_work` says which students' environments need which work (`Pending`), which Pods are done
with (`finished`), and the next moment something is due (a release, a deadline less the lead, a
retry). operator/rules/assignment/pods.py turns the pending work into Pods;
operator/rules/assignment/status.py into the status. Nothing here reads a clock: `now` comes in.

Work per environment:
- **hand out** when released and the source is known, unless its last hand-out was of this very
  commit and came after the last "hand out again" (a failure is tried again after
  `RETRY_SECONDS`);
- **collect** for every round whose moment is at most `lead` away (the student's deadline, or
  "collect now") for which the store has neither a copy nor a failure, once the student's
  hand-out has settled (`handout_settled`: they received the files, or it failed, or the source
  cannot be had): a copy is never taken of a folder the files are still on their way to, so a
  due date in the past collects what the student received, not an empty folder;
- **return feedback** when `returnFeedback` is set and what the student should have (their upload
  and grade) differs from what they were last given.
Work already in a live worker Pod is not asked for twice; a worker Pod that failed holds its
students' work back for `RETRY_SECONDS` (it is then deleted and made again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from userland.platform.model.assignments import Assignment, Grade
from userland.platform.model.coursework import WorkKind, env_key, feedback_digest, round_id
from userland.platform.model.gradescope import score_words
from userland.platform.model.grading import Grader, parse_grader
from userland.platform.model.models import parse_time

JSON = dict[str, Any]
# A hand-out or feedback that failed for a student, or a worker Pod that failed, is tried again after this.
RETRY_SECONDS = 600.0
POD_RETRY_SECONDS = 60.0
# Worker Pods that finished are kept this long when they failed (their log tells why).
DONE_STATES = ("HandedOut", "Conflicts")


@dataclass(frozen=True)
class RunAs:
    uid: int | None = None
    gid: int | None = None
    fs_group: int | None = None


@dataclass(frozen=True)
class Env:
    """One student's environment of a target Template: where its files live and who owns them."""

    login: str
    template: str
    claim: str  # its PersistentVolumeClaim
    has_claim: bool = True
    node: str | None = None  # the node its Pod is on (the volume is attached there), if any
    run_as: RunAs = RunAs()
    tolerations: tuple[JSON, ...] = ()

    @property
    def key(self) -> str:
        return env_key(self.template, self.login)


@dataclass(frozen=True)
class WorkerPod:
    name: str
    kind: WorkKind
    key: str  # the commit, the round, or the feedback's digest set
    members: tuple[str, ...]  # env keys
    phase: str = "Pending"
    created: datetime | None = None
    deleting: bool = False

    @property
    def live(self) -> bool:
        return not self.deleting and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Source:
    """The commit being handed out (the store's key for it)."""

    key: str
    commit: str


@dataclass(frozen=True)
class Pending:
    """Work for some environments: one or more worker Pods (batched by Template and node)."""

    kind: WorkKind
    key: str  # commit, round id, or "feedback"
    envs: tuple[Env, ...]
    at: datetime | None = None  # collect: the moment to take the copy
    # feedback: login -> (grade, comment, digest)
    feedback: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)


@dataclass
class Plan:
    pending: list[Pending] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # worker Pods to delete
    look_again: datetime | None = None
    rounds: dict[str, list[str]] = field(default_factory=dict)  # env key -> its rounds that have come

    def later(self, moment: datetime) -> None:
        if self.look_again is None or moment < self.look_again:
            self.look_again = moment


def rounds_of(assignment: Assignment, login: str) -> list[datetime]:
    """The moments this student's folder is copied: their deadline, and "collect now"."""
    found = [m for m in (assignment.spec.deadline_of(login), assignment.collect_now) if m is not None]
    return sorted(set(found))


def released(assignment: Assignment, now: datetime) -> bool:
    return assignment.spec.release is None or assignment.spec.release <= now


def autograde(assignment: Assignment, state: JSON, login: str) -> str:
    """The grade this student's copy was given by the grader (`7/10`), or "" (docs/grading.md)."""
    grader = parse_grader(assignment.spec.grader, assignment.spec.source)
    if not isinstance(grader, Grader):
        return ""
    for env, record in sorted((state.get("graded") or {}).items()):
        score = record.get("score") if isinstance(record, dict) else None
        if env.endswith(f"/{login}") and record.get("state") == "Graded" and isinstance(score, int | float):
            return score_words(float(score), grader.max_score)
    return ""


def desired_feedback(assignment: Assignment, state: JSON, login: str) -> tuple[str, str, str] | None:
    """(grade, comment, digest) this student should have back, or None: nothing to return. A grade
    set by staff wins over the grader's."""
    upload = (state.get("feedback") or {}).get(login) or {}
    grade = assignment.spec.grade_of(login)
    if not grade.grade and (auto := autograde(assignment, state, login)):
        grade = Grade(auto, grade.comment)
    if not upload and grade.empty:
        return None
    return grade.grade, grade.comment, feedback_digest(str(upload.get("sha256") or ""), grade.grade,
                                                       grade.comment)


def _at(record: Mapping[str, Any]) -> datetime | None:
    return parse_time(record.get("at")) if isinstance(record.get("at"), str) else None


def handout_done(record: Mapping[str, Any] | None, source: Source, asked: datetime | None) -> bool:
    """Whether the environment has this commit, given after the last "hand out again"."""
    if not record or record.get("commit") != source.commit or record.get("state") not in DONE_STATES:
        return False
    at = _at(record)
    return asked is None or (at is not None and at >= asked)


def failed_until(record: Mapping[str, Any] | None, source: Source,
                 asked: datetime | None) -> datetime | None:
    """When a hand-out of this commit that failed (after the last "hand out again") is tried again."""
    if not record or record.get("commit") != source.commit or record.get("state") != "Failed":
        return None
    at = _at(record)
    if at is None or (asked is not None and at < asked):
        return None
    return at + timedelta(seconds=RETRY_SECONDS)


def handout_settled(assignment: Assignment, record: Mapping[str, Any] | None, source: Source | None, *,
                    source_failed: bool, now: datetime) -> bool:
    """Whether a student's hand-out is over, so their folder may be copied: they have the commit
    being handed out (after the last "hand out again"), or it failed for them, or the source
    cannot be had at all (they have what they have: an earlier commit, or nothing). While the
    source is still being fetched, or their hand-out still runs, it is not."""
    if not released(assignment, now):
        return False
    if source is None:
        return source_failed  # the caller says a store that does not answer is not a failed source
    return handout_done(record, source, assignment.handout_at) or \
        failed_until(record, source, assignment.handout_at) is not None


def plan_work(assignment: Assignment, envs: list[Env], source: Source | None, state: JSON,
              pods: list[WorkerPod], *, now: datetime, lead: float, source_failed: bool = False) -> Plan:
    """`source_failed`: the source cannot be had (the status says why); `source` None without
    it means it is still being fetched."""
    plan = Plan()
    busy: dict[tuple[str, str], set[str]] = {}  # (kind, key) -> env keys in live Pods
    held: dict[tuple[str, str], set[str]] = {}  # ... in Pods that failed recently
    for pod in pods:
        if pod.phase == "Succeeded" and not pod.deleting:
            plan.finished.append(pod.name)  # its students' outcomes are at the store
        elif pod.phase == "Failed" and not pod.deleting:
            retry = (pod.created or now) + timedelta(seconds=POD_RETRY_SECONDS)
            if retry <= now:
                plan.finished.append(pod.name)
            else:
                held.setdefault((pod.kind, pod.key), set()).update(pod.members)
                plan.later(retry)
        if pod.live:
            busy.setdefault((pod.kind, pod.key), set()).update(pod.members)

    def free(kind: str, key: str, env: Env) -> bool:
        return env.has_claim and env.key not in busy.get((kind, key), ()) and \
            env.key not in held.get((kind, key), ())

    # Hand out.
    if not released(assignment, now):
        assert assignment.spec.release is not None
        plan.later(assignment.spec.release)
    elif source is not None:
        waiting = []
        for env in envs:
            record = (state.get("handout") or {}).get(env.key)
            if handout_done(record, source, assignment.handout_at):
                continue
            if not free("handout", source.commit, env):
                continue
            again = failed_until(record, source, assignment.handout_at)
            if again is not None and again > now:
                plan.later(again)
                continue
            waiting.append(env)
        if waiting:
            plan.pending.append(Pending("handout", source.commit, tuple(waiting)))

    # Collect: every round that has come (less the lead), for every environment without a copy.
    by_round: dict[datetime, list[Env]] = {}
    for env in envs:
        for moment in rounds_of(assignment, env.login):
            if moment - timedelta(seconds=lead) > now:
                plan.later(moment - timedelta(seconds=lead))
                continue
            name = round_id(moment)
            plan.rounds.setdefault(env.key, []).append(name)
            if env.key in ((state.get("copies") or {}).get(name) or {}) or \
                    env.key in ((state.get("collectFailed") or {}).get(name) or {}):
                continue
            record = (state.get("handout") or {}).get(env.key)
            if not handout_settled(assignment, record, source, source_failed=source_failed, now=now):
                continue  # the hand-out's end (a worker Pod's) brings the next look
            if free("collect", name, env):
                by_round.setdefault(moment, []).append(env)
            if moment > now:
                plan.later(moment + timedelta(seconds=1))  # to see the copies arrive
    for moment in sorted(by_round):
        plan.pending.append(Pending("collect", round_id(moment), tuple(by_round[moment]), at=moment))

    # Return feedback.
    if assignment.spec.return_feedback:
        wanted: dict[str, tuple[str, str, str]] = {}
        waiting = []
        for env in envs:
            desired = desired_feedback(assignment, state, env.login)
            if desired is None:
                continue
            record = (state.get("feedbackReturned") or {}).get(env.key) or {}
            if record.get("digest") == desired[2] and record.get("state") in DONE_STATES:
                continue
            if record.get("digest") == desired[2] and (at := _at(record)) is not None and \
                    at + timedelta(seconds=RETRY_SECONDS) > now:
                plan.later(at + timedelta(seconds=RETRY_SECONDS))
                continue
            if free("feedback", "feedback", env):
                waiting.append(env)
                wanted[env.login] = desired
        if waiting:
            plan.pending.append(Pending("feedback", "feedback", tuple(waiting), feedback=wanted))
    return plan


def batches(pending: Pending, size: int) -> list[tuple[Env, ...]]:
    """Pending environments in Pods: one Template and one node per Pod (a running environment's
    volume can only be mounted where it is attached), at most `size` each, in login order."""
    groups: dict[tuple[str, str], list[Env]] = {}
    for env in pending.envs:
        groups.setdefault((env.template, env.node or ""), []).append(env)
    out: list[tuple[Env, ...]] = []
    for group_key in sorted(groups):
        members = sorted(groups[group_key], key=lambda e: e.login)
        out.extend(tuple(members[i:i + size]) for i in range(0, len(members), size))
    return out


def latest_copy(state: JSON, env: str, rounds: list[str]) -> tuple[str, JSON] | None:
    """The newest round (of those that have come) with a copy for this environment."""
    for name in sorted(rounds, reverse=True):
        receipt = ((state.get("copies") or {}).get(name) or {}).get(env)
        if receipt:
            return name, receipt
    return None
