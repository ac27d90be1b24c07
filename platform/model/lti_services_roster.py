"""Names and Role Provisioning Services 2.0: a context's membership, read. Pure, no I/O.

The tool GETs a context's `context_memberships_url` (from the launch's
`https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice` claim) with the scope
`contextmembership.readonly` and `Accept: application/vnd.ims.lti-nrps.v2.membershipcontainer+json`.
The answer is one page of members:

    {"id": "...", "context": {"id": "...", "label": "...", "title": "..."},
     "members": [{"user_id": "...", "roles": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"],
                  "status": "Active", "name": "...", "email": "...", ...}]}

and, when there is more, a `Link: <url>; rel="next"` header (RFC 8288). This module reads a
page (`parse_page`), finds the next page (`next_link`, which refuses a next page on another
host: the bearer token goes only where the platform's own URL pointed), maps LMS roles to
course roles (`course_role`) and makes a login from the claim the registration names
(`login_candidate`). A member that cannot be used carries the reason, in words for a teacher.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from userland.platform.model import naming

MEDIA_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
# A course larger than this (all linked LMS courses together) is refused, not cut short: a
# roster read in part would suspend everyone on the pages not read.
MAX_MEMBERS = 20_000
MAX_PAGES = 1_000
MAX_FIELD_CHARS = 200

CourseRole = Literal["instructor", "assistant", "student"]
Status = Literal["Active", "Inactive", "Deleted"]
LIS = "http://purl.imsglobal.org/vocab/lis/v2/membership"
# Context roles by their short name (NRPS allows the simple names too), in the order they win
# when a member has several: a TA enrolled as a Learner as well is staff.
_ROLE_RANK: tuple[tuple[str, CourseRole], ...] = (
    ("Instructor", "instructor"),
    ("TeachingAssistant", "assistant"),
    ("Learner", "student"),
)
_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]+)*)")
_NOT_LOGIN = re.compile(r"[^a-z0-9]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RosterError(Exception):
    """The roster could not be read as a whole. str() is a sentence for the course's staff;
    nothing of the roster may be acted on (a partial roster would drop the students not read)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class Member:
    """One person in one LMS context, as the roster lists them."""

    issuer: str  # the platform's issuer: (issuer, user_id) is the person
    context: str  # the LMS context (course) this entry came from
    user_id: str
    roles: tuple[str, ...]
    status: Status = "Active"
    name: str = ""
    email: str = ""
    sourcedid: str = ""  # lis_person_sourcedid: the student number many universities use
    custom: tuple[tuple[str, str], ...] = ()  # custom parameters, when the platform sends them

    @property
    def key(self) -> tuple[str, str]:
        return (self.issuer, self.user_id)

    @property
    def display(self) -> str:
        """How a teacher recognises them: name, then email, then the LMS id."""
        return self.name or self.email or f"LMS user {self.user_id}"


def _short_role(uri: str) -> str:
    """`...membership#Learner`, `...membership/Instructor#TeachingAssistant`, `Learner` -> the last word."""
    return uri.rsplit("#", 1)[-1] if "#" in uri else uri.rsplit("/", 1)[-1]


def is_context_role(uri: str) -> bool:
    return uri.startswith(LIS) or "/" not in uri


def course_role(roles: Iterable[str]) -> CourseRole | None:
    """The course role LMS context roles give (Instructor, TeachingAssistant, Learner), or None."""
    short = {_short_role(r) for r in roles if is_context_role(r)}
    for lms, ours in _ROLE_RANK:
        if lms in short:
            return ours
    return None


def role_words(roles: Iterable[str]) -> str:
    words = sorted({_short_role(r) for r in roles if is_context_role(r)})
    return ", ".join(words) or "no course role"


def _text(value: Any) -> str:
    return _CONTROL.sub(" ", value).strip()[:MAX_FIELD_CHARS] if isinstance(value, str) else ""


