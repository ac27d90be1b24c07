"""The decisions of account linking (auth/rules/account_link.py): who may start a link, and
whether a GitHub account or an LMS launch may complete one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from userland.auth.rules import account_link as rules

RESERVED = rules.reserved_names(("root", "org/admins"), ("teach",))
LMS_ONLY = rules.doors(0, "subject-digest")
GITHUB_ONLY = rules.doors(4242, "")
BOTH = rules.doors(4242, "subject-digest")
NEITHER = rules.doors(0, "")


def test_reserved_names_are_the_plain_names_of_admins_and_instructors() -> None:
    assert frozenset({"root", "teach"}) == RESERVED


@pytest.mark.parametrize(("want", "role", "login", "door", "expected"), [
    ("github", "student", "alice", LMS_ONLY, None),
    ("github", "student", "alice", BOTH, rules.HAS_GITHUB),
    ("github", "student", "alice", GITHUB_ONLY, rules.HAS_GITHUB),
    ("github", "student", "alice", NEITHER, rules.NO_DOOR),
    ("github", "instructor", "alice", LMS_ONLY, rules.NOT_STUDENT),
    ("github", "student", "teach", LMS_ONLY, rules.NOT_STUDENT),
    ("lms", "student", "bob", GITHUB_ONLY, None),
    ("lms", "student", "bob", BOTH, rules.HAS_LMS),
    ("lms", "student", "bob", LMS_ONLY, rules.HAS_LMS),
    ("lms", "student", "bob", NEITHER, rules.NO_DOOR),
    ("lms", "admin", "bob", GITHUB_ONLY, rules.NOT_STUDENT),
    ("lms", "student", "root", GITHUB_ONLY, rules.NOT_STUDENT),
])
def test_who_may_start_linking_the_other_door(want: str, role: str, login: str, door: rules.Doors,
                                              expected: rules.Refusal | None) -> None:
    assert rules.start_link(want, role=role, login=login, door=door,  # type: ignore[arg-type]
                            reserved=RESERVED) == expected


GOOD = rules.GitHubLinkFacts(
    link_login="alice", link_session="s1", session_login="alice", session_digest="s1",
    github_name="alicegh", github_role="student", github_allowed=True, linked_login="",
    name_bound_to_it=False, target_door=LMS_ONLY)


def test_a_fresh_github_account_links_to_the_session_that_asked() -> None:
    assert rules.github_link(GOOD, RESERVED) is None


@pytest.mark.parametrize(("change", "expected"), [
    ({"session_digest": "s2"}, rules.SESSION_CHANGED),  # another sign-in in this browser
    ({"session_digest": ""}, rules.SESSION_CHANGED),  # signed out meanwhile
    ({"session_login": "carol", "session_digest": "s1"}, rules.SESSION_CHANGED),
    ({"link_session": ""}, rules.SESSION_CHANGED),
    ({"linked_login": "erin"}, rules.GITHUB_TAKEN),  # linked to another LMS user already
    ({"name_bound_to_it": True}, rules.GITHUB_TAKEN),  # it has its own environment
    ({"github_role": "instructor"}, rules.GITHUB_STAFF),
    ({"github_name": "root"}, rules.GITHUB_STAFF),
    ({"github_allowed": False}, rules.GITHUB_NOT_ALLOWED),
    ({"target_door": BOTH}, rules.HAS_GITHUB),
    ({"target_door": NEITHER}, rules.NO_DOOR),
])
def test_a_github_link_is_refused(change: dict[str, object], expected: rules.Refusal) -> None:
    assert rules.github_link(replace(GOOD, **change), RESERVED) == expected  # type: ignore[arg-type]


def test_the_session_is_checked_before_anything_about_the_github_account() -> None:
    # A browser whose sign-in changed learns nothing about the GitHub account.
    facts = replace(GOOD, session_digest="s2", linked_login="erin", github_role="admin")
    assert rules.github_link(facts, RESERVED) == rules.SESSION_CHANGED


@pytest.mark.parametrize(("armed", "fresh", "expected"), [
    (False, False, None),
    (False, True, None),
    (True, True, None),
    (True, False, rules.LMS_TAKEN),
])
def test_an_armed_lms_link_takes_only_a_new_lms_user(armed: bool, fresh: bool,
                                                     expected: rules.Refusal | None) -> None:
    assert rules.lms_link(armed=armed, fresh=fresh) == expected


def test_every_refusal_is_a_clear_page_without_jargon() -> None:
    refusals = [v for v in vars(rules).values() if isinstance(v, rules.Refusal)]
    assert len({r.reason for r in refusals}) == len(refusals) == 9
    for refusal in refusals:
        assert refusal.title and refusal.message.endswith(".")
        assert not {"pod", "namespace", "redis", "subject", "oauth"} & set(refusal.message.lower().split())
