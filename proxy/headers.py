"""Headers in both directions: what the upstream sees, what the client gets back.

Request side (client -> upstream), in this order:
1. drop hop-by-hop headers (RFC 9110 section 7.6.1: Connection and every header it names,
   Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*), plus Expect (the gateway
   answers `100-continue` itself);
2. drop every identity header a client could smuggle (`X-User`, `x_user`, `X-USER`, repeated,
   `X-Forwarded-User`, `X-User-Signature`, ...: `identity.is_identity_header`), and every
   client `X-Forwarded-*`, `Forwarded` and `X-Real-IP` (never trust a client's idea of itself);
3. remove the platform's session cookie from Cookie, keeping the application's own cookies;
4. set `X-User` + `X-User-Signature` (only for a logged-in user) and `X-Forwarded-For/Proto/Host`.
Host is passed unchanged (IDEs compare Origin with Host for their WebSockets).

Response side: hop-by-hop headers dropped, and any Set-Cookie naming the platform's session
cookie dropped (a student's app must not be able to plant a session on the shared domain).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from multidict import CIMultiDict, CIMultiDictProxy, MultiDictProxy

from userland.platform import identity

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


def strip_cookie(cookie_header: str, cookie_name: str) -> str:
    """The Cookie header without any `cookie_name=...` pair (all of them, if repeated)."""
    kept = []
    for pair in cookie_header.split(";"):
        name = pair.split("=", 1)[0].strip()
        if not pair.strip() or name == cookie_name:
            continue
        kept.append(pair.strip())
    return "; ".join(kept)


# Names dropped on the request side whatever Connection says (normalized: lowercase, `_` as `-`).
_REQUEST_DROP = HOP_BY_HOP | _REQUEST_ONLY_DROP | frozenset(identity.IDENTITY_HEADERS)
_REQUEST_DROP_WS = _REQUEST_DROP | WEBSOCKET_HANDSHAKE
_DROP_PREFIXES = ("x-forwarded-", "proxy-")


class _Signatures:
    """`X-User-Signature` values for the current second: one HMAC per user and second, not
    per request (the signature only holds the login and the whole-second timestamp)."""

    def __init__(self) -> None:
        self._second = -1
        self._values: dict[tuple[str, str], str] = {}

    def get(self, login: str, secret: str) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._values = {}
        key = (login, secret)
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = identity.sign_identity(login, secret, now=second)
        return value


_signatures = _Signatures()


def upstream_request_headers(
    client_headers: HeadersIn,
    login: str | None,
    *,
    secret: str,
    client_ip: str,
    proto: str,
    host: str,
    session_cookie: str,
    websocket: bool = False,
    now: float | None = None,
) -> CIMultiDict[str]:
    """Headers to send upstream for a client request; `login` None forwards anonymously."""
    return CIMultiDict(upstream_request_header_list(
        client_headers, login, secret=secret, client_ip=client_ip, proto=proto, host=host,
        session_cookie=session_cookie, websocket=websocket, now=now))


def upstream_request_header_list(
    client_headers: HeadersIn,
    login: str | None,
    *,
    secret: str,
    client_ip: str,
    proto: str,
    host: str,
    session_cookie: str,
    websocket: bool = False,
    now: float | None = None,
) -> list[tuple[str, str]]:
    """`upstream_request_headers` as a list of (name, value), in the same order (what the
    HTTP upstream client serializes; no multidict built per request)."""
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
    # Every name added below was dropped above, so adding is setting.
    if cookies:
        remaining = strip_cookie("; ".join(cookies), session_cookie)
        if remaining:
            add(("Cookie", remaining))
    if login is not None:
        add((identity.USER_HEADER, login))
        add((identity.SIGNATURE_HEADER, _signatures.get(login, secret) if now is None
             else identity.sign_identity(login, secret, now=now)))
    add(("X-Forwarded-For", client_ip))
    add(("X-Forwarded-Proto", proto))
    add(("X-Forwarded-Host", host))
    return out


def _sets_cookie(value: str, cookie_name: str) -> bool:
    return value.split("=", 1)[0].strip() == cookie_name


def client_response_headers(upstream_headers: HeadersIn, *, session_cookie: str) -> CIMultiDict[str]:
    """Upstream response headers to pass to the client (Location, Set-Cookie... untouched)."""
    items = _items(upstream_headers)
    named = _connection_tokens(items)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in items:
        key = _normal(name)
        if _is_hop_by_hop(key, named):
            continue
        if key == "set-cookie" and _sets_cookie(value, session_cookie):
            continue
        out.add(name, value)
    return out
