"""Where a login may send the browser afterwards (the `next` parameter).

Only to configured hosts: the public URL's host, the hosts the gateway routes Templates on
(`template_hosts()`) and the students' origins directly under them (`alice.ide.example.edu`,
whose gateway sends anyone but alice on to their own); or to a path on the current host
(starting with exactly one `/`). Everything else (`//evil.com`, `/\\evil.com`,
`https://evil.com`, `javascript:...`, anything with control or non-ASCII characters,
backslashes or user info) falls back to `/`. Browsers strip tabs and newlines and read `\\`
as `/`, which is why those characters are refused outright rather than interpreted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from userland.auth.rules.origins import split_student_host

FALLBACK = "/"
_MAX_LENGTH = 2048


def _host_only(host: str) -> str:
    """`Example.edu:8443` -> `example.edu` (IPv6 literals keep their brackets off)."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str, *, public_url: str, template_hosts: Iterable[str]) -> bool:
    host = _host_only(host)
    if not host:
        return False
    if public_url and host == _host_only(urlsplit(public_url).netloc):
        return True
    hosts = {_host_only(h) for h in template_hosts if h}
    return host in hosts or split_student_host(host, hosts) is not None


def safe_next(target: str | None, *, public_url: str, template_hosts: Callable[[], set[str]]) -> str:
    """`target` when it is a safe post-login destination, else `/`."""
    if not target or len(target) > _MAX_LENGTH:
        return FALLBACK
    if not target.isascii() or "\\" in target or any(ord(c) < 0x21 or ord(c) == 0x7F for c in target):
        return FALLBACK
    if target.startswith("/"):
        # "//host" is protocol-relative: another site.
        return FALLBACK if target.startswith("//") else target
    try:
        parts = urlsplit(target)
        hostname = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return FALLBACK
    if parts.scheme not in ("http", "https") or not hostname:
        return FALLBACK
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return FALLBACK
    if not host_allowed(hostname, public_url=public_url, template_hosts=template_hosts()):
        return FALLBACK
    return target
