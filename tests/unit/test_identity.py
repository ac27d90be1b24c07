"""The signed identity contract between the gateway and the web UI / environments (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from multidict import CIMultiDict

from userland.platform.model import identity
from userland.platform.model.identity import Identity, IdentityRejected, verify_identity

SECRET = "s" * 40
NOW = 1_800_000_000.0
SESSION = identity.session_id("the-session's-own-key", SECRET)
TEACHER = identity.for_audience("teacher", "web", role="instructor", teams=["uni/staff", "uni/cs101"],
                                session=SESSION)
SKEW = identity.SIGNATURE_SKEW_SECONDS


def signed(ident: Identity, now: float = NOW, secret: str = SECRET) -> CIMultiDict[str]:
    return CIMultiDict(identity.identity_headers(ident, secret, now=now))


def test_a_web_identity_round_trips_with_role_and_sorted_teams() -> None:
    headers = signed(TEACHER)
    assert headers["X-User-Role"] == "instructor"
    assert headers["X-User-Teams"] == "uni/cs101,uni/staff"
    assert headers["X-User-Session"] == SESSION
    got = verify_identity(headers, SECRET, audience="web", now=NOW + 5)
    assert got == Identity("teacher", "instructor", ("uni/cs101", "uni/staff"), "web", SESSION)


def test_the_session_id_names_one_session_and_tells_nothing_about_it() -> None:
    assert len(SESSION) == 32 and int(SESSION, 16) >= 0
    assert identity.session_id("the-session's-own-key", SECRET) == SESSION  # stable for the session
    assert identity.session_id("another session's key", SECRET) != SESSION
    assert identity.session_id("the-session's-own-key", "x" * 40) != SESSION  # needs the secret
    assert "the-session" not in SESSION


def test_environments_get_the_login_only() -> None:
    headers = signed(identity.for_audience("alice", "env", role="admin", teams=["uni/staff"],
                                           session=SESSION))
    assert sorted(headers) == ["X-User", "X-User-Signature"]
    assert verify_identity(headers, SECRET, audience="env", now=NOW).login == "alice"


TINA_ON_ALICE = identity.for_staff("tina", "alice", "assistant")


def test_staff_let_in_by_a_grant_are_named_with_the_owner_and_their_course_role() -> None:
    headers = signed(TINA_ON_ALICE)
    assert sorted(headers) == ["X-User", "X-User-Owner", "X-User-Role", "X-User-Signature"]
    claim = (headers["X-User"], headers["X-User-Owner"], headers["X-User-Role"])
    assert claim == ("tina", "alice", "assistant")
    got = verify_identity(headers, SECRET, audience="env", now=NOW)
    assert (got.login, got.owner, got.role, got.audience) == ("tina", "alice", "assistant", "env")


@pytest.mark.parametrize(("name", "value"), [
    ("X-User-Owner", "bob"),        # the claim moved to another student's environment
    ("X-User-Role", "instructor"),  # a raised course role
    ("X-User", "alice"),            # the staff member passed off as the owner
])
def test_the_staff_claim_is_signed(name: str, value: str) -> None:
    headers = signed(TINA_ON_ALICE)
    headers[name] = value
    with pytest.raises(IdentityRejected, match="bad signature"):
        verify_identity(headers, SECRET, audience="env", now=NOW)


def test_a_claim_added_to_an_owners_headers_is_refused() -> None:
    headers = signed(identity.for_audience("tina", "env"))
    headers["X-User-Owner"] = "alice"
    headers["X-User-Role"] = "assistant"
    with pytest.raises(IdentityRejected, match="bad signature"):
        verify_identity(headers, SECRET, audience="env", now=NOW)
    # And a staff signature with its claim removed is not the plain login's either.
    stripped = signed(TINA_ON_ALICE)
    del stripped["X-User-Owner"]
    with pytest.raises(IdentityRejected, match="bad signature"):
        verify_identity(stripped, SECRET, audience="env", now=NOW)


def tamper(headers: CIMultiDict[str], name: str, value: str) -> CIMultiDict[str]:
    out = headers.copy()
    out[name] = value
    return out


@pytest.mark.parametrize(("case", "headers", "reason"), [
    ("no headers", CIMultiDict(), "no signed identity"),
    ("login only", CIMultiDict({"X-User": "teacher"}), "no signed identity"),
    ("other login", tamper(signed(TEACHER), "X-User", "admin"), "bad signature"),
    ("raised role", tamper(signed(TEACHER), "X-User-Role", "admin"), "bad signature"),
    ("added team", tamper(signed(TEACHER), "X-User-Teams", "uni/cs101,uni/staff,uni/x"), "bad signature"),
    ("another session's id", tamper(signed(TEACHER), "X-User-Session", identity.session_id("other", SECRET)),
     "bad signature"),
    ("no session id", signed(identity.for_audience("teacher", "web", role="instructor")), "no session id"),
    ("other secret", signed(TEACHER, secret="x" * 40), "bad signature"),
    ("environment's signature replayed to the web UI",
     signed(identity.for_audience("teacher", "env")), "signature for another audience"),
    ("audience edited", tamper(signed(identity.for_audience("teacher", "env")), "X-User-Signature",
                               signed(identity.for_audience("teacher", "env"))["X-User-Signature"]
                               .replace("aud=env", "aud=web")), "bad signature"),
    ("garbage", tamper(signed(TEACHER), "X-User-Signature", "nonsense"), "malformed signature"),
    ("duplicate field", tamper(signed(TEACHER), "X-User-Signature", "t=1,t=2,aud=web,v2=00"),
     "malformed signature"),
    ("bad time", tamper(signed(TEACHER), "X-User-Signature", "t=soon,aud=web,v2=00"), "malformed signature"),
])
def test_forged_stale_and_replayed_identities_are_refused(case: str, headers: CIMultiDict[str],
                                                          reason: str) -> None:
    with pytest.raises(IdentityRejected, match=reason):
        verify_identity(headers, SECRET, audience="web", now=NOW)


@pytest.mark.parametrize("seconds", [0, 1, SKEW - 1, SKEW])
@pytest.mark.parametrize("direction", [-1, 1], ids=["past", "future"])
def test_signatures_within_the_skew_window_are_accepted_either_way(seconds: int, direction: int) -> None:
    headers = signed(TEACHER, now=NOW + direction * seconds)
    assert verify_identity(headers, SECRET, audience="web", now=NOW).login == "teacher"
    assert verify_identity(signed(identity.for_audience("alice", "env"), now=NOW + direction * seconds),
                           SECRET, audience="env", now=NOW).login == "alice"


@pytest.mark.parametrize("seconds", [SKEW + 1, SKEW + 2, 3600])
@pytest.mark.parametrize("direction", [-1, 1], ids=["past", "future"])
def test_signatures_beyond_the_skew_window_are_refused_either_way(seconds: int, direction: int) -> None:
    with pytest.raises(IdentityRejected, match="stale signature"):
        verify_identity(signed(TEACHER, now=NOW + direction * seconds), SECRET, audience="web", now=NOW)
    with pytest.raises(IdentityRejected, match="stale signature"):
        verify_identity(signed(identity.for_audience("alice", "env"), now=NOW + direction * seconds),
                        SECRET, audience="env", now=NOW)


def test_the_window_edge_is_exact_to_the_fraction_of_a_second() -> None:
    # The signature holds whole seconds; the verifier's clock does not.
    headers = signed(TEACHER, now=NOW)
    assert verify_identity(headers, SECRET, audience="web", now=NOW + SKEW).login == "teacher"
    with pytest.raises(IdentityRejected, match="stale signature"):
        verify_identity(headers, SECRET, audience="web", now=NOW + SKEW + 0.001)
    with pytest.raises(IdentityRejected, match="stale signature"):
        verify_identity(headers, SECRET, audience="web", now=NOW - SKEW - 0.001)


def test_the_skew_window_is_thirty_seconds_as_documented() -> None:
    assert SKEW == 30
    doc = (Path(__file__).parents[2] / "docs" / "identity.md").read_text()
    assert "SIGNATURE_SKEW_SECONDS" in doc and "30 seconds" in doc


def test_an_unknown_role_is_refused_even_when_signed() -> None:
    headers = signed(Identity("teacher", "root", (), "web", SESSION))
    with pytest.raises(IdentityRejected, match="unknown role"):
        verify_identity(headers, SECRET, audience="web", now=NOW)


def test_no_secret_verifies_nothing() -> None:
    with pytest.raises(IdentityRejected):
        verify_identity(signed(TEACHER, secret=""), "", audience="web", now=NOW)


@pytest.mark.parametrize("name", ["X-User", "x_user", "X-User-Role", "X-USER-TEAMS", "X-Auth-Request-User",
                                  "X-Auth-Anything", "X-Remote-User", "Remote-User", "X-Webauth-User",
                                  "X-Forwarded-User", "X-Forwarded-Email", " x-user "])
def test_identity_like_headers_are_recognised(name: str) -> None:
    assert identity.is_identity_header(name)


@pytest.mark.parametrize("name", ["X-Request-Id", "User-Agent", "X-Userland-Thing", "Authorization"])
def test_ordinary_headers_are_not(name: str) -> None:
    assert not identity.is_identity_header(name)
