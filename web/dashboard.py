"""The class dashboard as data (pure): rows from the cached objects, then search, filter, sort, page.

Input objects are the slim shapes of web/slim.py. One `StudentRow` per student (spec.user),
one `Environment` per Userland (normally one per Template). Times are kept as epoch seconds so
a cached row stays right: the words ("starting for 2 min") are made at render time from `now`.
Words are for people, not for Kubernetes experts: "the image cannot be downloaded", not
"ImagePullBackOff"; the API server's own message goes along for staff as the detail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from userland.web import slim

JSON = dict[str, Any]

PHASE_WORDS = {"Ready": "Ready", "Starting": "Starting", "Pending": "Waiting", "Suspended": "Suspended",
               "Idle": "Asleep", "Failed": "Failed", "Removing": "Being removed"}
# Worst first: a student's row shows the phase of their worst environment.
PHASE_SEVERITY = {"Failed": 0, "Starting": 1, "Pending": 2, "Removing": 3, "Suspended": 4, "Idle": 5,
                  "Ready": 6}
# Filter keys are the phases in lower case: the actions page (web/selection.py) reads the same
# `q` and `phase` for a course-wide run, so both select the same environments.
PHASE_FILTERS = {"ready": "Ready", "starting": "Starting", "pending": "Pending", "failed": "Failed",
                 "suspended": "Suspended", "idle": "Idle"}
SORTS = {"login": "Student", "phase": "Status", "activity": "Last activity", "starting": "Starting for"}
PER_PAGE = 50
MAX_QUERY = 100

IMAGE = "the image cannot be downloaded"
CRASH = "keeps crashing"
ROOM = "not enough room in the cluster"
QUOTA = "not enough room in the course's quota"
STORAGE = "its storage cannot be attached"
CONFIG = "its configuration is incomplete"
HEALTH = "does not answer its health check"

_WAITING_WORDS = {"ImagePullBackOff": IMAGE, "ErrImagePull": IMAGE, "InvalidImageName": IMAGE,
                  "ErrImageNeverPull": IMAGE, "CrashLoopBackOff": CRASH,
                  "CreateContainerConfigError": CONFIG, "CreateContainerError": CONFIG}
_CONDITION_WORDS = {"TemplateNotFound": "its template does not exist yet",
                    "InvalidTemplate": "its template has a mistake",
                    "InvalidSpec": "it was set up wrongly",
                    "InvalidPodSpec": "its template has a mistake",
                    "Duplicate": "another environment duplicates it",
                    "NameConflict": "a name is already taken",
                    "RouteConflict": "its address is taken by another Template",
                    "ProgressDeadlineExceeded": "it did not start in time"}
# What a student reads on /me: staff read `reason` above and the cluster's details; a student
# gets the same facts without cluster or platform words ("image", "template", "quota").
_STUDENT_PROBLEM_WORDS = {IMAGE: "its software cannot be downloaded", CRASH: "it keeps stopping as it starts",
                          ROOM: "the servers have no room for it right now",
                          QUOTA: "your course has no room left for it right now",
                          STORAGE: "its files cannot be made available", CONFIG: "its setup is incomplete",
                          HEALTH: "it does not answer yet"}
_STUDENT_CONDITION_WORDS = {"TemplateNotFound": "your course has not finished setting it up",
                            "InvalidTemplate": "its setup has a mistake",
                            "InvalidSpec": "its setup has a mistake",
                            "InvalidPodSpec": "its setup has a mistake",
                            "Duplicate": "it was given to you twice",
                            "NameConflict": "its name is already taken",
                            "RouteConflict": "another app of your course was given the same address",
                            "ProgressDeadlineExceeded": "it did not start in time"}


@dataclass(frozen=True)
class Problem:
    words: str   # plain words, shown to everyone
    detail: str  # the cluster's own message, shown to staff


def badge_class(phase: str) -> str:
    """The stylesheet's class for a phase's badge (app.css: .phase-ready ...)."""
    return "phase-" + {"Pending": "pending", "Removing": "idle"}.get(phase, phase.lower())


@dataclass(frozen=True)
class Environment:
    name: str                  # the Userland's name (what actions post)
    template: str
    template_title: str
    phase: str
    reason: str                # plain words
    detail: str                # the Ready condition's message (staff)
    condition: str = ""        # the Ready condition's reason (`Starting`, `RouteConflict` ...)
    problems: tuple[Problem, ...] = ()
    since: float | None = None  # starting/waiting since (epoch seconds)
    last_activity: float | None = None
    url: str = ""
    suspended: bool = False
    reclaim_policy: str = ""   # the Template's storage reclaimPolicy ("" without storage)

    @property
    def phase_words(self) -> str:
        return PHASE_WORDS.get(self.phase, self.phase)

    @property
    def badge(self) -> str:
        return badge_class(self.phase)


@dataclass(frozen=True)
class StudentRow:
    login: str
    name: str = ""
    email: str = ""
    section: str = ""
    environments: tuple[Environment, ...] = ()
    phase: str = "Ready"
    since: float | None = None
    last_activity: float | None = None
    search_text: str = field(default="", repr=False)

    @property
    def phase_words(self) -> str:
        return PHASE_WORDS.get(self.phase, self.phase)


def parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _ready_condition(userland: JSON) -> JSON:
    for cond in (userland.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return dict(cond)
    return {}


def classify(reason: str, message: str) -> str | None:
    """Plain words for a pod's waiting reason or a Warning Event, or None when it explains nothing."""
    if reason in _WAITING_WORDS:
        return _WAITING_WORDS[reason]
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


