"""An Assignment's status, from the plan and what the store recorded (pure; docs/assignments.md).

`status.students` has one entry per student's environment (kubectl and the web UI read it):
`state` of the hand-out (Scheduled, Waiting, Pending, HandedOut, Conflicts, Failed), the commit,
its conflicts (the first `MAX_CONFLICTS`, and how many), the reason of a failure, their deadline
(and whether it is extended), and their newest copy (round, when it was actually taken, sha256,
files, bytes, taken late), or why it could not be taken; feedback returned and when. A student
named in `spec.students` without an environment has an entry saying so.

The summary: `handedOut` and `collected` as "n/N", `phase`, a `Ready` condition whose reason and
message say what is wrong first (the spec, the source, students who could not receive it, work
still going on), and `problems`: what of the source or the Templates was left out, in words.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from userland.operator.rules.assignment.plan import (
    DONE_STATES,
    Env,
    Plan,
    Source,
    WorkerPod,
    failed_until,
    handout_done,
    latest_copy,
    released,
    rounds_of,
)
from userland.operator.rules.status import stamped_condition
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import round_time
from userland.platform.model.models import Condition, parse_time
from userland.platform.model.objects import rfc3339

JSON = dict[str, Any]
MAX_CONFLICTS = 20
# A copy taken this long after its moment may hold later edits: it is marked late.
LATE_SECONDS = 60


def _short(commit: str) -> str:
    return commit[:12]


def copy_timing(moment: datetime, taken: datetime | None, created: datetime | None) -> JSON:
    """How a copy's time relates to its moment, in the platform's terms, never the student's:
    `pastDue` when the moment had passed already when the Assignment was made (the copy was taken
    once the student had the files: nobody was late), else `late` with `lateSeconds` when the
    platform took it more than `LATE_SECONDS` after the moment (busy, down, or the files still on
    their way: the copy may hold changes made meanwhile)."""
    if created is not None and moment < created:
        return {"late": False, "pastDue": True}
    if taken is None:
        return {"late": False}
    seconds = int((taken - moment).total_seconds())
    if seconds > LATE_SECONDS:
        return {"late": True, "lateSeconds": seconds}
    return {"late": False}


def env_entry(assignment: Assignment, env: Env, source: Source | None, state: JSON, plan: Plan,
              busy: set[tuple[str, str]], now: datetime,
              source_problem: tuple[str, str] | None = None) -> JSON:
    entry: JSON = {"user": env.login, "template": env.template}
    record = (state.get("handout") or {}).get(env.key) or {}
    if not env.has_claim:
        entry["state"] = "Waiting"
        entry["reason"] = "their storage does not exist yet: it is made with their environment"
    elif not released(assignment, now):
        entry["state"] = "Scheduled"
    elif source is not None and handout_done(record, source, assignment.handout_at):
        entry["state"] = record["state"]
    elif source is not None and (retry := failed_until(record, source, assignment.handout_at)) is not None:
        entry["state"] = "Failed"
        entry["reason"] = str(record.get("reason") or "the hand-out failed")
        entry["retryAt"] = rfc3339(retry) if retry > now else None
    elif source is None and record.get("state") in DONE_STATES:
        # They received an earlier commit: a source that is being fetched again, or cannot be
        # now (its server moved, a ref was changed), takes nothing from their folder.
        entry["state"] = record["state"]
    elif source is None and source_problem is not None and source_problem[0] != "StoreUnavailable":
        # The assignment's source cannot be had: each student's state says so, as the summary
        # does (and the figures count them as failed, so the alert can fire). A store that does
        # not answer is the platform's, said on the assignment: their hand-out only waits.
        entry["state"] = "Failed"
        entry["reason"] = f"the repository cannot be read: {source_problem[1]}"
    else:
        entry["state"] = "Pending"
    if record.get("commit"):
        entry["commit"] = _short(str(record["commit"]))
        entry["handedOutAt"] = record.get("at")
    if record.get("state") in DONE_STATES or entry["state"] == "Failed":
        conflicts = record.get("conflicts") or []
        if conflicts:
            entry["conflicts"] = [{"path": str(c[0]), "kind": str(c[1])} for c in conflicts[:MAX_CONFLICTS]]
            entry["conflictCount"] = int(record.get("conflictCount") or len(conflicts))
    deadline = assignment.spec.deadline_of(env.login)
    if deadline is not None:
        entry["deadline"] = rfc3339(deadline)
        if assignment.spec.due is not None and deadline != assignment.spec.due:
            entry["extended"] = True
    rounds = plan.rounds.get(env.key, [])
    latest = latest_copy(state, env.key, rounds)
    if latest is not None:
        name, receipt = latest
        taken = parse_time(receipt.get("takenAt"))
        entry["collected"] = {
            "round": rfc3339(round_time(name)), "takenAt": receipt.get("takenAt"),
            "sha256": receipt.get("sha256"), "files": receipt.get("files"), "bytes": receipt.get("bytes"),
            **copy_timing(round_time(name), taken, assignment.created),
        }
    if rounds:
        newest = max(rounds)
        failure = ((state.get("collectFailed") or {}).get(newest) or {}).get(env.key)
        if failure and (latest is None or latest[0] != newest):
            entry["collectReason"] = str(failure.get("reason") or "the copy could not be taken")
        elif (latest is None or latest[0] != newest) and ("collect", newest) in busy:
            entry["collecting"] = True
    returned = (state.get("feedbackReturned") or {}).get(env.key)
    if returned:
        entry["feedbackReturnedAt"] = returned.get("at")
        entry["feedbackState"] = returned.get("state")
        if returned.get("state") == "Failed":
            entry["feedbackReason"] = returned.get("reason")
    return entry


def busy_work(pods: Iterable[WorkerPod]) -> set[tuple[str, str]]:
    """(kind, key) of the work live Pods are doing, per environment: ("collect", round) etc."""
    return {(p.kind, p.key) for p in pods if p.live}


def assignment_status(assignment: Assignment, envs: list[Env], missing: list[str], source: Source | None,
                      source_info: JSON | None, source_problem: tuple[str, str] | None, state: JSON,
                      plan: Plan, pods: list[WorkerPod], problems: list[str], *, now: datetime) -> JSON:
    busy = busy_work(pods)
    entries = [env_entry(assignment, env, source, state, plan, busy, now, source_problem) for env in envs]
    entries += [{"user": login, "template": "", "state": "NoEnvironment",
                 "reason": "this student has no environment of " + " or ".join(assignment.spec.templates)
                           + " in this course"} for login in missing]
    entries.sort(key=lambda e: (e["user"], e["template"]))
    total = len(envs)
    handed = sum(1 for e in entries if e["state"] in DONE_STATES)
    failed = [e for e in entries if e["state"] == "Failed"]
    due = [e for e in entries if plan.rounds.get(f"{e['template']}/{e['user']}")]
    collected = sum(1 for e in due if _has_newest_copy(e, plan))
    empty = sum(1 for e in due if _has_newest_copy(e, plan) and not e["collected"].get("files"))
    future_round = any(m > now for env in envs for m in rounds_of(assignment, env.login))
    phase, reason, message, ready = _summary(assignment, source_problem, source, now, total, handed, failed,
                                             len(due), collected, future_round, entries)
    if empty and reason in ("Collected", "HandedOut"):
        # A copy of no files is never told as success alone (docs/assignments.md).
        reason = "CollectedSomeEmpty" if reason == "Collected" else reason
        message += (f"; {empty} of the copies taken {'is' if empty == 1 else 'are'} empty (no files were "
                    f"in the folder{'s' if empty > 1 else ''} at that moment)")
    old_conditions = (assignment.status.get("conditions") or [])
    generation = assignment.ref.generation
    condition = Condition("Ready", "True" if ready else "False", reason, message, "", generation)
    status: JSON = {
        "phase": phase,
        "handedOut": f"{handed}/{total}",
        "collected": f"{collected}/{len(due)}" if due else None,
        "emptyCopies": empty or None,
        "observedGeneration": generation,
        "conditions": [stamped_condition(old_conditions, condition, rfc3339(now))],
        "students": entries,
        "problems": problems or None,
        "source": source_info,
    }
    return status


def _has_newest_copy(entry: JSON, plan: Plan) -> bool:
    """Whether the copy shown is of the student's newest round that has come."""
    newest = max(plan.rounds[f"{entry['template']}/{entry['user']}"])
    return bool(entry.get("collected")) and entry["collected"]["round"] == rfc3339(round_time(newest))


