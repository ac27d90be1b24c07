"""What an action applies to, who may run it, and what a teacher must be told first: pure rules.

The actions form posts Userland names, or `scope=all` with the dashboard's search and Status
filter. A course-wide run is chosen from the dashboard's own rows with the dashboard's own
matching (web/rules/dashboard.py `matching`, one filter table in web/rules/row_status.py), so it covers
exactly the environments the page listed; a Status value that table does not know is refused,
never read as "everyone". Every course-wide run shows a confirmation first and then acts on the
names it listed. Names are looked up only among the course's own Userlands (anything else is
"missing", never looked up elsewhere).

The unit is the environment (one Userland: one student's app). Acting on the environments of
more than one student is a course-wide run, however the targets are named: assistants help
one student at a time (`permission_for`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from userland.platform.model import naming, storage_words
from userland.web.rules import row_status
from userland.web.rules.courses import Action, Course
from userland.web.rules.dashboard import StudentRow

JSON = dict[str, Any]

CourseAction = Literal["restart", "suspend", "resume", "start", "remove"]
COURSE_ACTIONS: tuple[CourseAction, ...] = ("start", "restart", "suspend", "resume", "remove")
MAX_TARGETS = 5000  # more names than any course has: a bigger form is not ours
MAX_STUDENTS_WITHOUT_COURSE_PERMISSION = 1


# Words for the teacher, one per action outcome (web/actions.py `Outcome`).
OUTCOME_WORDS: Mapping[str, str] = {
    "created": "Created",
    "exists": "Already there",
    "invalid": "Invalid",
    "not_allowed": "Not allowed",
    "removed": "Removed",
    "missing": "Not found",
    "restarted": "Restarted",
    "suspended": "Suspended",
    "resumed": "Resumed",
    "started": "Started",
    "unchanged": "No change needed",
    "left_suspended": "Left suspended",
    "cannot_start": "Cannot start",
    "error": "Error",
}
ACTION_WORDS: Mapping[str, tuple[str, str]] = {
    # action: (button / heading verb, past tense for the audit log)
    "start": ("Start", "started"),
    "restart": ("Restart", "restarted"),
    "suspend": ("Suspend", "suspended"),
    "resume": ("Resume", "resumed"),
    "remove": ("Remove", "removed"),
    "add": ("Add", "added"),
}
RESUME_SENTENCE = "Resuming starts it again; a student can use it once it is ready."


def parse_action(text: str) -> CourseAction | None:
    return text if text in COURSE_ACTIONS else None  # type: ignore[return-value]


def permission_for(action: CourseAction, whole_course: bool) -> Action:
    """The course permission (web/rules/courses.py) an action needs; course-wide runs need more.

    Course-wide runs are the instructor's (assistants help one student at a time); restarting
    everyone disrupts a class like starting everyone does, so it needs `start_all` too.
    """
    if whole_course:
        return {"start": "start_all", "resume": "start_all", "suspend": "suspend_all",
                "remove": "remove_all", "restart": "start_all"}[action]  # type: ignore[return-value]
    return action


def is_course_wide(targets: Sequence[Target]) -> bool:
    """Named targets of more than one student are a course-wide run (the permission holds however
    the targets are named: listing every environment by name is the whole class)."""
    return len({t.login for t in targets}) > MAX_STUDENTS_WITHOUT_COURSE_PERMISSION


def needs_confirmation(action: CourseAction, targets: Sequence[Target], *, whole_course: bool,
                       may_resume: bool) -> bool:
    """Every course-wide run asks first (it shows what it will touch); remove always; suspending
    or restarting more than one (it stops a class; a restart loses what is not saved: the page
    names whose); starting a suspended one when the teacher may resume it (resuming is a choice
    made on that page, never by default)."""
    if whole_course or action == "remove":
        return True
    if action in ("suspend", "restart"):
        return len(targets) > 1
    return action == "start" and may_resume and any(t.phase == "Suspended" for t in targets)


def typed_name_matches(typed: str, course: Course) -> bool:
    """The course name typed to confirm removing a whole course (namespace or title)."""
    text = " ".join(typed.split()).casefold()
    return bool(text) and text in (course.namespace.casefold(), " ".join(course.title.split()).casefold())


def storage_sentence(template: JSON | None, action: CourseAction = "remove") -> str:
    """What happens to the files (platform/model/storage_words.py, the gateway's pages' source too)."""
    if action == "resume":
        return RESUME_SENTENCE
    event: storage_words.StaffEvent = "restart" if action in ("restart", "start") else (
        "suspend" if action == "suspend" else "remove")
    return storage_words.for_staff(event, storage_words.storage_of(None if template is None
                                                                    else template.get("spec") or {}))


@dataclass(frozen=True)
class Target:
    """One Userland an action would touch, with what the pages show about it."""

    name: str
    login: str
    template: str
    phase: str          # the shown phase (web/rules/row_status.py)
    display_name: str = ""
    section: str = ""
    reason: str = ""    # the row's words, for "cannot start" on a confirmation
    title: str = ""     # the Template's display name, as the dashboard shows it


def target_of(obj: JSON) -> Target:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return Target(name=str(meta.get("name") or ""), login=naming.login_of(spec.get("user")),
                  template=str(spec.get("template") or ""), phase=row_status.phase_of(obj),
                  display_name=str(annotations.get(naming.ANNOTATION_STUDENT_NAME) or ""),
                  section=str(annotations.get(naming.ANNOTATION_STUDENT_SECTION) or ""))


@dataclass(frozen=True)
class Selection:
    targets: tuple[Target, ...]
    missing: tuple[str, ...] = ()   # names asked for that are not Userlands of this course
    skipped: tuple[Target, ...] = ()  # listed but left alone: already being removed


def select(userlands: Iterable[JSON], names: Sequence[str]) -> Selection:
    """The course's Userlands the names name (fresh from the API server).

    Only objects of the course namespace's own list are candidates, so a name from another
    course (or a made-up one) can never be acted on: it comes back as missing.
    """
    by_name: dict[str, JSON] = {}
    for obj in userlands:
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue  # already on its way out: nothing to start, restart or remove
        by_name[str(meta.get("name") or "")] = obj
    seen: set[str] = set()
    found: list[Target] = []
    missing: list[str] = []
    for name in names:
        name = name.strip()
        if not name or name in seen:
            continue
        seen.add(name)
        found_obj = by_name.get(name) if naming.is_valid_dns_label(name) else None
        if found_obj is None:
            missing.append(name[:80])
        else:
            found.append(target_of(found_obj))
    return Selection(targets=tuple(found), missing=tuple(missing))


def from_rows(rows: Iterable[StudentRow]) -> Selection:
    """A course-wide run's environments: the dashboard's rows as its matching left them (every
    page), those being removed set apart."""
    targets: list[Target] = []
    skipped: list[Target] = []
    for row in rows:
        for env in row.environments:
            target = Target(name=env.name, login=row.login, template=env.template, phase=env.phase,
                            display_name=row.name, section=row.section, reason=env.reason,
                            title=env.template_title)
            (skipped if env.phase == "Removing" else targets).append(target)
    order = lambda t: (t.login, t.template, t.name)  # noqa: E731
    return Selection(targets=tuple(sorted(targets, key=order)), skipped=tuple(sorted(skipped, key=order)))


def filter_words(q: str, phase: str) -> str:
    """The filter a course-wide run ran with, for the audit log and the confirmation."""
    parts = []
    if phase:
        parts.append(f"status {row_status.PHASE_WORDS[row_status.STATUS_FILTERS[phase]]}")
    if q:
        parts.append(f'search "{q}"')
    return ", ".join(parts) or "every environment"


@dataclass(frozen=True)
class Group:
    """Targets the confirmation page lists together, with the one sentence true for all of them."""

    key: str
    title: str
    sentence: str
    targets: tuple[Target, ...]
    nothing_to_do: bool = False  # listed folded: the action changes nothing for them


def storage_groups(targets: Sequence[Target], templates: Mapping[str, JSON],
                   action: CourseAction) -> list[Group]:
    """Targets grouped by Template, each group with what happens to its students' files."""
    groups: dict[str, list[Target]] = {}
    for target in targets:
        groups.setdefault(target.template, []).append(target)
    result = []
    for name in sorted(groups):
        template = templates.get(name)
        title = str(((template or {}).get("spec") or {}).get("displayName") or name)
        result.append(Group(key=name, title=title, sentence=storage_sentence(template, action),
                            targets=tuple(groups[name])))
    return result


