"""Who an LTI launch signs in: the login an LMS user gets, and the course role their LMS roles
give. Pure: plain claims in, names out.

An LMS user is the pair (issuer, `sub`), bound at first sight to a login (auth/lti_store.py
keeps the binding), as a GitHub user is bound to their numeric id: the login shown everywhere
is derived once, from the claim the registration names (the email's local part by default),
normalised to the login rules (letters, digits, single hyphens, at most 39, lowercase), and
made unique with a numbered suffix when the name is taken (`alice`, `alice-2`, ...). It never
changes afterwards, whatever the LMS later says the email is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from userland.platform.model import naming
from userland.platform.model.lti import LtiRegistration

CUSTOM_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/custom"
# When no usable name comes from the claim (no email, only symbols).
FALLBACK_LOGIN = "lti-user"
# How many numbered names are tried before a hashed one (always free in practice).
MAX_SUFFIX = 50
_NOT_LOGIN = re.compile(r"[^a-z0-9]+")

ROLE_BASE = "http://purl.imsglobal.org/vocab/lis/v2/"
# LIS roles (context roles, and the short forms LTI 1.3 allows) -> Userland course roles.
# The order is the precedence when several are claimed: the smaller grant first for a teaching
# assistant (Canvas sends `membership/Instructor#TeachingAssistant`, a sub-role of Instructor).
COURSE_ROLES: tuple[tuple[str, str], ...] = (
    ("TeachingAssistant", "assistant"),
    ("Instructor", "instructor"),
    ("Administrator", "instructor"),
    ("Learner", "student"),
)


def subject_key(issuer: str, subject: str) -> str:
    """The identity an LMS user is bound by: a digest of (issuer, sub), never the name."""
    return hashlib.sha256(f"{issuer}\0{subject}".encode()).hexdigest()


def claimed_name(claims: Mapping[str, Any], registration: LtiRegistration) -> str:
    """The raw name the registration's claim gives ("" when the launch has none)."""
    claim = registration.login_claim
    if claim.startswith("custom:"):
        custom = claims.get(CUSTOM_CLAIM)
        value = custom.get(claim[len("custom:"):]) if isinstance(custom, dict) else None
    else:
        value = claims.get(claim)
    if not isinstance(value, str):
        return ""
    if claim == "email":
        value = value.rsplit("@", 1)[0] if "@" in value else ""
    return value[:200]


def normalise(name: str) -> str:
    """`name` folded into the login rules: lowercase letters and digits joined by single
    hyphens, at most 39 characters (leaving room for a suffix); FALLBACK_LOGIN when nothing is left."""
    folded = _NOT_LOGIN.sub("-", name.lower()).strip("-")
    folded = folded[: naming.LOGIN_MAX - 4].strip("-")
    return folded if folded and naming.is_valid_login(folded) else FALLBACK_LOGIN


def login_candidates(base: str, identity: str) -> Iterator[str]:
    """Logins to try in order for a new LMS user: `base`, `base-2` ... `base-MAX_SUFFIX`, then
    one derived from the identity digest (unique for that user)."""
    yield base
    for number in range(2, MAX_SUFFIX + 1):
        yield f"{base}-{number}"
    yield f"{base[:26]}-{identity[:12]}".strip("-")


def course_role(roles: tuple[str, ...] | list[str]) -> str | None:
    """The course role the launch's LIS roles give (instructor, assistant, student), or None.
    Only context roles count (full URIs of the membership vocabulary, or the short forms):
    an institution or system role (`.../institution/person#Instructor`) is no course role."""
    names = set()
    for role in roles:
        if role.startswith(ROLE_BASE + "membership#"):
            names.add(role.rsplit("#", 1)[1])
        elif role.startswith(ROLE_BASE + "membership/"):
            # Sub-roles such as membership/Instructor#TeachingAssistant.
            names.add(role.rsplit("#", 1)[1])
        elif "/" not in role and "#" not in role:
            names.add(role)
    for lis, course in COURSE_ROLES:
        if lis in names:
            return course
    return None