def _summary(assignment: Assignment, source_problem: tuple[str, str] | None, source: Source | None,
             now: datetime, total: int, handed: int, failed: list[JSON], due: int, collected: int,
             future_round: bool, entries: list[JSON]) -> tuple[str, str, str, bool]:
    """(phase, reason, message, ready)."""
    if not released(assignment, now):
        assert assignment.spec.release is not None
        return ("Scheduled", "Scheduled", f"handed out at {rfc3339(assignment.spec.release)}",
                source_problem is None)
    if source_problem is not None:
        reason, message = source_problem
        return ("Failed" if source is None else "HandingOut", reason, message, False)
    if source is None:
        return "HandingOut", "Fetching", "the source is being fetched", False
    if due and collected < due:
        waiting = due - collected
        return ("Collecting", "Collecting", f"{collected} of {due} copies taken; "
                f"{waiting} {'is' if waiting == 1 else 'are'} still being taken or could not be", False)
    if failed:
        names = ", ".join(e["user"] for e in failed[:5]) + (" ..." if len(failed) > 5 else "")
        return ("HandingOut", "HandOutFailed", f"{len(failed)} of {total} could not receive it ({names}): "
                f"{failed[0].get('reason')}", False)
    if handed < total:
        waiting = sum(1 for e in entries if e["state"] == "Waiting")
        note = f" ({waiting} waiting for their storage)" if waiting else ""
        return "HandingOut", "HandingOut", f"{handed} of {total} have it{note}", False
    if due and collected == due and not future_round:
        return "Collected", "Collected", f"every copy is taken ({collected})", True
    return ("Open", "HandedOut", f"every student has it ({total})" if total else "no students yet", True)


def source_info(assignment: Assignment, fetched: JSON, fingerprint: str) -> JSON:
    """What the status says of the commit handed out (from the store's answer to the fetch)."""
    skipped = fetched.get("skipped") or []
    return {
        "url": assignment.spec.source.url, "ref": assignment.spec.source.ref or None,
        "commit": fetched.get("commit"), "key": fetched.get("key"), "fetchedAt": fetched.get("fetchedAt"),
        "files": fetched.get("count"), "bytes": fetched.get("bytes"), "fingerprint": fingerprint,
        "skipped": [{"path": str(s[0]), "why": str(s[1])} for s in skipped[:MAX_CONFLICTS]] or None,
    }


def source_problems(info: JSON | None) -> list[str]:
    """The source's files that are not handed out, in words (for `status.problems`)."""
    found = []
    for item in (info or {}).get("skipped") or []:
        found.append(f"{item['path']}: {item['why']}")
    return found
