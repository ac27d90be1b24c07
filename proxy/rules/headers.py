"""Headers in both directions: what the upstream sees, what the client gets back.

Request side (client -> upstream), in this order:
1. drop hop-by-hop headers (RFC 9110 section 7.6.1: Connection and every header it names,
   Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*), plus Expect (the gateway
   answers `100-continue` itself);
2. drop every identity header a client could smuggle (`X-User`, `x_user`, `X-USER`, repeated,
   `X-Forwarded-User`, `X-User-Signature`, ...: `identity.is_identity_header`), and every
   client `X-Forwarded-*`, `Forwarded` and `X-Real-IP` (never trust a client's idea of itself);
3. remove the platform's session cookie from Cookie, keeping the application's own cookies;
4. set the signed identity (`identity.identity_headers`: `X-User`, `X-User-Signature`, and for
   the web UI `X-User-Role` and `X-User-Teams`; only for a signed-in user) and
   `X-Forwarded-For/Proto/Host`.
Host is passed unchanged (IDEs compare Origin with Host for their WebSockets).

Response side: hop-by-hop headers dropped, any Set-Cookie naming a platform cookie dropped
(a student's app must not be able to plant a session on the shared domain), and every other
Set-Cookie made host-only: its `Domain` attribute removed (`host_only_cookie`), so a cookie of
alice's environment stays on alice's origin instead of reaching `bob.ide.example.edu` or the
platform (cookie tossing). The cookie itself still arrives: apps keep working on their origin.

Platform cookie names are compared as a browser or aiohttp could end up seeing them, not as
sent: `cookie_name_key` removes every byte that is not an RFC 9110 token character (aiohttp drops
undecodable bytes when it writes a header; browsers trim whitespace), lowercases, and strips
`__Host-`/`__Secure-` prefixes. A Set-Cookie without a name (`=x`, or no `=` at all: browsers
store those as a nameless cookie and send back the bare value, such as `userland_session=x`)
is dropped too. The callers pass the platform's names as one tuple (`session_cookie`: one name
or several), so a renamed or added platform cookie is covered everywhere at once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from multidict import CIMultiDict, CIMultiDictProxy, MultiDictProxy

from userland.platform.model import identity

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    "proxy-connection", "proxy-authenticate", "proxy-authorization",
})
# Also never forwarded upstream: the gateway handles these itself.
_REQUEST_ONLY_DROP = frozenset({"expect", "forwarded", "x-real-ip"})
# The handshake headers aiohttp's WebSocket client makes itself.
WEBSOCKET_HANDSHAKE = frozenset({
    "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
    "sec-websocket-protocol", "sec-websocket-accept",
})

HeadersIn = CIMultiDict[str] | CIMultiDictProxy[str] | MultiDictProxy[str] | Iterable[tuple[str, str]]


def _items(headers: HeadersIn) -> list[tuple[str, str]]:
    if hasattr(headers, "items"):
        return list(headers.items())
    return list(headers)


def _normal(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _connection_tokens(items: list[tuple[str, str]]) -> set[str]:
    tokens: set[str] = set()
    for name, value in items:
        if _normal(name) == "connection":
            tokens.update(_normal(t) for t in value.split(",") if t.strip())
    return tokens


def _is_hop_by_hop(name: str, named: set[str]) -> bool:
    return name in HOP_BY_HOP or name in named or name.startswith("proxy-")


CookieNames = str | tuple[str, ...] | frozenset[str]
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_COOKIE_PREFIXES = ("__host-", "__secure-")


def cookie_name_key(name: str) -> str:
    """A cookie name as compared with the platform's: only token characters kept, lowercased,
    `__Host-`/`__Secure-` prefixes removed (any case, repeated)."""
    key = "".join(ch for ch in name if ch in _TOKEN).lower()
    stripped = True
    while stripped:
        stripped = False
        for prefix in _COOKIE_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix):]
                stripped = True
    return key


_name_keys: dict[CookieNames, frozenset[str]] = {}


def platform_cookie_keys(names: CookieNames) -> frozenset[str]:
    """The comparison keys of the platform's cookie names (one name, or a tuple of them)."""
    keys = _name_keys.get(names)
    if keys is None:
        listed = (names,) if isinstance(names, str) else tuple(names)
        keys = _name_keys[names] = frozenset(cookie_name_key(name) for name in listed)
    return keys


def strip_cookie(cookie_header: str, cookie_name: CookieNames) -> str:
    """The Cookie header without any pair naming a platform cookie (all of them, if repeated,
    and any spelling that `cookie_name_key` takes for the same name)."""
    keys = platform_cookie_keys(cookie_name)
    kept = []
    for pair in cookie_header.split(";"):
        if not pair.strip():
            continue
        if cookie_name_key(pair.split("=", 1)[0]) in keys:
            continue
        kept.append(pair.strip())
    return "; ".join(kept)


# Names dropped on the request side whatever Connection says (normalized: lowercase, `_` as `-`).
_REQUEST_DROP = HOP_BY_HOP | _REQUEST_ONLY_DROP | identity.IDENTITY_HEADERS
_REQUEST_DROP_WS = _REQUEST_DROP | WEBSOCKET_HANDSHAKE
_DROP_PREFIXES = ("x-forwarded-", "proxy-", *identity.IDENTITY_PREFIXES)


class _Signatures:
    """Identity headers for the current second: one HMAC per identity and second, not per
    request (the signature only holds the identity and the whole-second timestamp)."""

    def __init__(self) -> None:
        self._second = -1
        self._values: dict[tuple[identity.Identity, str], list[tuple[str, str]]] = {}

    def get(self, ident: identity.Identity, secret: str) -> list[tuple[str, str]]:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._values = {}
        key = (ident, secret)
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = identity.identity_headers(ident, secret, now=second)
        return value


