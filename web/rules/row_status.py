"""What a row says about one environment: one precedence rule, one filter table, the words.

Every page and action that says or selects an environment's status goes through here: the
class dashboard's rows, counts and Status filter (web/rules/dashboard.py), the course-wide actions'
selection and confirmation (web/rules/selection.py, web/routes_actions.py), /me and the admin page.
So a filter value means the same everywhere, and what a row says is what the Status filter
picks.

The rule (`shown_phase`), strongest first, consistent with the operator's own status (which
lets `spec.suspended` win over a missing or invalid Template):
1. being removed (`metadata.deletionTimestamp`)        -> Removing   "Being removed"
2. suspended by staff (`spec.suspended`)               -> Suspended  (whatever the status says)
3. the status still says Suspended but spec no longer  -> Starting   (just resumed)
4. the operator's `status.phase`                       -> as written; none yet -> Pending "Waiting"

Words are for people, not for Kubernetes experts: "the image cannot be downloaded", not
"ImagePullBackOff"; the cluster's own message goes along for staff as the detail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

PHASES = ("Pending", "Starting", "Ready", "Suspended", "Idle", "Failed")  # the CRD's enum
PHASE_WORDS = {"Ready": "Ready", "Starting": "Starting", "Pending": "Waiting", "Suspended": "Suspended",
               "Idle": "Asleep", "Failed": "Failed", "Removing": "Being removed"}
# Worst first: a student's row is sorted by the phase of their worst environment shown.
PHASE_SEVERITY = {"Failed": 0, "Starting": 1, "Pending": 2, "Removing": 3, "Suspended": 4, "Idle": 5,
                  "Ready": 6}

# The Status filter: the value the dashboard's page sends -> the shown phase it picks. The only
# table of it: the dashboard's select is made from it, and a course-wide action refuses any
# value that is not in it (400), so no value can ever mean "everyone" on one side only.
STATUS_FILTERS: Mapping[str, str] = {
    "ready": "Ready", "starting": "Starting", "waiting": "Pending", "failed": "Failed",
    "asleep": "Idle", "suspended": "Suspended", "removing": "Removing",
}
assert set(STATUS_FILTERS.values()) == set(PHASE_WORDS), "every shown phase has one filter"


class UnknownFilter(ValueError):
    """A Status filter value that is not in STATUS_FILTERS."""


def filter_phase(value: str) -> str | None:
    """The shown phase a filter value picks; None for "" (every status). Raises UnknownFilter."""
    if value == "":
        return None
    if value not in STATUS_FILTERS:
        raise UnknownFilter(value)
    return STATUS_FILTERS[value]


def shown_phase(*, deleting: bool, suspended: bool, phase: str | None) -> str:
    """The one precedence rule (module docstring)."""
    if deleting:
        return "Removing"
    if suspended:
        return "Suspended"
    if phase == "Suspended":
        return "Starting"
    return phase if phase in PHASES else "Pending"


def phase_of(userland: JSON) -> str:
    """`shown_phase` of a Userland object (full or slim)."""
    meta = userland.get("metadata") or {}
    return shown_phase(deleting=bool(meta.get("deletionTimestamp")),
                       suspended=(userland.get("spec") or {}).get("suspended") is True,
                       phase=(userland.get("status") or {}).get("phase"))


def badge_class(phase: str) -> str:
    """The stylesheet's class for a phase's badge (app.css: .phase-ready ...)."""
    return "phase-" + {"Pending": "pending", "Removing": "idle"}.get(phase, phase.lower())


# ---- words -----------------------------------------------------------------------------------

IMAGE = "the image cannot be downloaded"
CRASH = "keeps crashing"
ROOM = "not enough room in the cluster"
QUOTA = "not enough room in the course's quota"
STORAGE = "its storage cannot be attached"
CONFIG = "its configuration is incomplete"
HEALTH = "does not answer its health check"
NOT_INSTALLED = "its program is not installed on this machine"
TIMEOUT = "it did not become ready in time"
MEMORY = "it ran out of memory"

# A container's waiting (or last terminated) reason, and the Ready condition's reason of a
# Failed environment (the operator copies the Pod's final reason there).
WAITING_WORDS = {"ImagePullBackOff": IMAGE, "ErrImagePull": IMAGE, "InvalidImageName": IMAGE,
                 "ErrImageNeverPull": IMAGE, "CrashLoopBackOff": CRASH,
                 "CreateContainerConfigError": CONFIG, "CreateContainerError": CONFIG,
                 "ProgramNotInstalled": NOT_INSTALLED, "OOMKilled": MEMORY,
                 # The local runner's (make run) reasons for a Pod it cannot run as written.
                 "NoCommand": CONFIG, "InvalidContainer": CONFIG, "InvalidProbe": CONFIG,
                 "InvalidPod": CONFIG}
CONDITION_WORDS = {"TemplateNotFound": "its template does not exist yet",
                   "InvalidTemplate": "its template has a mistake",
                   "InvalidSpec": "it was set up wrongly",
                   "InvalidPodSpec": "its template has a mistake",
                   "Duplicate": "another environment duplicates it",
                   "NameConflict": "a name is already taken",
                   "RouteConflict": "its address is taken by another Template",
                   "ProgressDeadlineExceeded": "it did not start in time",
                   "StartTimeout": TIMEOUT,
                   "Waking": "waking up",
                   # A start that waits on the cluster (operator/rules/progress.py BLOCKED_REASONS).
                   "QuotaExceeded": QUOTA, "StorageUnavailable": STORAGE, "Unschedulable": ROOM,
                   **WAITING_WORDS}
# What a student reads on /me: staff read the words above and the cluster's details; a student
# gets the same facts without cluster or platform words ("image", "template", "quota").
STUDENT_PROBLEM_WORDS = {IMAGE: "its software cannot be downloaded", CRASH: "it keeps stopping as it starts",
                         ROOM: "the servers have no room for it right now",
                         QUOTA: "your course has no room left for it right now",
                         STORAGE: "its files cannot be made available", CONFIG: "its setup is incomplete",
                         HEALTH: "it does not answer yet",
                         NOT_INSTALLED: "its program is not installed here",
                         TIMEOUT: "it did not start in time", MEMORY: "it ran out of memory"}
STUDENT_CONDITION_WORDS = {"TemplateNotFound": "your course has not finished setting it up",
                           "InvalidTemplate": "its setup has a mistake",
                           "InvalidSpec": "its setup has a mistake",
                           "InvalidPodSpec": "its setup has a mistake",
                           "Duplicate": "it was given to you twice",
                           "NameConflict": "its name is already taken",
                           "RouteConflict": "another app of your course was given the same address",
                           "ProgressDeadlineExceeded": "it did not start in time",
                           "Waking": "waking up",
                           **{reason: STUDENT_PROBLEM_WORDS[w] for reason, w in WAITING_WORDS.items()},
                           "StartTimeout": STUDENT_PROBLEM_WORDS[TIMEOUT],
                           **{reason: STUDENT_PROBLEM_WORDS[words] for reason, words in (
                               ("QuotaExceeded", QUOTA), ("StorageUnavailable", STORAGE),
                               ("Unschedulable", ROOM))}}


@dataclass(frozen=True)
class Problem:
    words: str   # plain words, shown to everyone
    detail: str  # the cluster's own message, shown to staff


def classify(reason: str, message: str) -> str | None:
    """Plain words for a pod's waiting reason or a Warning Event, or None when it explains nothing."""
    if reason in WAITING_WORDS:
        return WAITING_WORDS[reason]
    lowered = message.lower()
    if "quota" in lowered:
        return QUOTA
    if reason == "FailedScheduling":
        return ROOM
    if reason in ("BackOff", "Failed"):
        return IMAGE if ("image" in lowered or "pull" in lowered) else CRASH
    if reason in ("FailedMount", "FailedAttachVolume"):
        return STORAGE
    if reason == "Unhealthy":
        return HEALTH
    return None


