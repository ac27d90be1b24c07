"""The class dashboard as data (pure): rows from the cached objects, then search, filter, sort, page.

Input objects are the slim shapes of web/rules/slim.py. One `StudentRow` per student (spec.user),
one `Environment` per Userland (normally one per Template). Times are kept as epoch seconds so
a cached row stays right: the words ("starting for 2 min") are made at render time from `now`.
What a row says (its phase by one precedence rule, and the words) comes from web/rules/row_status.py.

The unit is the environment: the search and the Status filter pick environments, a student is
listed with only their environments that match, and the counts, the course-wide actions'
confirmation and the actions themselves use that same set (`matching`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from userland.platform.model import naming
from userland.web.rules import row_status
from userland.web.rules.row_status import Problem

JSON = dict[str, Any]

# The words and the one precedence rule live in web/rules/row_status.py; these names stay here for
# the pages and tests that read them from the dashboard.
PHASE_WORDS = row_status.PHASE_WORDS
PHASE_SEVERITY = row_status.PHASE_SEVERITY
STATUS_FILTERS = row_status.STATUS_FILTERS
badge_class = row_status.badge_class
SORTS = {"login": "Student", "phase": "Status", "activity": "Last activity", "starting": "Starting for"}
PER_PAGE = 50
MAX_QUERY = 100


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


def template_title(template: JSON | None, name: str) -> str:
    return str(((template or {}).get("spec") or {}).get("displayName") or name)


def environment(userland: JSON, template: JSON | None, pods: Iterable[JSON] = (),
                events: Iterable[JSON] = ()) -> Environment:
    meta = userland.get("metadata") or {}
    spec = userland.get("spec") or {}
    status = userland.get("status") or {}
    annotations = meta.get("annotations") or {}
    ready = _ready_condition(userland)
    phase = row_status.phase_of(userland)
    name = str(meta.get("name") or "")
    template_name = str(spec.get("template") or "")
    condition = str(ready.get("reason") or "")
    problems: tuple[Problem, ...] = ()
    if phase in ("Starting", "Pending", "Failed"):
        problems = row_status.problems_of(pods, events)
    resumed = phase == "Starting" and status.get("phase") == "Suspended"
    reason = row_status.staff_reason(phase, condition, problems, resumed=resumed)
    since = None
    if phase in ("Starting", "Pending", "Failed"):
        since = parse_time(ready.get("lastTransitionTime")) or parse_time(meta.get("creationTimestamp"))
    storage = ((template or {}).get("spec") or {}).get("storage") or {}
    return Environment(
        name=name, template=template_name, template_title=template_title(template, template_name),
        phase=phase, reason=reason, detail=str(ready.get("message") or ""),
        condition=condition, problems=problems, since=since,
        last_activity=parse_time(annotations.get(naming.ANNOTATION_LAST_ACTIVITY)),
        url=str(status.get("url") or ""), suspended=bool(spec.get("suspended")),
        reclaim_policy=str(storage.get("reclaimPolicy") or ""))


def student_row(login: str, userlands: Sequence[JSON], environments: Sequence[Environment]) -> StudentRow:
    """One student's row from their Userlands (for the roster details) and environments."""
    details: dict[str, str] = {}
    for obj in userlands:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        for key, annotation in naming.ROSTER_DETAILS.items():
            if annotations.get(annotation) and key not in details:
                details[key] = str(annotations[annotation])
    envs = tuple(sorted(environments, key=lambda e: (e.template_title.lower(), e.name)))
    search = " ".join([login, *details.values()]).lower()
    row = StudentRow(login=login, name=details.get("name", ""), email=details.get("email", ""),
                     section=details.get("section", ""), search_text=search)
    return with_environments(row, envs)


