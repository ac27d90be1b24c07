"""Per-student origins and the cross-site rules as pure functions, table-driven."""

from __future__ import annotations

import pytest

from userland.auth.rules.origins import (
    PLATFORM_COOKIES,
    cookie_names,
    cross_site_refusal,
    normalize_origin,
    parent_domains,
    port_suffix,
    read_names,
    repeated_cookie,
    request_origin,
    safe_path,
    split_student_host,
    student_origin,
)

HOSTS = {"ide.example.edu", "pma.example.edu"}


@pytest.mark.parametrize(("host", "expected"), [
    ("alice.ide.example.edu", ("alice", "ide.example.edu")),
    ("a-b-c.pma.example.edu", ("a-b-c", "pma.example.edu")),
    ("ide.example.edu", None),  # the bare Template host is nobody's
    ("a.b.ide.example.edu", None),  # one label only
    ("-x.ide.example.edu", None),  # not a login
    ("x--y.ide.example.edu", None),
    ("alice.other.example.edu", None),
    ("alice.example.edu", None),
    ("alice", None),
    ("", None),
    ("a" * 40 + ".ide.example.edu", None),  # longer than a GitHub login
])
def test_split_student_host(host: str, expected: tuple[str, str] | None) -> None:
    assert split_student_host(host, HOSTS) == expected


@pytest.mark.parametrize(("origin", "expected"), [
    ("https://Alice.IDE.example.edu", "https://alice.ide.example.edu"),
    ("https://alice.ide.example.edu:443", "https://alice.ide.example.edu"),
    ("http://alice.ide.example.edu:80/", "http://alice.ide.example.edu"),
    ("http://alice.demo.localhost:8000", "http://alice.demo.localhost:8000"),
    ("http://[::1]:8000", "http://[::1]:8000"),
    ("null", None),
    ("", None),
    ("ftp://alice.ide.example.edu", None),
    ("https://alice.ide.example.edu/path", None),
    ("https://alice.ide.example.edu?x", None),
    ("https://user@alice.ide.example.edu", None),
    ("https://alice.ide.example.edu:99999", None),
])
def test_normalize_origin(origin: str, expected: str | None) -> None:
    assert normalize_origin(origin) == expected


SELF = "https://alice.ide.example.edu"


@pytest.mark.parametrize(("method", "headers", "websocket", "refused"), [
    ("GET", {"Origin": "https://evil.example"}, False, False),  # safe methods pass
    ("HEAD", {}, False, False),
    ("OPTIONS", {"Origin": "https://evil.example"}, False, False),  # a CORS preflight
    ("POST", {"Origin": SELF}, False, False),
    ("POST", {"Origin": "https://ALICE.ide.example.edu:443"}, False, False),
    ("POST", {"Origin": "https://bob.ide.example.edu"}, False, True),
    ("POST", {"Origin": "http://alice.ide.example.edu"}, False, True),
    ("POST", {"Origin": "null"}, False, True),
    ("DELETE", {"Origin": "https://evil.example"}, False, True),
    ("PROPFIND", {"Origin": "https://evil.example"}, False, True),
    ("POST", {}, False, False),  # no browser: neither Origin nor Sec-Fetch-Site
    ("POST", {"Sec-Fetch-Site": "same-site"}, False, True),
    ("GET", {"Origin": SELF}, True, False),
    ("GET", {}, True, True),  # a WebSocket upgrade without Origin
    ("GET", {"Origin": "https://bob.ide.example.edu"}, True, True),
])
def test_cross_site_refusal(method: str, headers: dict[str, str], websocket: bool, refused: bool) -> None:
    assert (cross_site_refusal(method, headers, SELF, websocket=websocket) is not None) == refused


def test_names_and_urls() -> None:
    assert cookie_names(True).session == "__Host-userland_session"
    assert cookie_names(True).origin == "__Host-userland_origin"
    assert cookie_names(False).origin == "userland_origin"
    assert {"userland_session", "__Host-userland_origin", "__Secure-userland_login"} <= set(PLATFORM_COOKIES)
    assert port_suffix("http://localhost:8000") == ":8000" and port_suffix("https://u.example.edu") == ""
    assert student_origin("http", "Alice", "demo.localhost", ":8000") == "http://alice.demo.localhost:8000"
    assert request_origin("https", "Alice.ide.example.edu:443") == SELF


@pytest.mark.parametrize(("target", "expected"), [
    ("/lab?x=1", "/lab?x=1"), ("//evil.example", "/"), ("/\\evil.example", "/"),
    ("https://evil.example", "/"), ("", "/"), (None, "/"), ("/a\tb", "/"), ("/é", "/"),
])
def test_safe_path(target: str | None, expected: str) -> None:
    assert safe_path(target) == expected


READ = frozenset(read_names(cookie_names(False)))


@pytest.mark.parametrize(("headers", "found"), [
    (["userland_origin=a; userland_origin=b"], "userland_origin"),
    (["userland_session=a; app=1; userland_session=b"], "userland_session"),
    (["userland_origin=a;  userland_origin =b"], "userland_origin"),  # servers trim names
    (["userland_login=a", "userland_login=b"], "userland_login"),  # two header lines
    (["userland_origin=a; userland_session=b; userland_login=c"], None),
    (["userland_origin=a; Userland_Origin=b"], None),  # another name to a server
    (["userland_origin=a; __Host-userland_origin=b"], None),  # not read in this mode
    (["app=1; app=2"], None),  # the environment's own business
    (["userland_origin"], None), ([""], None), ([], None),
])
def test_repeated_cookie(headers: list[str], found: str | None) -> None:
    assert repeated_cookie(headers, READ) == found


def test_repeated_cookie_in_the_secure_mode_reads_the_host_names() -> None:
    secure = frozenset(read_names(cookie_names(True)))
    assert repeated_cookie(["__Host-userland_session=a; __Host-userland_session=b"], secure) \
        == "__Host-userland_session"
    assert repeated_cookie(["userland_session=a; userland_session=b"], secure) is None


@pytest.mark.parametrize(("host", "parents"), [
    ("alice.ide.example.edu", ("ide.example.edu", "example.edu", "edu")),
    ("alice.demo.localhost", ("demo.localhost", "localhost")),
    ("localhost", ()), ("10.1.2.3", ()), ("[fd00::1]", ()),
])
def test_parent_domains(host: str, parents: tuple[str, ...]) -> None:
    assert parent_domains(host) == parents
