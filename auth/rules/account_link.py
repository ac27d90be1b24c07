"""Linking a student's two sign-in doors (GitHub and their LMS) to one login. Pure: facts in,
a refusal (or None) out; auth/account_link.py does the I/O.

A login has a GitHub door when a GitHub id is bound to it, and an LMS door when an LMS user
(issuer, sub) is. A student signed in through one door may add the other, once:

- through the LMS (an LTI-bound login with no GitHub id) -> "Link your GitHub account": the
  GitHub account must be bound to no login yet (neither linked nor holding its own name), be a
  student's (no admin or instructor name or rule), and be allowed to sign in here;
- with GitHub (a GitHub-bound login with no LMS user) -> "Link your LMS account": the next LMS
  launch completed in this browser, by an LMS user seen for the first time, is bound to it.

Nothing is ever merged: an identity that already has a login of its own is refused, and the
two environments stay apart. Staff never link: their names are GitHub accounts' only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from userland.platform.model.identity import Role


@dataclass(frozen=True)
class Doors:
    """Which sign-in doors a login has."""

    github: bool
    lms: bool


@dataclass(frozen=True)
class Refusal:
    reason: str  # for logs and metrics
    title: str
    message: str


NOT_STUDENT = Refusal("not_student", "Only students link accounts",
                      "Staff sign in with their GitHub account only, so this account cannot be linked.")
HAS_GITHUB = Refusal("has_github", "A GitHub account is already linked",
                     "Your Userland account already has a GitHub account. Nothing was changed.")
HAS_LMS = Refusal("has_lms", "An LMS account is already linked",
                  "Your Userland account already has an LMS account. Nothing was changed.")
NO_DOOR = Refusal("no_door", "Nothing to link from here",
                  "This account signs in neither with GitHub nor through an LMS, so there is nothing "
                  "to link.")
SESSION_CHANGED = Refusal("session", "This link was started in another sign-in",
                          "You signed in again, or in another browser, since you asked to link your "
                          "account. Nothing was changed. Open your account page and start again.")
GITHUB_TAKEN = Refusal("github_taken", "This GitHub account has its own Userland account",
                       "This GitHub account already signs in to Userland under another name, so it "
                       "cannot be linked to this one (two accounts are never merged). Nothing was changed. "
                       "Sign in with that GitHub account to use it, or ask an admin.")
GITHUB_STAFF = Refusal("github_staff", "This GitHub account belongs to staff",
                       "This GitHub account is an admin's or an instructor's, so it cannot be linked to a "
                       "student account. Nothing was changed.")
GITHUB_NOT_ALLOWED = Refusal("github_not_allowed", "This GitHub account is not allowed here",
                             "This GitHub account is not a member of an organization allowed to use this "
                             "site, so it cannot be linked. Nothing was changed.")
LMS_TAKEN = Refusal("lms_taken", "This LMS account has its own Userland account",
                    "The LMS account you just opened Userland with already has its own Userland name "
                    "(or was not opened as a student), so it cannot be linked to this one (two accounts "
                    "are never merged). Nothing was changed. Open Userland from your LMS again to use it.")


def doors(github_id: int, lti_subject: str) -> Doors:
    return Doors(github=github_id > 0, lms=bool(lti_subject))


def reserved_names(admins: Iterable[str], instructors: Iterable[str]) -> frozenset[str]:
    """Names the settings give a staff role: GitHub accounts' only, never linked."""
    return frozenset(entry.lower() for entry in (*admins, *instructors) if "/" not in entry)


def start_link(want: str, *, role: Role, login: str, door: Doors, reserved: frozenset[str]) -> Refusal | None:
    """May a signed-in user start linking the door `want` ("github": "Link your GitHub account",
    from an LMS login; "lms": "Link your LMS account", from a GitHub login)?"""
    if role != "student" or login in reserved:
        return NOT_STUDENT
    has, other = (door.github, door.lms) if want == "github" else (door.lms, door.github)
    if has:
        return HAS_GITHUB if want == "github" else HAS_LMS
    return None if other else NO_DOOR


@dataclass(frozen=True)
class GitHubLinkFacts:
    """What the GitHub callback of a link knows."""

    link_login: str  # the login the link was started for (in the OAuth state record)
    link_session: str  # the digest of the session cookie it was started in
    session_login: str  # the browser's session now ("" when signed out)
    session_digest: str
    github_name: str  # the GitHub account's own (normalised) name
    github_role: Role  # the role the GitHub account would sign in with
    github_allowed: bool  # the org rule lets it sign in
    linked_login: str  # the login this GitHub id is linked to already ("" when none)
    name_bound_to_it: bool  # its own name is bound to this GitHub id (it has its own environment)
    target_door: Doors  # the login's doors now


def github_link(facts: GitHubLinkFacts, reserved: frozenset[str]) -> Refusal | None:
    """May this GitHub account be linked to `facts.link_login`? Checked in this order: the
    same sign-in that started it, then the GitHub account, then the login."""
    if not facts.session_digest or facts.session_digest != facts.link_session \
            or facts.session_login != facts.link_login:
        return SESSION_CHANGED
    if facts.linked_login or facts.name_bound_to_it:
        return GITHUB_TAKEN
    if facts.github_role != "student" or facts.github_name in reserved:
        return GITHUB_STAFF
    if not facts.github_allowed:
        return GITHUB_NOT_ALLOWED
    if facts.target_door.github:
        return HAS_GITHUB
    if not facts.target_door.lms:
        return NO_DOOR
    return None


def lms_link(*, armed: bool, fresh: bool) -> Refusal | None:
    """An armed "Link your LMS account" met a launch in the same sign-in: link it when the launch's
    LMS user was seen for the first time (bound a moment ago, and nothing is theirs yet);
    otherwise refuse, changing nothing. None also when nothing was armed (a plain launch)."""
    if not armed:
        return None
    return None if fresh else LMS_TAKEN