_signatures = _Signatures()


def upstream_request_headers(
    client_headers: HeadersIn,
    user: identity.Identity | None,
    *,
    secret: str,
    client_ip: str,
    proto: str,
    host: str,
    session_cookie: CookieNames,
    websocket: bool = False,
    now: float | None = None,
) -> CIMultiDict[str]:
    """Headers to send upstream for a client request; `user` None forwards anonymously."""
    return CIMultiDict(upstream_request_header_list(
        client_headers, user, secret=secret, client_ip=client_ip, proto=proto, host=host,
        session_cookie=session_cookie, websocket=websocket, now=now))


# The client's part of the upstream headers, remembered per raw request head (a browser sends
# the same headers again and again): bounded in entries and in the bytes of each head.
_MEMO_ENTRIES = 1024
_MEMO_HEAD_BYTES = 8192
_client_parts: dict[tuple[object, ...], list[tuple[str, str]]] = {}


def upstream_request_header_list(
    client_headers: HeadersIn,
    user: identity.Identity | None,
    *,
    secret: str,
    client_ip: str,
    proto: str,
    host: str,
    session_cookie: CookieNames,
    websocket: bool = False,
    now: float | None = None,
    raw: tuple[tuple[bytes, bytes], ...] | None = None,
) -> list[tuple[str, str]]:
    """`upstream_request_headers` as a list of (name, value), in the same order (what the
    HTTP upstream client serializes; no multidict built per request). `raw`: the request's raw
    headers, to remember the client's part by (it depends on nothing else but the two flags)."""
    if raw is None:
        out = _client_part(client_headers, session_cookie, websocket)
    else:
        key = (raw, websocket, session_cookie)
        part = _client_parts.get(key)
        if part is None:
            part = _client_part(client_headers, session_cookie, websocket)
            if sum(len(name) + len(value) for name, value in raw) <= _MEMO_HEAD_BYTES:
                if len(_client_parts) >= _MEMO_ENTRIES:
                    _client_parts.clear()
                _client_parts[key] = part
        out = part.copy()
    add = out.append
    if user is not None:
        out.extend(_signatures.get(user, secret) if now is None
                   else identity.identity_headers(user, secret, now=now))
    add(("X-Forwarded-For", client_ip))
    add(("X-Forwarded-Proto", proto))
    add(("X-Forwarded-Host", host))
    return out


def _client_part(client_headers: HeadersIn, session_cookie: CookieNames,
                 websocket: bool) -> list[tuple[str, str]]:
    """The client's headers that go upstream (steps 1-3 of the module docstring)."""
    items = _items(client_headers)
    named = _connection_tokens(items)
    drop = _REQUEST_DROP_WS if websocket else _REQUEST_DROP
    out: list[tuple[str, str]] = []
    add = out.append
    cookies: list[str] = []
    for name, value in items:
        key = name.lower()
        if "_" in key or key[:1].isspace() or key[-1:].isspace():
            key = _normal(key)
        if key in drop or key in named or key.startswith(_DROP_PREFIXES):
            continue
        if key == "cookie":
            cookies.append(value)
            continue
        add((name, value))
    # Every name added after this part was dropped here, so adding is setting.
    if cookies:
        remaining = strip_cookie("; ".join(cookies), session_cookie)
        if remaining:
            add(("Cookie", remaining))
    return out


def sets_platform_cookie(value: str, cookie_name: CookieNames) -> bool:
    """Whether a Set-Cookie value must be dropped: it names a platform cookie (as
    `cookie_name_key` compares them), or has no name at all."""
    pair = value.split(";", 1)[0]
    if "=" not in pair:
        return True  # a nameless cookie: the browser sends its bare value back as a pair
    key = cookie_name_key(pair.split("=", 1)[0])
    return not key or key in platform_cookie_keys(cookie_name)


def host_only_cookie(value: str) -> str:
    """A Set-Cookie value without any `Domain` attribute (any case or spacing, repeated or
    empty), so the browser keeps the cookie for the origin that answered only."""
    pair, sep, attributes = value.partition(";")
    if not sep or "domain" not in attributes.lower():
        return value
    kept = [a for a in attributes.split(";") if a.split("=", 1)[0].strip().lower() != "domain"]
    return ";".join([pair, *kept])


# A header value a proxy can pass on unchanged: UTF-8 text without control characters other
# than tab (what aiohttp writes back byte for byte).
_BAD_VALUE_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_BAD_NAME_BYTES = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")


def invalid_header(raw_headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The name of the first header that cannot be passed on byte for byte, or None.

    aiohttp's parser decodes undecodable bytes as surrogates and its writer drops them, so
    `userland_session\\xff=x` would reach the browser as `userland_session=x`: such a response
    is refused as a whole (502) rather than repaired."""
    for name, value in raw_headers:
        if _BAD_NAME_BYTES.search(name) or _BAD_VALUE_BYTES.search(value):
            return name.decode("latin-1")
        if not value.isascii():
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return name.decode("latin-1")
    return None


def client_response_headers(upstream_headers: HeadersIn, *, session_cookie: CookieNames) -> CIMultiDict[str]:
    """Upstream response headers to pass to the client (Location, Set-Cookie... untouched,
    except Set-Cookies that `sets_platform_cookie` refuses, and every other made host-only)."""
    items = _items(upstream_headers)
    named = _connection_tokens(items)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in items:
        key = _normal(name)
        if _is_hop_by_hop(key, named):
            continue
        if key == "set-cookie":
            if sets_platform_cookie(value, session_cookie):
                continue
            value = host_only_cookie(value)
        out.add(name, value)
    return out
