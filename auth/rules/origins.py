"""Per-student origins and the cookies and cross-site checks that go with them (pure functions).

A Template routed by host `ide.example.edu` serves each student on their own origin,
`alice.ide.example.edu`: the first label is the owner (GitHub logins are valid DNS labels),
the rest is the Template host. Browsers keep service workers, storage, caches and host-only
cookies per origin, so nothing one student's environment leaves in a browser reaches another's.

Cookie names live here, in one place, for everything that must recognise them (the gateway
strips every one of them from what it forwards upstream and from what upstreams try to set).
With Secure cookies they carry the `__Host-` prefix, which browsers only accept with Secure,
`Path=/` and no Domain: a sibling subdomain can then neither set nor shadow them.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from userland.platform.model import naming

# Paths the gateway answers itself on a student's origin (never forwarded to the environment).
OWN_PATH_PREFIX = "/__userland/"
HANDOFF_PATH = OWN_PATH_PREFIX + "handoff"
SIGNED_OUT_PATH = OWN_PATH_PREFIX + "signed-out"
# Where a browser that sends a platform cookie twice clears them: every host but the platform's
# (whose /__userland/ belongs to the web UI), and the platform host.
CLEAR_COOKIES_PATH = OWN_PATH_PREFIX + "clear-cookies"
PLATFORM_CLEAR_COOKIES_PATH = "/auth/clear-cookies"

SESSION_COOKIE_BASE = "userland_session"  # the platform host's session
ORIGIN_COOKIE_BASE = "userland_origin"  # a student origin's own session
NONCE_COOKIE_BASE = "userland_login"  # a login in progress (auth/oauth_state.py)
COOKIE_BASES = (SESSION_COOKIE_BASE, ORIGIN_COOKIE_BASE, NONCE_COOKIE_BASE)
# Every spelling of the platform's cookies: never forwarded upstream, never set by an upstream.
PLATFORM_COOKIES: tuple[str, ...] = tuple(
    prefix + base for base in COOKIE_BASES for prefix in ("", "__Host-", "__Secure-"))

# Methods that cannot change anything by the HTTP rules; every other method must come from
# the request's own origin. OPTIONS is a CORS preflight: it carries the other site's Origin.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# What sign-out asks browsers to drop for an origin (Chromium also honours executionContexts:
# other tabs of that origin are reloaded, and so lose what they hold in memory).
CLEAR_SITE_DATA = '"cache", "cookies", "storage", "executionContexts"'


@dataclass(frozen=True)
class CookieNames:
    session: str
    origin: str
    nonce: str  # a login in progress; Path=/ with the `__Host-` prefix, /auth/ without


def cookie_names(secure: bool) -> CookieNames:
    prefix = "__Host-" if secure else ""
    return CookieNames(session=prefix + SESSION_COOKIE_BASE, origin=prefix + ORIGIN_COOKIE_BASE,
                       nonce=prefix + NONCE_COOKIE_BASE)


def read_names(names: CookieNames) -> tuple[str, ...]:
    """The cookie names the gateway reads (each mode reads its own spelling)."""
    return (names.session, names.origin, names.nonce)


def repeated_cookie(cookie_headers: Iterable[str], names: Collection[str]) -> str | None:
    """The first of `names` that the request's Cookie header(s) carry more than once, else None.

    A browser sends every cookie whose domain and path match, so a page on a sibling host can
    plant `name=value; Domain=<parent>` and the victim's browser then sends two cookies of that
    name; aiohttp (like most servers) keeps the last one, which may be the planted one. Names
    are compared as servers read them: trimmed, case-sensitive."""
    seen: set[str] = set()
    for header in cookie_headers:
        for pair in header.split(";"):
            name = pair.split("=", 1)[0].strip()
            if name in names:
                if name in seen:
                    return name
                seen.add(name)
    return None


def parent_domains(host: str) -> tuple[str, ...]:
    """`alice.ide.example.edu` -> (`ide.example.edu`, `example.edu`, `edu`): the domains a page
    on that host may name in a cookie's Domain (browsers refuse the public suffixes among them
    themselves). Nothing for an IP address."""
    bare = host.strip("[]")
    if ":" in bare or bare.replace(".", "").isdigit():
        return ()
    labels = bare.split(".")
    return tuple(".".join(labels[i:]) for i in range(1, len(labels)))


def split_student_host(host: str, template_hosts: Container[str]) -> tuple[str, str] | None:
    """`alice.ide.example.edu` -> (`alice`, `ide.example.edu`) when the rest is a Template host
    and the first label a login; else None. `host` as from `request_host` (lowercase, no port)."""
    label, dot, rest = host.partition(".")
    if not dot or rest not in template_hosts or not naming.is_valid_login(label):
        return None
    return label.lower(), rest


def normalize_origin(origin: str) -> str | None:
    """`HTTPS://Alice.IDE.example.edu:443` -> `https://alice.ide.example.edu`; None if malformed."""
    try:
        parts = urlsplit(origin.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host or parts.path not in ("", "/") or parts.query \
            or parts.fragment or parts.username is not None or parts.password is not None:
        return None
    default = 443 if scheme == "https" else 80
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}" + ("" if port in (None, default) else f":{port}")


def request_origin(proto: str, host_header: str) -> str | None:
    """The origin a request was sent to, from the scheme clients use and its Host header."""
    return normalize_origin(f"{proto}://{host_header}")


def port_suffix(public_url: str) -> str:
    """`:8000` when the platform's public URL names a port, else empty: student origins are
    served on the same port as the platform (one listener, wildcard DNS)."""
    try:
        port = urlsplit(public_url).port
    except ValueError:
        return ""
    return f":{port}" if port else ""


def student_origin(proto: str, login: str, template_host: str, port: str = "") -> str:
    return f"{proto}://{login.lower()}.{template_host}{port}"


# The LTI endpoints an LMS posts to from its own site (OIDC login initiation, the id_token's form
# post): the cross-site check would refuse every launch. Their own checks stand in: a registered
# issuer, a single-use state, an id_token signed by the platform (auth/rules/lti_launch.py).
LTI_CROSS_SITE_POSTS = frozenset({"/lti/login", "/lti/launch"})


def cross_site_refusal(method: str, headers: Mapping[str, str], expected: str | None, *,
                       websocket: bool) -> str | None:
    """Why a request must be refused as cross-site, or None when it may pass.

    A WebSocket upgrade must carry `Origin` equal to the origin it is sent to (browsers always
    send it; without it this is no browser, or one tricked into leaving it out). Any other method
    than GET/HEAD/OPTIONS must carry the same Origin; without Origin it passes only when
    `Sec-Fetch-Site` is absent too, which is a non-browser client (curl, scripts): every browser
    that sends Sec-Fetch-Site also sends Origin on unsafe requests.
    """
    if not websocket and method.upper() in SAFE_METHODS:
        return None
    origin = headers.get("Origin")
    if origin is None:
        if websocket:
            return "websocket upgrade without Origin"
        return None if headers.get("Sec-Fetch-Site") is None else "unsafe request without Origin"
    if expected is None or normalize_origin(origin) != expected:
        return "cross-origin websocket" if websocket else "cross-origin unsafe request"
    return None


def safe_path(target: str | None) -> str:
    """`target` when it is a path on this origin (one leading `/`, printable ASCII, no
    backslash), else `/`: where a handoff may send the browser afterwards."""
    if not target or len(target) > 2048 or not target.startswith("/") or target.startswith("//"):
        return "/"
    if not target.isascii() or "\\" in target or any(ord(c) < 0x21 or ord(c) == 0x7F for c in target):
        return "/"
    return target
