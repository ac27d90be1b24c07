"""Open-redirect attempts against the post-login `next` check, table-driven."""

from __future__ import annotations

import pytest

from userland.auth.rules.redirects import safe_next

PUBLIC = "https://userland.example.edu"
TEMPLATE_HOSTS = {"ide.classroom.test", "pma.classroom.test:8443", "ide.example.edu"}

ALLOWED = [
    "/",
    "/home",
    "/path/with?query=1&x=//evil.com#frag",
    "/%2F%2Fevil.com",  # a path on this host, percent-encoded
    "https://userland.example.edu/",
    "https://userland.example.edu:443/x",
    "https://USERLAND.example.edu/x",
    "https://ide.example.edu/lab?tab=1",
    "https://alice.ide.example.edu/lab",  # a student's origin under a Template host
    "https://bob.pma.classroom.test/",
    "https://ide.classroom.test/",
    "https://pma.classroom.test/phpmyadmin",
]

REFUSED = [
    None,
    "",
    "//evil.com",
    "//evil.com/path",
    "///evil.com",
    "/\\evil.com",
    "\\\\evil.com",
    "/\\/evil.com",
    "/\t/evil.com",  # browsers drop tabs: //evil.com
    "/\n/evil.com",
    " /evil",
    "https://evil.com",
    "http://evil.com/",
    "https://evil.com/https://userland.example.edu",
    "https://userland.example.edu.evil.com/",
    "https://evilexample.edu/",  # suffix without a dot boundary
    "https://example.edu/",  # the parent of a Template host is nobody's
    "http://deep.sub.example.edu/",
    "https://a.b.ide.example.edu/",  # only one label below a Template host
    "https://-x.ide.example.edu/",  # not a login
    "https://xide.example.edu/",
    "https://example.edu.evil.com/",
    "https://userland.example.edu@evil.com/",
    "https://evil.com@userland.example.edu/",  # user info is refused outright
    "https://user:pass@ide.example.edu/",
    "https:evil.com",
    "https:/evil.com",
    "https:\\\\evil.com",
    "javascript:alert(1)",
    "JavaScript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "vbscript:msgbox",
    "ftp://ide.example.edu/",
    "evil.com",
    "ide.example.edu/x",
    "https://ide.classroom.test.evil.com/",
    "https://[::1/",  # malformed
    "https://ide.example.edu:99999/",  # malformed port
    "https://\uff45vil.com/",  # fullwidth e, browsers would normalize it
    "/" + "a" * 5000,
]


def check(target: str | None) -> str:
    return safe_next(target, public_url=PUBLIC, template_hosts=lambda: set(TEMPLATE_HOSTS))


@pytest.mark.parametrize("target", ALLOWED)
def test_allowed_destinations_are_kept(target: str) -> None:
    assert check(target) == target


@pytest.mark.parametrize("target", REFUSED)
def test_open_redirect_attempts_fall_back_to_root(target: str | None) -> None:
    assert check(target) == "/"


def test_only_public_and_template_hosts_and_their_student_origins() -> None:
    def only(target: str) -> str:
        return safe_next(target, public_url=PUBLIC, template_hosts=lambda: {"ide.x.test"})

    assert only("https://userland.example.edu/a") == "https://userland.example.edu/a"
    assert only("https://ide.x.test/") == "https://ide.x.test/"
    assert only("https://ide.example.edu/") == "/"


def test_gateway_hosts_are_read_on_every_call() -> None:
    hosts: set[str] = set()

    def current() -> str:
        return safe_next("https://new.test/", public_url=PUBLIC, template_hosts=lambda: hosts)

    assert current() == "/"
    hosts.add("new.test")  # a Template with this routing host appeared
    assert current() == "https://new.test/"