def template_title(template: JSON | None, name: str) -> str:
    return str(((template or {}).get("spec") or {}).get("displayName") or name)


def environment(userland: JSON, template: JSON | None, pods: Iterable[JSON] = (),
                events: Iterable[JSON] = ()) -> Environment:
    meta = userland.get("metadata") or {}
    spec = userland.get("spec") or {}
    status = userland.get("status") or {}
    annotations = meta.get("annotations") or {}
    ready = _ready_condition(userland)
    phase = str(status.get("phase") or "Pending")
    if meta.get("deletionTimestamp"):
        phase = "Removing"
    name = str(meta.get("name") or "")
    template_name = str(spec.get("template") or "")
    problems: tuple[Problem, ...] = ()
    if phase in ("Starting", "Pending", "Failed"):
        problems = problems_of(pods, events)
    if phase == "Ready":
        reason = "ready to use"
    elif phase == "Suspended":
        reason = "suspended by the course staff"
    elif phase == "Idle":
        reason = "asleep after a while without use; it wakes when opened"
    elif phase == "Removing":
        reason = "being removed"
    elif problems:
        reason = "; ".join(p.words for p in problems)
    elif phase == "Failed":
        reason = _CONDITION_WORDS.get(str(ready.get("reason") or ""), "it cannot start")
    elif phase == "Pending":
        reason = _CONDITION_WORDS.get(str(ready.get("reason") or ""), "waiting to be set up")
    else:
        reason = "starting"
    since = None
    if phase in ("Starting", "Pending", "Failed"):
        since = parse_time(ready.get("lastTransitionTime")) or parse_time(meta.get("creationTimestamp"))
    storage = ((template or {}).get("spec") or {}).get("storage") or {}
    return Environment(
        name=name, template=template_name, template_title=template_title(template, template_name),
        phase=phase, reason=reason, detail=str(ready.get("message") or ""),
        condition=str(ready.get("reason") or ""), problems=problems, since=since,
        last_activity=parse_time(annotations.get(slim.ANNOTATION_LAST_ACTIVITY)),
        url=str(status.get("url") or ""), suspended=bool(spec.get("suspended")),
        reclaim_policy=str(storage.get("reclaimPolicy") or ""))


def student_row(login: str, userlands: Sequence[JSON], environments: Sequence[Environment]) -> StudentRow:
    """One student's row from their Userlands (for the roster details) and environments."""
    details: dict[str, str] = {}
    for obj in userlands:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        for key, annotation in (("name", slim.ANNOTATION_NAME), ("email", slim.ANNOTATION_EMAIL),
                                ("section", slim.ANNOTATION_SECTION)):
            if annotations.get(annotation) and key not in details:
                details[key] = str(annotations[annotation])
    envs = tuple(sorted(environments, key=lambda e: (e.template_title.lower(), e.name)))
    phase = min((e.phase for e in envs), key=lambda p: PHASE_SEVERITY.get(p, 0), default="Pending")
    starts = [e.since for e in envs if e.since is not None]
    activity = [e.last_activity for e in envs if e.last_activity is not None]
    search = " ".join([login, *details.values()]).lower()
    return StudentRow(login=login, name=details.get("name", ""), email=details.get("email", ""),
                      section=details.get("section", ""), environments=envs, phase=phase,
                      since=min(starts) if starts else None,
                      last_activity=max(activity) if activity else None, search_text=search)


