"""Header rewriting, table-driven: client headers in, upstream headers out (and back)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from multidict import CIMultiDict

from userland.auth.rules.origins import PLATFORM_COOKIES
from userland.platform.model import identity
from userland.proxy.rules.headers import (
    client_response_headers,
    strip_cookie,
    upstream_request_header_list,
    upstream_request_headers,
)

SECRET = "k" * 40
SPOOFS = [
    [("X-User", "victim")],
    [("x-user", "victim")],
    [("X-USER", "victim")],
    [("x_user", "victim")],
    [("X_User", "victim")],
    [("X-User", "victim"), ("X-User", "victim2")],
    [("X-Forwarded-User", "victim")],
    [("X_Forwarded_User", "victim")],
    [("X-Forwarded-Email", "victim@example.edu")],
    [("X-User-Signature", identity.sign(identity.Identity("victim"), SECRET))],
    [("x_user_signature", identity.sign(identity.Identity("victim"), SECRET))],
    [("X-Auth-Request-User", "victim")],
    [("Remote-User", "victim")],
    [("Connection", "x-user"), ("X-User", "victim")],
    [("X-User-Role", "admin")],
    [("X-User-Teams", "org/staff")],
    [("x_user_role", "admin")],
    [("X-Auth-User", "victim")],
    [("X-Remote-User", "victim")],
    [("X-Webauth-User", "victim")],
]


def rewrite(headers: list[tuple[str, str]], login: str | None = "alice", **kw: str) -> CIMultiDict[str]:
    user = None if login is None else identity.for_audience(login, identity.AUDIENCE_ENV)
    # One moment for both calls: each signs X-User with the time, and two clocks read apart can
    # straddle a second (a CI run failed so).
    args: dict[str, object] = {"secret": SECRET, "client_ip": "10.0.0.7", "proto": "https",
                               "host": "ide.example.edu", "session_cookie": "userland_session",
                               "now": time.time()}
    args.update(kw)
    out = upstream_request_headers(headers, user, **args)  # type: ignore[arg-type]
    # The list the HTTP path sends is the same headers in the same order (every test checks both).
    as_list = upstream_request_header_list(headers, user, **args)  # type: ignore[arg-type]
    assert as_list == list(out.items())
    return out


@pytest.mark.parametrize("spoof", SPOOFS, ids=lambda s: ",".join(n for n, _ in s))
def test_spoofed_identity_headers_are_replaced_by_the_real_user(spoof: list[tuple[str, str]]) -> None:
    out = rewrite([("Host", "ide.example.edu"), *spoof])
    assert out.getall("X-User") == ["alice"]
    assert len(out.getall("X-User-Signature")) == 1
    assert identity.verify_identity(out, SECRET, audience="env").login == "alice"
    for name, value in out.items():
        assert "victim" not in value, (name, value)
        if identity.is_identity_header(name):
            assert name in ("X-User", "X-User-Signature")
        assert value != "admin", (name, value)


@pytest.mark.parametrize("spoof", SPOOFS, ids=lambda s: ",".join(n for n, _ in s))
def test_anonymous_requests_carry_no_identity_at_all(spoof: list[tuple[str, str]]) -> None:
    out = rewrite(spoof, login=None)
    assert not [name for name in out if identity.is_identity_header(name)]


@pytest.mark.parametrize(("client", "expected"), [
    ([("X-Forwarded-For", "1.2.3.4")], "10.0.0.7"),
    ([("X-Forwarded-For", "1.2.3.4"), ("X-Forwarded-For", "5.6.7.8")], "10.0.0.7"),
    ([("x_forwarded_for", "1.2.3.4")], "10.0.0.7"),
    ([], "10.0.0.7"),
])
def test_client_forwarded_for_is_never_trusted(client: list[tuple[str, str]], expected: str) -> None:
    out = rewrite(client)
    assert out.getall("X-Forwarded-For") == [expected]


def test_forwarded_headers_are_set_from_the_gateway_view() -> None:
    out = rewrite([("X-Forwarded-Proto", "http"), ("X-Forwarded-Host", "evil.example"),
                   ("Forwarded", "for=1.2.3.4;host=evil"), ("X-Forwarded-Port", "1"),
                   ("X-Real-IP", "1.2.3.4")])
    assert out.getall("X-Forwarded-Proto") == ["https"]
    assert out.getall("X-Forwarded-Host") == ["ide.example.edu"]
    assert "Forwarded" not in out and "X-Forwarded-Port" not in out and "X-Real-IP" not in out


@pytest.mark.parametrize(("cookies", "expected"), [
    (["userland_session=abc"], None),
    (["userland_session=abc; app=1"], "app=1"),
    (["app=1; userland_session=abc; other=2"], "app=1; other=2"),
    (["userland_session=abc; userland_session=forged"], None),
    (["a=1", "userland_session=abc", "b=2"], "a=1; b=2"),
    (["userland_session_other=1"], "userland_session_other=1"),  # a different cookie: kept
    (["x=userland_session"], "x=userland_session"),
    (["  userland_session = abc ;app=1"], "app=1"),
])
def test_only_the_platform_session_cookie_is_removed(cookies: list[str], expected: str | None) -> None:
    out = rewrite([("Cookie", c) for c in cookies])
    assert out.get("Cookie") == expected
    assert len(out.getall("Cookie", [])) == (0 if expected is None else 1)


@pytest.mark.parametrize("name", [
    "Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization",
    "Proxy-Connection", "Proxy-Anything", "X-Named-By-Connection", "Expect",
])
def test_hop_by_hop_request_headers_are_removed(name: str) -> None:
    out = rewrite([("Connection", "keep-alive, X-Named-By-Connection"), (name, "v"),
                   ("Accept", "text/html")])
    assert name not in out
    assert out["Accept"] == "text/html"


def test_end_to_end_headers_pass_unchanged_and_in_order() -> None:
    client = [("Host", "ide.example.edu"), ("Accept-Encoding", "gzip"), ("Authorization", "Bearer app"),
              ("Content-Length", "12"), ("X-Custom", "1"), ("X-Custom", "2"), ("Origin", "https://ide")]
    out = rewrite(client)
    for name, value in client:
        assert value in out.getall(name)
    assert out.getall("X-Custom") == ["1", "2"]


def test_websocket_handshake_headers_are_left_to_the_websocket_client() -> None:
    out = rewrite([("Sec-WebSocket-Key", "k"), ("Sec-WebSocket-Version", "13"),
                   ("Sec-WebSocket-Protocol", "p"), ("Origin", "https://ide.example.edu")], websocket=True)
    assert not [n for n in out if n.lower().startswith("sec-websocket")]
    assert out["Origin"] == "https://ide.example.edu"


def test_response_headers_drop_hop_by_hop_and_planted_session_cookies() -> None:
    upstream = [("Connection", "close, X-Secret-Hop"), ("X-Secret-Hop", "1"), ("Keep-Alive", "t=5"),
                ("Transfer-Encoding", "chunked"), ("Location", "/a?b=%2F"), ("Set-Cookie", "a=1"),
                ("Set-Cookie", "b=2; HttpOnly"), ("Set-Cookie", "userland_session=planted; Path=/"),
                ("Content-Encoding", "gzip"), ("Content-Length", "10")]
    out = client_response_headers(upstream, session_cookie="userland_session")
    assert list(out.items()) == [("Location", "/a?b=%2F"), ("Set-Cookie", "a=1"),
                                 ("Set-Cookie", "b=2; HttpOnly"), ("Content-Encoding", "gzip"),
                                 ("Content-Length", "10")]


def test_strip_cookie_keeps_value_with_equals_signs() -> None:
    assert strip_cookie("a=b=c; userland_session=x", "userland_session") == "a=b=c"


def test_the_client_part_remembered_per_raw_head_is_the_same_and_never_shared() -> None:
    """The gateway passes the request's raw headers so the client's part is worked out once per
    distinct head: the result must equal the one worked out afresh, and each call gets its own
    list (what one request adds must never reach another's)."""
    client = [("Host", "alice.ide.test"), ("Cookie", "userland_origin=s; app=1"), ("X-User", "mallory"),
              ("Connection", "keep-alive, X-Drop"), ("X-Drop", "1"), ("Accept", "text/html")]
    raw = tuple((k.encode(), v.encode()) for k, v in client)
    kwargs: dict[str, Any] = {"secret": SECRET, "client_ip": "10.0.0.1", "proto": "https",
                              "now": 1_800_000_000, "host": "alice.ide.test",
                              "session_cookie": PLATFORM_COOKIES}
    alice = identity.for_audience("alice", identity.AUDIENCE_ENV)
    fresh = upstream_request_header_list(client, alice, **kwargs)
    first = upstream_request_header_list(client, alice, raw=raw, **kwargs)
    second = upstream_request_header_list(client, None, raw=raw, **{**kwargs, "client_ip": "10.0.0.2"})
    assert first == fresh
    assert ("X-Forwarded-For", "10.0.0.2") in second and ("X-User", "alice") not in second
    assert first is not second and len(first) == len(second) + 2
    assert [h for h in second if h[0] in ("X-User", "X-Drop", "Connection")] == []
    assert ("Cookie", "app=1") in second
