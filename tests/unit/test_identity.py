"""The signed identity contract between the gateway and the web UI / environments (pure)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from userland.platform import identity
from userland.platform.identity import Identity, IdentityRejected, verify_identity

SECRET = "s" * 40
NOW = 1_800_000_000.0
TEACHER = identity.for_audience("teacher", "web", role="instructor", teams=["uni/staff", "uni/cs101"])


def signed(ident: Identity, now: float = NOW, secret: str = SECRET) -> CIMultiDict[str]:
    return CIMultiDict(identity.identity_headers(ident, secret, now=now))


def test_a_web_identity_round_trips_with_role_and_sorted_teams() -> None:
    headers = signed(TEACHER)
    assert headers["X-User-Role"] == "instructor"
    assert headers["X-User-Teams"] == "uni/cs101,uni/staff"
    got = verify_identity(headers, SECRET, audience="web", now=NOW + 5)
    assert got == Identity("teacher", "instructor", ("uni/cs101", "uni/staff"), "web")


def test_environments_get_the_login_only() -> None:
    headers = signed(identity.for_audience("alice", "env", role="admin", teams=["uni/staff"]))
    assert sorted(headers) == ["X-User", "X-User-Signature"]
    assert verify_identity(headers, SECRET, audience="env", now=NOW).login == "alice"


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
    ("other secret", signed(TEACHER, secret="x" * 40), "bad signature"),
    ("stale", signed(TEACHER, now=NOW - 31), "stale signature"),
    ("from the future", signed(TEACHER, now=NOW + 31), "stale signature"),
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


def test_an_unknown_role_is_refused_even_when_signed() -> None:
    headers = signed(Identity("teacher", "root", (), "web"))
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