# What "start" does to an environment by the phase its row shows, in the order the
# confirmation lists them.
START_GROUPS: tuple[tuple[str, str, str], ...] = (
    ("wake", "Asleep", "They wake up now."),
    ("suspended", "Suspended by the course staff",
     "They stay suspended unless you tick the box below."),
    ("running", "Already running or starting", "Nothing to do."),
    ("cannot", "Cannot start now", "Nothing to do until what their row on the course page says is fixed."),
)


def start_group_of(phase: str) -> str:
    return {"Idle": "wake", "Suspended": "suspended", "Ready": "running", "Starting": "running"}.get(
        phase, "cannot")


def start_groups(targets: Sequence[Target]) -> list[Group]:
    by_key: dict[str, list[Target]] = {}
    for target in targets:
        by_key.setdefault(start_group_of(target.phase), []).append(target)
    return [Group(key=key, title=title, sentence=sentence, targets=tuple(by_key[key]),
                  nothing_to_do=key in ("running", "cannot"))
            for key, title, sentence in START_GROUPS if by_key.get(key)]


def start_summary(groups: Sequence[Group]) -> str:
    """"Starting now wakes 4 asleep environments; 50 are already running ..." (the page's lead)."""
    count = {g.key: len(g.targets) for g in groups}

    def plural(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    asleep = plural(count.get("wake", 0), "asleep environment", "asleep environments")
    parts = [f"Starting now wakes {asleep}"]
    if count.get("suspended"):
        parts.append(f"{plural(count['suspended'], 'suspended one stays', 'suspended ones stay')} suspended "
                     "unless you tick the box below")
    if count.get("running"):
        parts.append(f"{plural(count['running'], 'is', 'are')} already running or starting")
    if count.get("cannot"):
        parts.append(f"{plural(count['cannot'], 'cannot', 'cannot')} start now")
    return "; ".join(parts) + "."