def with_environments(row: StudentRow, envs: tuple[Environment, ...]) -> StudentRow:
    """`row` showing only `envs`: its phase (the worst), "starting for" and last activity follow."""
    phase = min((e.phase for e in envs), key=lambda p: PHASE_SEVERITY.get(p, 0), default="Pending")
    starts = [e.since for e in envs if e.since is not None]
    activity = [e.last_activity for e in envs if e.last_activity is not None]
    return replace(row, environments=envs, phase=phase, since=min(starts) if starts else None,
                   last_activity=max(activity) if activity else None)


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
    phase: str = ""             # a key of row_status.STATUS_FILTERS, or "" for every status
    sort: str = "login"
    desc: bool = False
    page: int = 1
    per_page: int = PER_PAGE
    unknown_phase: str = ""     # a Status value the page was asked for that does not exist

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> Query:
        """From query parameters; anything unknown falls back to the default (a page never
        fails on a stale bookmark); an unknown Status is kept in `unknown_phase` so the page
        can say so. The course-wide form sends the normalized `phase`, so it acts on what the
        page then shows."""
        phase = params.get("phase", "")
        sort = params.get("sort", "login")
        try:
            page = max(1, min(int(params.get("page", "1")), 10_000))
        except ValueError:
            page = 1
        known = phase in STATUS_FILTERS
        return cls(q=params.get("q", "").strip()[:MAX_QUERY], phase=phase if known else "",
                   sort=sort if sort in SORTS else "login", desc=params.get("desc", "") == "1", page=page,
                   unknown_phase="" if known or not phase else phase[:40])

    @property
    def filtered(self) -> bool:
        return bool(self.q or self.phase)

    def params(self, **overrides: Any) -> str:
        values = {"q": self.q, "phase": self.phase, "sort": self.sort, "desc": "1" if self.desc else "",
                  "page": str(self.page)}
        values.update({k: str(v) for k, v in overrides.items()})
        return urlencode({k: v for k, v in values.items() if v and not (k == "page" and v == "1")
                          and not (k == "sort" and v == "login")})

    def environments_of(self, row: StudentRow) -> tuple[Environment, ...]:
        """The student's environments this query picks: every search word in the student's
        login, name, email or section, or the environment's Template or name; and the shown
        phase the Status filter names."""
        if not self.filtered:
            return row.environments
        words = self.q.casefold().split()
        wanted = row_status.filter_phase(self.phase)
        found = []
        for env in row.environments:
            if wanted is not None and env.phase != wanted:
                continue
            haystack = f"{row.search_text} {env.template} {env.name}".casefold()
            if all(word in haystack for word in words):
                found.append(env)
        return tuple(found)

    def matches(self, row: StudentRow) -> bool:
        return bool(self.environments_of(row))


def matching(rows: Iterable[StudentRow], query: Query) -> list[StudentRow]:
    """Every student with an environment the query picks, showing only those (all pages)."""
    found = []
    for row in rows:
        envs = query.environments_of(row)
        if envs or not query.filtered:
            found.append(row if len(envs) == len(row.environments) else with_environments(row, envs))
    return found


@dataclass(frozen=True)
class Selection:
    rows: tuple[StudentRow, ...]
    matched: int                # students with a matching environment
    total: int                  # students of the course
    page: int
    pages: int
    counts: Mapping[str, int]   # environments per shown phase (whole course)
    environments: int           # environments of the course
    matched_environments: int = 0

    @property
    def shown_environments(self) -> int:
        return sum(len(r.environments) for r in self.rows)


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
    matched = sorted(matching(everyone, query), key=_sort_key(query.sort, now), reverse=query.desc)
    pages = max(1, -(-len(matched) // query.per_page))
    page = min(query.page, pages)
    start = (page - 1) * query.per_page
    counts = phase_counts(everyone)
    return Selection(rows=tuple(matched[start:start + query.per_page]), matched=len(matched),
                     total=len(everyone), page=page, pages=pages, counts=counts,
                     environments=sum(counts.values()),
                     matched_environments=sum(len(r.environments) for r in matched))


def student_reason(env: Environment) -> str:
    """`reason` in a student's words (the "my environments" page)."""
    return row_status.student_reason(env.phase, env.condition, env.problems)


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


@dataclass(frozen=True)
class LectureLine:
    """One line about a Template's next lecture: `ready` None while it is not known yet;
    `headline` ("not ready for the lecture at 09:00") and `details` (what is and is not there)."""

    title: str
    ready: bool | None
    message: str

    @property
    def headline(self) -> str:
        head = self.message.partition(": ")[0]
        return head[:1].lower() + head[1:]

    @property
    def details(self) -> str:
        return self.message.partition(": ")[2]


def lecture_lines(templates: Mapping[str, JSON]) -> list[LectureLine]:
    """What the operator says of each scheduled Template's next lecture (its LectureReady
    condition, slimmed by web/rules/slim.py, worded for teachers by
    operator/rules/capacity/readiness.py): "Ready for the lecture at 09:00: 300 of 300
    environments can start; ...", by the Template's title."""
    lines = []
    for name, obj in sorted(templates.items()):
        lecture = (obj.get("status") or {}).get("lecture")
        if not isinstance(lecture, dict) or not lecture.get("message"):
            continue
        title = str((obj.get("spec") or {}).get("displayName") or name)
        status = lecture.get("status")
        lines.append(LectureLine(title, True if status == "True" else False if status == "False" else None,
                                 str(lecture["message"])))
    return lines
