"""What the LMS content picker (web/lti_deep_link.py) offers and answers. Pure: plain data in, a
decision, an offer or a content item out.

A teacher adding Userland to an LMS module makes a deep-linking launch; the gateway sends an
Instructor or TeachingAssistant of the LMS course to `/lms/deep-link` with what it kept of the
launch (the same handoff as the linking page's, plus the request's deployment and deep-linking
settings). The picker:

- a Learner, another login, an expired handoff: as on the linking page (web/rules/lti_link.py);
- the LMS course is not linked yet: it says to link it first (the linking page, then back here);
- linked: it offers what the link may open, all in the course the LMS course feeds:
  - the course's environment (the Template its students get: a plain link, no gradebook column);
  - each existing Assignment;
  - a new Assignment (title, repository, branch, folder, due date), for staff who may create one.

A posted choice counts only when it is one of the offers (never trust the posted value). The
answer's content item is an `ltiResourceLink` to the tool's launch URL, naming what it opens in
its custom parameters (`userland_template` or `userland_assignment`); an Assignment's carries a
`lineItem` (scoreMaximum, label, resourceId = the Assignment's uid, tag `userland`) so the
gradebook column exists at once and grade passback (web/lti_grades.py) finds that same column
by its resourceId instead of adding another.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from userland.platform.model.lti_services_deeplink import RESOURCE_LINK as RESOURCE_LINK_TYPE
from userland.platform.model.lti_services_deeplink import DeepLinkError, Settings, resource_link
from userland.platform.model.lti_services_grades import LineItemSpec
from userland.platform.model.models import parse_time
from userland.web.rules.lti_link import Decision

TAG = "userland"
CUSTOM_TEMPLATE = "userland_template"
CUSTOM_ASSIGNMENT = "userland_assignment"
DEFAULT_POINTS = 100.0
MAX_POINTS = 100_000.0

Kind = Literal["template", "assignment", "new"]
PickerOutcome = Literal["expired", "not-yours", "not-staff", "not-linked", "no-settings", "choose"]


@dataclass(frozen=True)
class DeepLinkRequest:
    """The deep-linking part of the handoff: the request's deployment and settings claim."""

    deployment_id: str
    settings: Settings

    @classmethod
    def parse(cls, raw: object) -> DeepLinkRequest | None:
        """None when the handoff is not a deep-linking launch's, or its settings are unusable
        (DeepLinkError says why, in the teacher's words, when the settings are wrong)."""
        if not isinstance(raw, Mapping):
            return None
        deployment = raw.get("deployment_id")
        if not isinstance(deployment, str) or not deployment:
            return None
        return cls(deployment, Settings.parse(raw))


@dataclass(frozen=True)
class Offer:
    """One thing the picker offers; `key` is the form's value for it."""

    kind: Kind
    namespace: str
    name: str  # the Template's or Assignment's name ("" for a new Assignment)
    title: str
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Picker:
    outcome: PickerOutcome
    namespace: str = ""
    offers: tuple[Offer, ...] = ()
    message: str = ""  # why there is nothing to choose (no-settings)


