"""What the class dashboard shows of a course's last LMS roster sync. Pure, no I/O.

`record(...)` turns a sync's plans and the results of applying them (web/lti_roster.py) into a
`SyncRecord` (kept in Redis by web/lti_sync.py, one per course): when, who asked (the schedule
or a member of staff), the plan's one-line summary, each change made with its words, and each
member skipped with the reason, in a teacher's words. A sync that could not read a roster
changes nothing and says why (`error`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from userland.platform.model.lti_services_roster_diff import SyncPlan

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
                       counts={str(k): int(v) for k, v in (raw.get("counts") or {}).items()})
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def changed(self) -> bool:
        return any(n for k, n in self.counts.items() if k not in ("error", "missing", "exists"))


def _word(outcome: str, detail: str) -> str:
    words = CHANGE_WORDS.get(outcome, outcome)
    return f"{words}: {detail}" if outcome in ("error", "missing") and detail else words


def record(plans: Iterable[SyncPlan], results: Iterable[tuple[str, str, str]], *, actor: str,
           now: float) -> SyncRecord:
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
        skipped=skipped[:MAX_LISTED], counts=counts)


def failed(error: str, *, actor: str, now: float) -> SyncRecord:
    return SyncRecord(time=now, actor=actor, ok=False, error=error,
                      summary="Nothing was changed: the LMS roster could not be read.")


def audit_result(sync: SyncRecord) -> str:
    return sync.summary if sync.ok else f"failed: {sync.error}"[:300]
