"""LMS courses linked to Userland courses, and the course roles the LMS gives. Pure, no I/O.

A Userland course is a namespace labelled `userland.dev/course` (web/rules/courses.py), so its
LMS links are kept there too, beside its title and staff lists:

- `userland.dev/lti-links`: a JSON list, one entry per LMS context (course or section) that
  feeds the course: `{"registration", "context", "template", "title", "memberships",
  "lineitems"}` (the LtiRegistration's name, the LMS context id, the Template its students get,
  the LMS course's title, and the NRPS and AGS service URLs its launch carried). Several LMS
  contexts may feed one course; one LMS context feeds one course.
- `userland.dev/lti-instructors`, `userland.dev/lti-assistants`: the logins the LMS made staff of
  the course (a launch as Instructor or TeachingAssistant of a linked LMS course), kept apart
  from the hand-written `userland.dev/instructors` / `assistants` so that the LMS can take back
  what it gave and never what staff wrote. web/rules/courses.py reads both.

The web UI writes them (web/lti_link.py); the gateway reads the links to land a Learner in their
environment (proxy/lti_courses.py), and the roster sync reads the service URLs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from userland.platform.model import naming

ANNOTATION_LINKS = naming.ANNOTATION_LTI_LINKS
ANNOTATION_LTI_INSTRUCTORS = naming.ANNOTATION_LTI_INSTRUCTORS
ANNOTATION_LTI_ASSISTANTS = naming.ANNOTATION_LTI_ASSISTANTS
MAX_LINKS = 50
MAX_FIELD = 2048

StaffRole = Literal["instructor", "assistant"]


@dataclass(frozen=True)
class LmsLink:
    """One LMS context feeding a course."""

    registration: str
    context: str
    template: str
    title: str = ""
    memberships: str = ""  # the NRPS context_memberships_url ("" when the LMS offers none)
    lineitems: str = ""  # the AGS line items URL ("" when the LMS offers none)

    @property
    def key(self) -> tuple[str, str]:
        return (self.registration, self.context)


def parse_links(annotation: object) -> tuple[LmsLink, ...]:
    """The links an `userland.dev/lti-links` annotation holds; malformed entries are left out."""
    if not isinstance(annotation, str) or not annotation.strip():
        return ()
    try:
        raw = json.loads(annotation)
    except ValueError:
        return ()
    if not isinstance(raw, list):
        return ()
    links: dict[tuple[str, str], LmsLink] = {}
    for entry in raw[:MAX_LINKS]:
        if not isinstance(entry, dict):
            continue
        fields = {k: entry.get(k, "") for k in ("registration", "context", "template", "title",
                                                 "memberships", "lineitems")}
        if not all(isinstance(v, str) and len(v) <= MAX_FIELD for v in fields.values()):
            continue
        link = LmsLink(**fields)
        if link.registration and link.context and link.template:
            links.setdefault(link.key, link)
    return tuple(links.values())


def links_value(links: Iterable[LmsLink]) -> str:
    return json.dumps([asdict(link) for link in links], separators=(",", ":"), sort_keys=True)


def course_links(namespace: Mapping[str, Any]) -> tuple[LmsLink, ...]:
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    return parse_links(annotations.get(ANNOTATION_LINKS))


def with_link(links: Iterable[LmsLink], link: LmsLink) -> tuple[LmsLink, ...]:
    """`links` with `link` added, or updated in place (same registration and context): a new
    launch may carry newer service URLs; the Template a context was linked to is kept."""
    out: list[LmsLink] = []
    found = False
    for existing in links:
        if existing.key == link.key:
            found = True
            out.append(LmsLink(existing.registration, existing.context, existing.template,
                               link.title or existing.title, link.memberships or existing.memberships,
                               link.lineitems or existing.lineitems))
        else:
            out.append(existing)
    if not found:
        out.append(link)
    return tuple(out)


def linked_courses(namespaces: Iterable[Mapping[str, Any]], registration: str,
                   context: str) -> list[tuple[str, LmsLink]]:
    """(namespace, link) of every course the LMS context (of that registration) feeds."""
    found = []
    for obj in namespaces:
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            continue  # a course being deleted feeds nothing
        name = str((obj.get("metadata") or {}).get("name") or "")
        for link in course_links(obj):
            if link.key == (registration, context):
                found.append((name, link))
    return sorted(found, key=lambda pair: pair[0])


def entries(text: object) -> list[str]:
    if not isinstance(text, str):
        return []
    return [e.strip().lower() for e in text.replace("\n", ",").split(",") if e.strip()]


def staff_patch(annotations: Mapping[str, Any], login: str, role: StaffRole) -> dict[str, str]:
    """The annotations that make `login` `role` of the course by the LMS (empty: nothing to
    change). An instructor is taken off the LMS's assistants and the reverse (the LMS changed
    their role); the hand-written lists are never touched."""
    login = login.lower()
    mine, other = ((ANNOTATION_LTI_INSTRUCTORS, ANNOTATION_LTI_ASSISTANTS) if role == "instructor"
                   else (ANNOTATION_LTI_ASSISTANTS, ANNOTATION_LTI_INSTRUCTORS))
    patch: dict[str, str] = {}
    have = entries(annotations.get(mine))
    if login not in have:
        patch[mine] = ",".join([*have, login])
    others = entries(annotations.get(other))
    if login in others:
        patch[other] = ",".join(e for e in others if e != login)
    return patch


def staff_role(lti_role: str | None) -> StaffRole | None:
    """The staff role a launch's course role gives (auth/rules/lti_identity.py course_role)."""
    return lti_role if lti_role in ("instructor", "assistant") else None  # type: ignore[return-value]


def staff_sync_patch(annotations: Mapping[str, Any], staff_set: Iterable[tuple[str, str]],
                     staff_drop: Iterable[str]) -> dict[str, str]:
    """The LMS staff lists after a roster sync: who joined or changed role, who left (only the
    lists the LMS writes; empty: nothing to change)."""
    lists = {ANNOTATION_LTI_INSTRUCTORS: entries(annotations.get(ANNOTATION_LTI_INSTRUCTORS)),
             ANNOTATION_LTI_ASSISTANTS: entries(annotations.get(ANNOTATION_LTI_ASSISTANTS))}
    before = {k: list(v) for k, v in lists.items()}
    for login, role in staff_set:
        if role not in ("instructor", "assistant"):
            continue
        current = {**annotations, **{k: ",".join(v) for k, v in lists.items()}}
        for key, value in staff_patch(current, login, role).items():  # type: ignore[arg-type]
            lists[key] = entries(value)
    for login in staff_drop:
        for key in lists:
            lists[key] = [e for e in lists[key] if e != login.lower()]
    return {k: ",".join(v) for k, v in lists.items() if v != before[k]}


# The custom parameter an Assignment's deep link carries (web/rules/lti_deep_link.py): which
# Assignment the LMS's link opens, `<course namespace>/<assignment name>`.
CUSTOM_ASSIGNMENT = "userland_assignment"
CUSTOM_TEMPLATE = "userland_template"


def assignment_named(custom: object) -> tuple[str, str] | None:
    """(namespace, name) of the Assignment a launch's custom parameters name, or None. Only a
    hint of which column to look for: the course must be linked to the launch's LMS course and
    the Assignment to its gradebook (web/lti_line_items.py checks both)."""
    value = custom.get(CUSTOM_ASSIGNMENT) if isinstance(custom, Mapping) else None
    if not isinstance(value, str):
        return None
    namespace, _, name = value.partition("/")
    if not (naming.is_valid_dns_label(namespace) and naming.is_valid_dns_label(name)):
        return None
    return namespace, name