def decide(link: Decision, request: DeepLinkRequest | None, *, settings_problem: str = "",
           namespace_title: str = "", templates: Iterable[tuple[str, str]] = (),
           assignments: Iterable[tuple[str, str, str]] = (), may_create: bool = False) -> Picker:
    """The picker for a handoff whose linking decision is `link` (web/rules/lti_link.py decide).

    `templates`: (name, title) of the Templates the LMS course's students get; `assignments`:
    (name, title, due words) of the course's Assignments; `may_create`: whether the launcher may
    create an Assignment there (their course role allows it and an environment keeps files)."""
    if link.outcome in ("expired", "not-yours", "not-staff"):
        return Picker(link.outcome)
    if link.outcome != "linked" or not link.linked:
        return Picker("not-linked")
    if request is None:
        return Picker("no-settings", message=settings_problem or
                      "Your LMS sent this launch without the settings a content selection needs.")
    namespace = link.linked[0]
    offers: list[Offer] = []
    if RESOURCE_LINK_TYPE in request.settings.accept_types:
        offers += [Offer("template", namespace, name, title or name,
                         f"Each student opens their own environment of {namespace_title or 'the course'}.")
                   for name, title in templates]
        offers += [Offer("assignment", namespace, name, title or name, due)
                   for name, title, due in sorted(assignments, key=lambda a: (a[1].lower(), a[0]))]
        if may_create:
            offers.append(Offer("new", namespace, "", "A new assignment"))
    if not offers:
        return Picker("no-settings", namespace=namespace,
                      message="Your LMS does not accept a link to an LTI tool here.")
    return Picker("choose", namespace=namespace, offers=tuple(offers))


def chosen(picker: Picker, key: str) -> Offer | None:
    """The offer the form names, or None when the page did not offer it."""
    if picker.outcome != "choose":
        return None
    return next((offer for offer in picker.offers if offer.key == key), None)


def points(text: str) -> float:
    """The points a full grade is worth, from the form ("" -> 100); DeepLinkError in words."""
    text = text.strip().replace(",", ".")
    if not text:
        return DEFAULT_POINTS
    try:
        value = float(text)
    except ValueError:
        raise DeepLinkError(f"The points for a full grade ({text[:20]!r}) must be a number, such as 100.") \
            from None
    if not math.isfinite(value) or value <= 0 or value > MAX_POINTS:
        raise DeepLinkError(f"The points for a full grade must be above 0 and at most {MAX_POINTS:g}.")
    return round(value, 4)


def content_item(offer: Offer, *, launch_url: str, title: str, uid: str = "", maximum: float = 0,
                 due: datetime | None = None) -> dict[str, Any]:
    """The `ltiResourceLink` the LMS will launch for `offer` (a new Assignment: once created,
    as an "assignment" offer). An Assignment's carries its gradebook column (`uid`: the
    Assignment's uid, the column's resourceId; `maximum`: its points)."""
    where = f"{offer.namespace}/{offer.name}"
    if offer.kind == "template":
        return resource_link(url=launch_url, title=title, custom={CUSTOM_TEMPLATE: where}, allow_http=True)
    if offer.kind != "assignment" or not uid:
        raise DeepLinkError("Choose what the link opens: the course's environment or an assignment.")
    column = LineItemSpec(resource_id=uid, label=title, score_maximum=maximum or DEFAULT_POINTS, tag=TAG)
    return resource_link(url=launch_url, title=title, line_item=column, custom={CUSTOM_ASSIGNMENT: where},
                         submission_end=due, allow_http=True)


def line_item_annotation(registration: str, context: str, maximum: float, label: str) -> str:
    """The Assignment's `userland.dev/lti-line-item` (web/rules/lti_grades.py parse_link): which
    LMS course's gradebook it posts to, and the points of a full grade."""
    return json.dumps({"registration": registration, "context": context, "scoreMaximum": maximum,
                       "label": label[:200]}, separators=(",", ":"), sort_keys=True)


def due_of(spec: Mapping[str, Any]) -> datetime | None:
    due = spec.get("due")
    return parse_time(due) if isinstance(due, str) else None


def followed_due(due: datetime | None, end: datetime | None,
                 last_followed: datetime | None) -> datetime | None:
    """The due date the Assignment takes from its gradebook column, or None (leave it).

    The rule: the LMS column's end date wins when it has one and it changed since Userland last
    followed it (`last_followed`: status.lti.lineItemEnd). A column without an end date leaves
    the due date alone, and so does one Userland followed already: a due date staff change in
    Userland afterwards stays, until the LMS's end date changes again."""
    if end is None or (last_followed is not None and last_followed == end):
        return None
    return end if end != due else None