def duration_words(seconds: float) -> str:
    """"less than a minute", "2 min", "1 h 5 min", "3 days"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return "less than a minute"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} days"


def since_words(then: float | None, now: float) -> str:
    return "" if then is None else duration_words(now - then)


def ago_words(then: float | None, now: float) -> str:
    if then is None:
        return "not known"
    if now - then < 60:
        return "just now"
    return duration_words(now - then) + " ago"


@dataclass(frozen=True)
class Query:
    q: str = ""
    phase: str = ""
    sort: str = "login"
    desc: bool = False
    page: int = 1
    per_page: int = PER_PAGE

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> Query:
        """From query parameters; anything unknown falls back to the default (never an error)."""
        phase = params.get("phase", "")
        sort = params.get("sort", "login")
        try:
            page = max(1, min(int(params.get("page", "1")), 10_000))
        except ValueError:
            page = 1
        return cls(q=params.get("q", "").strip()[:MAX_QUERY], phase=phase if phase in PHASE_FILTERS else "",
                   sort=sort if sort in SORTS else "login", desc=params.get("desc", "") == "1", page=page)

    def params(self, **overrides: Any) -> str:
        values = {"q": self.q, "phase": self.phase, "sort": self.sort, "desc": "1" if self.desc else "",
                  "page": str(self.page)}
        values.update({k: str(v) for k, v in overrides.items()})
        return urlencode({k: v for k, v in values.items() if v and not (k == "page" and v == "1")
                          and not (k == "sort" and v == "login")})

    def matches(self, row: StudentRow) -> bool:
        """A student is shown when one of their environments matches, as web/selection.py
        decides for course-wide actions: every search word in the login, name, email, section,
        Template or environment name, and the phase."""
        if not self.q and not self.phase:
            return True
        words = self.q.casefold().split()
        wanted = PHASE_FILTERS.get(self.phase)
        for env in row.environments:
            if wanted is not None and env.phase != wanted:
                continue
            haystack = f"{row.search_text} {env.template} {env.name}".casefold()
            if all(word in haystack for word in words):
                return True
        return False


@dataclass(frozen=True)
class Selection:
    rows: tuple[StudentRow, ...]
    matched: int
    total: int
    page: int
    pages: int
    counts: Mapping[str, int]   # environments per phase (whole course)
    environments: int


def _sort_key(sort: str, now: float) -> Any:
    far = float("inf")
    if sort == "phase":
        return lambda r: (PHASE_SEVERITY.get(r.phase, 0), r.login)
    if sort == "activity":  # most recent first; unknown last
        return lambda r: (-(r.last_activity or -far), r.login)
    if sort == "starting":  # starting the longest first; not starting last
        return lambda r: (r.since if r.since is not None else far, r.login)
    return lambda r: r.login


def phase_counts(rows: Iterable[StudentRow]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        for env in row.environments:
            counts[env.phase] = counts.get(env.phase, 0) + 1
    return counts


def select(rows: Iterable[StudentRow], query: Query, now: float = 0.0) -> Selection:
    everyone = list(rows)
    matched = sorted((r for r in everyone if query.matches(r)), key=_sort_key(query.sort, now),
                     reverse=query.desc)
    pages = max(1, -(-len(matched) // query.per_page))
    page = min(query.page, pages)
    start = (page - 1) * query.per_page
    counts = phase_counts(everyone)
    return Selection(rows=tuple(matched[start:start + query.per_page]), matched=len(matched),
                     total=len(everyone), page=page, pages=pages, counts=counts,
                     environments=sum(counts.values()))


def student_reason(env: Environment) -> str:
    """`reason` in a student's words (the "my environments" page)."""
    if env.phase in ("Ready", "Suspended", "Idle", "Removing"):
        return {"Ready": "ready to use", "Suspended": "paused by your course staff",
                "Idle": "asleep after a while without use; it wakes when opened",
                "Removing": "being removed"}[env.phase]
    if env.problems:
        return "; ".join(_STUDENT_PROBLEM_WORDS.get(p.words, "it cannot start") for p in env.problems)
    if env.phase == "Failed":
        return _STUDENT_CONDITION_WORDS.get(env.condition, "it cannot start")
    if env.phase == "Pending":
        return _STUDENT_CONDITION_WORDS.get(env.condition, "waiting to be set up")
    return "starting"


def advice(env: Environment) -> str:
    """What a student should do about one of their environments (no cluster words)."""
    if env.phase == "Ready":
        return "Open it and start working."
    if env.phase == "Suspended":
        return "Your course staff paused it. Ask them to resume it when you need it."
    if env.phase == "Idle":
        return "Open it: it wakes up by itself in a moment."
    if env.phase == "Removing":
        return "It is being removed. Ask your course staff if this is a surprise."
    if env.problems or env.phase == "Failed":
        return ("It cannot start right now. Tell your instructor or assistant what this page says; "
                "there is nothing you need to fix yourself.")
    return "It is starting. Reload this page in a minute."
