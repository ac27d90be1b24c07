"""Who may log in and with which role, from GitHub logins, orgs and teams.

Rules come from settings, already lowercased: `allowed_orgs` (empty means anyone with a
GitHub account; an `org/team` entry admits that team's members), and the `admins` and
`instructors` lists, whose entries are logins or `org/team` (team slug). Everyone else who
may log in is a student. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from userland.platform.model.identity import Role
from userland.platform.model.settings import Settings


@dataclass(frozen=True)
class Membership:
    """What GitHub told us about a user, lowercased: orgs and teams as `org/slug`."""

    login: str
    orgs: frozenset[str] = frozenset()
    teams: frozenset[str] = frozenset()


def _teams_in(entries: Iterable[str]) -> bool:
    return any("/" in entry for entry in entries)


def needs_orgs(settings: Settings) -> bool:
    """Whether deciding needs the user's org list (`/user/orgs`)."""
    return any("/" not in entry for entry in settings.allowed_orgs)


def needs_teams(settings: Settings) -> bool:
    """Whether deciding needs the user's team list (`/user/teams`); `course_teams` asks for it
    because courses may name their staff as `org/team` (the web UI gets the signed list)."""
    return (settings.course_teams or _teams_in(settings.allowed_orgs) or _teams_in(settings.admins)
            or _teams_in(settings.instructors))


def scopes(settings: Settings) -> list[str]:
    """OAuth scopes: `read:org` only when org or team rules are configured."""
    if settings.allowed_orgs or needs_teams(settings):
        return ["read:user", "read:org"]
    return ["read:user"]


def _matches(entries: Iterable[str], member: Membership) -> bool:
    for entry in entries:
        if "/" in entry:
            if entry in member.teams:
                return True
        elif entry == member.login:
            return True
    return False


def is_allowed(member: Membership, settings: Settings) -> bool:
    """Members of an allowed org (or `org/team`) may log in; anyone when none are set."""
    if not settings.allowed_orgs:
        return True
    return any(entry in (member.teams if "/" in entry else member.orgs)
               for entry in settings.allowed_orgs)


def role_for(member: Membership, settings: Settings) -> Role:
    if _matches(settings.admins, member):
        return "admin"
    if _matches(settings.instructors, member):
        return "instructor"
    return "student"
