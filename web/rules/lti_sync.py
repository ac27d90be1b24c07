"""What the class dashboard shows of a course's last LMS roster sync. Pure, no I/O.

`record(...)` turns a sync's plans and the results of applying them (web/lti_roster.py) into a
`SyncRecord` (kept in Redis by web/lti_sync.py, one per course): when, who asked (the schedule
or a member of staff), the plan's one-line summary, each change made with its words, and each
member skipped with the reason, in a teacher's words. A sync that could not read a roster
changes nothing and says why (`error`).

The course's policy for a student dropped from the LMS course (`dropped_policy`, from the
namespace's `userland.dev/lti-remove-after-days`): suspended with their files kept (the
default), or suspended and then removed N days later unless they come back; the record says
which students will be removed when (`removals`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from userland.platform.model import naming
from userland.platform.model.lti_services_roster_diff import Course, Policy, SyncPlan

# Outcomes of apply_plan that changed something, with the dashboard's words.
CHANGE_WORDS = {
    "created": "added: their environment was made",
    "suspended": "suspended (their files are kept)",
    "resumed": "back: active in the LMS course again",
    "removed": "removed after their days suspended",
    "error": "not changed",
    "missing": "not changed",
    "staff-instructor": "an instructor of this course, as in the LMS",
    "staff-assistant": "an assistant of this course, as in the LMS",
    "staff-left": "no longer on this course's staff: the LMS course no longer lists them as staff",
}
MAX_LISTED = 200  # changes and skips kept for the dashboard (the summary counts them all)
SCHEDULE = "schedule"
ANNOTATION_REMOVE_AFTER = naming.ANNOTATION_LTI_REMOVE_AFTER_DAYS
MAX_DAYS = 365


@dataclass(frozen=True)
class DroppedPolicy:
    """What the sync does with a student the LMS course no longer lists as an active Learner."""

    remove_after_days: int = 0  # 0: suspend them, files kept, for good
    problem: str = ""  # the annotation could not be read: said on the dashboard, suspend applies

    def words(self) -> str:
        if not self.remove_after_days:
            return "A student dropped from the LMS course is suspended; their files are kept."
        days = "1 day" if self.remove_after_days == 1 else f"{self.remove_after_days} days"
        return (f"A student dropped from the LMS course is suspended at once (files kept) and removed "
                f"{days} later, unless they are back in the LMS course before.")

    def policy(self, login_claim: str) -> Policy:
        if self.remove_after_days:
            return Policy("remove", self.remove_after_days, login_claim)
        return Policy("suspend", 0, login_claim)


def dropped_policy(annotations: Mapping[str, Any]) -> DroppedPolicy:
    """The course's policy from its namespace's annotations; a value that is not a whole number
    of days from 1 to MAX_DAYS is a problem in words, and nobody is removed because of it."""
    raw = annotations.get(ANNOTATION_REMOVE_AFTER)
    text = str(raw).strip() if raw is not None else ""
    if text in ("", "0", "never"):
        return DroppedPolicy()
    if text.isdigit() and 1 <= int(text) <= MAX_DAYS:
        return DroppedPolicy(int(text))
    return DroppedPolicy(problem=f"The course's {ANNOTATION_REMOVE_AFTER} is {text[:40]!r}, not a number "
                                 f"of days from 1 to {MAX_DAYS}: dropped students are only suspended "
                                 "until it is fixed.")


def removals(course: Course, plan: SyncPlan, dropped: DroppedPolicy,
             now: datetime) -> tuple[tuple[str, float], ...]:
    """(login, when) of each student the policy will remove, soonest first, as the course will be
    once `plan` is applied: those the sync suspended before (from when it did) and those it
    suspends now (from now); not those it restores or removes now."""
    if not dropped.remove_after_days:
        return ()
    days = timedelta(days=dropped.remove_after_days)
    leaving = set(plan.restore) | set(plan.remove)
    due = {login: (student.suspended_at + days).timestamp()
           for login, student in course.students.items()
           if student.suspended and student.suspended_by == "lms" and student.suspended_at is not None
           and login not in leaving}
    due.update({login: (now + days).timestamp() for login in plan.suspend})
    return tuple(sorted(due.items(), key=lambda item: (item[1], item[0])))


@dataclass(frozen=True)
class SyncRecord:
    time: float
    actor: str  # SCHEDULE, or the login of who pressed "Sync roster now"
    ok: bool
    summary: str = ""
    error: str = ""
    changes: tuple[tuple[str, str], ...] = ()  # (login, what happened)
    skipped: tuple[tuple[str, str], ...] = ()  # (who, why)
    counts: dict[str, int] = field(default_factory=dict)
    policy: str = ""  # the course's policy for dropped students, in words (or its problem)
    removals: tuple[tuple[str, float], ...] = ()  # (login, when) the policy will remove them

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes | None) -> SyncRecord | None:
        if not text:
            return None
        try:
            raw: Any = json.loads(text)
            return cls(time=float(raw["time"]), actor=str(raw["actor"]), ok=bool(raw["ok"]),
                       summary=str(raw.get("summary", "")), error=str(raw.get("error", "")),
                       changes=tuple((str(a), str(b)) for a, b in raw.get("changes", ())),
                       skipped=tuple((str(a), str(b)) for a, b in raw.get("skipped", ())),
                       counts={str(k): int(v) for k, v in (raw.get("counts") or {}).items()},
                       policy=str(raw.get("policy", "")),
                       removals=tuple((str(a), float(b)) for a, b in raw.get("removals", ())))
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def changed(self) -> bool:
        return any(n for k, n in self.counts.items() if k not in ("error", "missing", "exists"))


def _word(outcome: str, detail: str) -> str:
    words = CHANGE_WORDS.get(outcome, outcome)
    return f"{words}: {detail}" if outcome in ("error", "missing") and detail else words


def record(plans: Iterable[SyncPlan], results: Iterable[tuple[str, str, str]], *, actor: str,
           now: float, policy: str = "", removals: Iterable[tuple[str, float]] = ()) -> SyncRecord:
    """`results`: (login, outcome, detail) of each row apply_plan gave (web/actions.py RowResult)."""
    plans = list(plans)
    rows = [r for r in results if r[1] != "exists"]
    counts: dict[str, int] = {}
    for _, outcome, _ in rows:
        counts[outcome] = counts.get(outcome, 0) + 1
    members = sum(p.members for p in plans)
    summary = "; ".join(p.summary() for p in plans) if len(plans) != 1 else plans[0].summary()
    skipped = tuple((s.who, s.reason) for p in plans for s in p.skipped)
    return SyncRecord(
        time=now, actor=actor, ok=True, summary=summary or f"{members} in the LMS: nothing to do",
        changes=tuple(sorted((login, _word(what, detail)) for login, what, detail in rows))[:MAX_LISTED],
        skipped=skipped[:MAX_LISTED], counts=counts, policy=policy,
        removals=tuple(sorted(removals, key=lambda item: (item[1], item[0])))[:MAX_LISTED])


def failed(error: str, *, actor: str, now: float) -> SyncRecord:
    return SyncRecord(time=now, actor=actor, ok=False, error=error,
                      summary="Nothing was changed: the LMS roster could not be read.")


def audit_result(sync: SyncRecord) -> str:
    return sync.summary if sync.ok else f"failed: {sync.error}"[:300]