def problems_of(pods: Iterable[JSON], events: Iterable[JSON]) -> tuple[Problem, ...]:
    """What keeps an environment from becoming ready, from its pods and Warning Events."""
    found: dict[str, str] = {}
    for pod in pods:
        status = pod.get("status") or {}
        for waiting in status.get("waiting") or []:
            reason, message = str(waiting.get("reason") or ""), str(waiting.get("message") or "")
            words = classify(reason, message)
            if words:
                found.setdefault(words, f"{reason}: {message}".rstrip(": "))
        if status.get("unschedulable"):
            message = str(status["unschedulable"])
            found.setdefault(QUOTA if "quota" in message.lower() else ROOM, message)
    newest_first = sorted((e for e in events if e.get("type") == "Warning"),
                          key=lambda e: str(e.get("lastTimestamp") or ""), reverse=True)
    for event in newest_first:
        words = classify(str(event.get("reason") or ""), str(event.get("message") or ""))
        if words:
            found.setdefault(words, f"{event.get('reason')}: {event.get('message') or ''}".rstrip(": "))
    return tuple(Problem(w, d) for w, d in found.items())


def staff_reason(phase: str, condition: str, problems: tuple[Problem, ...], *, resumed: bool = False) -> str:
    """The reason a row gives staff, in words, for a shown phase."""
    if phase == "Removing":
        return "being removed"
    if phase == "Suspended":
        return "suspended by the course staff"
    if phase == "Ready":
        return "ready to use"
    if phase == "Idle":
        return "asleep after a while without use; it wakes when opened"
    if problems:
        return "; ".join(p.words for p in problems)
    if resumed:
        return "being resumed"
    if phase == "Failed":
        return CONDITION_WORDS.get(condition, "it cannot start")
    if phase == "Pending":
        return CONDITION_WORDS.get(condition, "waiting to be set up")
    return CONDITION_WORDS.get(condition, "starting")


def student_reason(phase: str, condition: str, problems: tuple[Problem, ...]) -> str:
    """The same in a student's words (no cluster or platform terms)."""
    if phase in ("Ready", "Suspended", "Idle", "Removing"):
        return {"Ready": "ready to use", "Suspended": "paused by your course staff",
                "Idle": "asleep after a while without use; it wakes when opened",
                "Removing": "being removed"}[phase]
    if problems:
        return "; ".join(STUDENT_PROBLEM_WORDS.get(p.words, "it cannot start") for p in problems)
    if phase == "Failed":
        return STUDENT_CONDITION_WORDS.get(condition, "it cannot start")
    if phase == "Pending":
        return STUDENT_CONDITION_WORDS.get(condition, "waiting to be set up")
    return STUDENT_CONDITION_WORDS.get(condition, "starting")