def _member(raw: Any, issuer: str, context: str) -> Member | None:
    if not isinstance(raw, dict):
        return None
    user_id = raw.get("user_id")
    roles = raw.get("roles")
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 255:
        return None
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        return None
    status = raw.get("status", "Active")
    if status not in ("Active", "Inactive", "Deleted"):
        status = "Inactive"  # unknown words are not taken as enrolment
    custom: dict[str, str] = {}
    for message in raw.get("message") or ():
        claim = (
            message.get("https://purl.imsglobal.org/spec/lti/claim/custom")
            if isinstance(message, dict)
            else None
        )
        if isinstance(claim, dict):
            custom.update({str(k): _text(v) for k, v in claim.items() if isinstance(v, str)})
    name = _text(raw.get("name")) or " ".join(
        p for p in (_text(raw.get("given_name")), _text(raw.get("family_name"))) if p
    )
    return Member(
        issuer=issuer,
        context=context,
        user_id=user_id,
        roles=tuple(roles[:50]),
        status=status,
        name=name,
        email=_text(raw.get("email")),
        sourcedid=_text(raw.get("lis_person_sourcedid")),
        custom=tuple(sorted(custom.items())),
    )


@dataclass(frozen=True)
class Page:
    context_id: str
    members: tuple[Member, ...]
    unreadable: int  # entries without a user_id or roles (skipped, counted)


def parse_page(body: bytes, *, issuer: str, context: str) -> Page:
    """One membership container page. `context` names the linked context the tool asked for."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise RosterError(
            "The LMS answered the roster request with something that is not JSON.", retryable=True
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("members"), list):
        raise RosterError("The LMS answered the roster request without a list of members.", retryable=True)
    members: list[Member] = []
    unreadable = 0
    for raw in document["members"]:
        member = _member(raw, issuer, context)
        if member is None:
            unreadable += 1
        else:
            members.append(member)
    found = document.get("context")
    found_id = found.get("id") if isinstance(found, dict) else None
    context_id = found_id if isinstance(found_id, str) else ""
    return Page(context_id=context_id, members=tuple(members), unreadable=unreadable)


def next_link(link_headers: Sequence[str], current_url: str) -> str | None:
    """The `rel="next"` target of a page's Link headers, resolved against the page's URL.

    Refused (RosterError) when it points to another scheme or host than the page: the tool's
    bearer token follows that link.
    """
    for header in link_headers:
        for match in _LINK.finditer(header):
            target, params = match.group(1).strip(), match.group(2)
            rels: set[str] = set()
            for param in params.split(";"):
                name, _, value = param.strip().partition("=")
                if name.strip().lower() == "rel":
                    rels.update(value.strip().strip('"').lower().split())
            if "next" not in rels:
                continue
            url: str = urljoin(current_url, target)
            here, there = urlsplit(current_url), urlsplit(url)
            if (there.scheme, there.netloc) != (here.scheme, here.netloc):
                raise RosterError(
                    f"The LMS's roster points its next page to another site ({there.netloc or url!r}); "
                    "Userland does not send its credentials there.",
                    retryable=False,
                )
            return url
    return None


def _normalised(raw: str) -> str:
    login = _NOT_LOGIN.sub("-", raw.lower()).strip("-")[: naming.LOGIN_MAX].rstrip("-")
    return login if naming.is_valid_login(login) else ""


def login_candidate(member: Member, claim: str) -> tuple[str, str]:
    """(login, "") from the registration's login claim, or ("", why not) in a teacher's words.

    `claim`: "email" (the part before @, the default), "sourcedid" (lis_person_sourcedid), or
    "custom:<name>" (a custom parameter the LMS sends, e.g. custom:username).
    """
    if claim == "email":
        if "@" not in member.email:
            return "", (
                "the LMS roster gives no email address for them, and this LMS link makes logins "
                "from email addresses"
            )
        raw, source = member.email.split("@", 1)[0], "email address"
    elif claim == "sourcedid":
        if not member.sourcedid:
            return "", "the LMS roster gives no student number (lis_person_sourcedid) for them"
        raw, source = member.sourcedid, "student number"
    elif claim.startswith("custom:"):
        name = claim.removeprefix("custom:")
        raw = dict(member.custom).get(name, "")
        if not raw:
            return "", f"the LMS roster does not send the custom field {name!r} for them"
        source = f"custom field {name!r}"
    else:
        return "", f"this LMS link names an unknown login source {claim!r}"
    login = _normalised(raw)
    if not login:
        return "", f"their {source} ({raw[:60]!r}) has no letters or digits to make a login from"
    return login, ""
