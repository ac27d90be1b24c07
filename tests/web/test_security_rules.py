"""The web UI's request-safety rules and course permissions (pure)."""

from __future__ import annotations

import pytest

from userland.platform.model.identity import Identity
from userland.web.rules import security
from userland.web.rules.courses import Course, course_role, may

SECRET = "w" * 40
NOW = 1_800_000_000.0
PUBLIC = "https://userland.example.edu"


SESSION = "a1" * 16
NEXT_SESSION = "b2" * 16  # the same login signed in again


def test_csrf_token_is_bound_to_the_login_and_the_session_and_expires() -> None:
    token = security.csrf_token(SECRET, "teacher", SESSION, now=NOW)
    assert security.csrf_valid(token, SECRET, "teacher", SESSION, now=NOW)
    assert security.csrf_valid(token, SECRET, "teacher", SESSION, now=NOW + security.CSRF_WINDOW_SECONDS)
    assert not security.csrf_valid(token, SECRET, "teacher", SESSION,
                                   now=NOW + 2 * security.CSRF_WINDOW_SECONDS)
    assert not security.csrf_valid(token, SECRET, "alice", SESSION, now=NOW)
    assert not security.csrf_valid(token, "x" * 40, "teacher", SESSION, now=NOW)
    # Signed out (and in again): the same login, a new session, none of the old tokens.
    assert not security.csrf_valid(token, SECRET, "teacher", NEXT_SESSION, now=NOW)
    # An identity without a session id has no valid token at all.
    assert not security.csrf_valid(security.csrf_token(SECRET, "teacher", "", now=NOW), SECRET, "teacher", "",
                                   now=NOW)
    for bad in ("", "nonsense", "1.", ".abc", token.replace(".", "")):
        assert not security.csrf_valid(bad, SECRET, "teacher", SESSION, now=NOW)


@pytest.mark.parametrize(("origin", "referer", "ok"), [
    (PUBLIC, None, True),
    ("HTTPS://USERLAND.EXAMPLE.EDU", None, True),
    ("https://alice.ide.example.edu", None, False),
    ("https://userland.example.edu.evil.test", None, False),
    ("http://userland.example.edu", None, False),
    ("null", f"{PUBLIC}/courses", False),
    (None, f"{PUBLIC}/courses/x", True),
    (None, "https://evil.test/", False),
    (None, None, True),
])
def test_unsafe_requests_must_come_from_the_platform_origin(origin: str | None, referer: str | None,
                                                            ok: bool) -> None:
    assert security.same_origin_request(origin, referer, PUBLIC) is ok


CS101 = Course.from_namespace({"metadata": {"name": "cs101", "annotations": {
    "userland.dev/instructors": "Teacher, uni/cs101-staff",
    "userland.dev/assistants": "@ta1\n uni/tas"}}})


@pytest.mark.parametrize(("who", "role"), [
    (Identity("root", "admin"), "admin"),
    (Identity("prof", "instructor"), "instructor"),
    (Identity("teacher", "student"), "instructor"),
    (Identity("someone", "student", ("uni/cs101-staff",)), "instructor"),
    (Identity("ta1", "student"), "assistant"),
    (Identity("bob", "student", ("uni/tas",)), "assistant"),
    (Identity("alice", "student"), None),
    (Identity("alice", "student", ("other/cs101-staff",)), None),
    (Identity("uni", "student"), None),
])
def test_course_roles_come_from_global_roles_and_the_namespace(who: Identity, role: str | None) -> None:
    assert course_role(who, CS101) == role


def test_assistants_help_but_never_change_the_roster() -> None:
    assert may("assistant", "view") and may("assistant", "restart") and may("assistant", "start")
    for action in ("add", "remove", "suspend", "remove_all", "start_all", "suspend_all"):
        assert not may("assistant", action)  # type: ignore[arg-type]
        assert may("instructor", action)  # type: ignore[arg-type]
    assert not may(None, "view")
