"""Who may log in and with which role (pure rules, no I/O)."""

from __future__ import annotations

import pytest

from userland.auth.rules.roles import Membership, is_allowed, needs_orgs, needs_teams, role_for, scopes
from userland.platform.model.settings import Settings


def settings(**env: str) -> Settings:
    return Settings.from_env({f"USERLAND_{k.upper()}": v for k, v in env.items()})


@pytest.mark.parametrize(("env", "expected"), [
    ({}, ["read:user"]),
    ({"admins": "alice,bob"}, ["read:user"]),
    ({"allowed_orgs": "school"}, ["read:user", "read:org"]),
    ({"instructors": "school/teachers"}, ["read:user", "read:org"]),
    ({"admins": "alice,school/admins"}, ["read:user", "read:org"]),
])
def test_scopes_ask_read_org_only_when_org_or_team_rules_exist(env: dict[str, str],
                                                               expected: list[str]) -> None:
    assert scopes(settings(**env)) == expected


def test_which_lists_are_needed() -> None:
    assert (needs_orgs(settings()), needs_teams(settings())) == (False, False)
    assert (needs_orgs(settings(allowed_orgs="school")), needs_teams(settings(allowed_orgs="school"))) == (
        True, False)
    assert needs_teams(settings(instructors="school/teachers"))
    assert not needs_orgs(settings(allowed_orgs="school/cs101"))


def test_anyone_may_log_in_without_allowed_orgs() -> None:
    assert is_allowed(Membership("stranger"), settings())


def test_allowed_orgs_and_teams() -> None:
    rules = settings(allowed_orgs="School, other-org/CS101")
    assert is_allowed(Membership("a", orgs=frozenset({"school"})), rules)
    assert is_allowed(Membership("a", teams=frozenset({"other-org/cs101"})), rules)
    assert not is_allowed(Membership("a", orgs=frozenset({"other-org"})), rules)
    outsider = Membership("a", teams=frozenset({"school/x"}), orgs=frozenset({"elsewhere"}))
    assert not is_allowed(outsider, rules)
    assert not is_allowed(Membership("school"), rules)  # a login named like the org is not a member


def test_roles_from_logins_and_teams() -> None:
    rules = settings(admins="Alice, school/admins", instructors="bob,school/teachers")
    assert role_for(Membership("alice"), rules) == "admin"
    assert role_for(Membership("zed", teams=frozenset({"school/admins"})), rules) == "admin"
    assert role_for(Membership("bob"), rules) == "instructor"
    assert role_for(Membership("carl", teams=frozenset({"school/teachers"})), rules) == "instructor"
    # admin wins over instructor
    assert role_for(Membership("bob", teams=frozenset({"school/admins"})), rules) == "admin"
    assert role_for(Membership("carol", orgs=frozenset({"school"})), rules) == "student"
    # a team slug alone is not a login, nor is an org membership a team
    assert role_for(Membership("teachers", orgs=frozenset({"school"})), rules) == "student"
