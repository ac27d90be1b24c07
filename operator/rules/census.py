"""How many environments each course has, in which phase, and which cannot start and why.

Kept level with the Userland watch by a handler (every add, change and delete adjusts the
counts), so a scrape reads a few counters instead of decoding thousands of cached objects.
Counted by (course, Template, phase) and (course, Template, failure kind): bounded by courses
and Templates, never by students (docs/metrics.md).

`failure_kind` sorts the reason a status gives (its Ready condition's) into the few kinds an
operator acts on differently: image, crash, quota, storage, scheduling, config, timeout, other.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Generic, TypeVar

from userland.platform.model.objects import condition, meta

JSON = dict[str, Any]
PHASES = ("Pending", "Starting", "Ready", "Idle", "Suspended", "Failed")

# The Ready condition's reason -> the kind of failure. The Pod's own final reasons
# (operator/rules/progress.py FINAL_REASONS), the starts blocked by the cluster (BLOCKED_REASONS), and
# the problems the operator finds itself (operator/rules/status.py, route_conflicts.py, apply.py).
_KINDS = {
    "image": ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
              # make run: the program a Template names is not installed on this machine, the
              # local runner's form of "the image cannot be had".
              "ProgramNotInstalled"),
    "crash": ("CrashLoopBackOff",),
    "quota": ("QuotaExceeded",),
    "storage": ("StorageUnavailable",),
    "scheduling": ("Unschedulable",),
    "config": ("CreateContainerConfigError", "CreateContainerError", "InvalidPodSpec", "InvalidTemplate",
               "InvalidSpec", "TemplateNotFound", "Duplicate", "NameConflict", "RouteConflict"),
    "timeout": ("StartTimeout", "ProgressDeadlineExceeded"),
}
KIND_OF_REASON = {reason: kind for kind, reasons in _KINDS.items() for reason in reasons}
FAILURE_KINDS = (*_KINDS, "other")
# Reasons that keep an environment from starting while its phase is still Pending or Starting.
_WAITING_FAILURES = frozenset({"QuotaExceeded", "StorageUnavailable", "Unschedulable", "TemplateNotFound"})


def phase_of(status: JSON | None) -> str:
    """The status's phase; Pending for a Userland the operator has not written yet."""
    phase = str((status or {}).get("phase") or "")
    return phase if phase in PHASES else "Pending"


def ready_reason(status: JSON | None) -> str:
    return str(condition(status or {}, "Ready").get("reason") or "")


def failure_kind(status: JSON | None) -> str | None:
    """Why an environment cannot start, as one of FAILURE_KINDS; None when nothing stops it (a
    suspended one is stopped on purpose: None)."""
    phase, reason = phase_of(status), ready_reason(status)
    if phase == "Failed":
        return KIND_OF_REASON.get(reason, "other")
    if phase in ("Pending", "Starting") and reason in _WAITING_FAILURES:
        return KIND_OF_REASON[reason]
    return None


def _template_of(obj: JSON) -> str:
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    return template if isinstance(template, str) else ""


Entry = tuple[str, str, str, str | None]  # course, template, phase, failure kind
E = TypeVar("E")


class KeptLevel(Generic[E]):
    """An informer handler that keeps what each object adds to some counts, and moves the counts
    by the difference on every add, change and delete (a scrape then reads counters, never the
    cache). Subclasses say what an object adds (`entry`) and how an entry counts (`_count`)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], E] = {}

    def entry(self, obj: JSON) -> E:
        raise NotImplementedError

    def _count(self, entry: E, sign: int) -> None:
        raise NotImplementedError

    def observe(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        if obj is None:
            return
        key = (str(meta(obj).get("namespace") or ""), str(meta(obj).get("name") or ""))
        before = self._entries.pop(key, None)
        if before is not None:
            self._count(before, -1)
        if new is not None:
            entry = self.entry(new)
            self._entries[key] = entry
            self._count(entry, +1)


class Census(KeptLevel[Entry]):
    """Counts of the Userlands a watch holds; `observe` is an informer handler."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: Counter[tuple[str, str, str]] = Counter()
        self.failing: Counter[tuple[str, str, str]] = Counter()

    def entry(self, obj: JSON) -> Entry:
        status = obj.get("status") if isinstance(obj.get("status"), dict) else None
        course = str(meta(obj).get("namespace") or "")
        return (course, _template_of(obj), phase_of(status), failure_kind(status))

    def _count(self, entry: Entry, sign: int) -> None:
        course, template, phase, kind = entry
        self.phases[(course, template, phase)] += sign
        if self.phases[(course, template, phase)] <= 0:
            del self.phases[(course, template, phase)]
        if kind is not None:
            self.failing[(course, template, kind)] += sign
            if self.failing[(course, template, kind)] <= 0:
                del self.failing[(course, template, kind)]

    def pairs(self) -> list[tuple[str, str]]:
        """Every (course, Template) with at least one environment."""
        return sorted({(course, template) for course, template, _ in self.phases})
