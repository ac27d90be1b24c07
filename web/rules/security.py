"""Request safety for the web UI, as pure functions: CSRF tokens, the Origin check, headers.

CSRF tokens are stateless: an HMAC (the identity secret, under its own purpose tag) over the
login, the gateway session's id (signed in the identity, platform/model/identity.py) and a time
window, so any replica can check a token without a store, a token is worth nothing for another
login or another session (signing out, or signing in again, ends every token of the session it
was made for), and it expires (`CSRF_WINDOW_SECONDS`, accepted for two windows).
Unsafe requests must also come from the platform's own origin: browsers send `Origin` on every
cross-origin POST, so a missing Origin is accepted only when the Referer is ours too; both
missing (non-browser clients such as curl) still need the token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from urllib.parse import urlsplit

CSRF_FIELD = "csrf"
# Uploads streamed to the assignment store as they arrive (never read whole here): their handler
# checks the CSRF token, which must be the form's first field, before it reads the file.
STREAMED_UPLOADS = re.compile(r"^/courses/[^/]+/assignments/[^/]+(/students/[^/]+)?/feedback$")
CSRF_WINDOW_SECONDS = 4 * 3600
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# No inline script or style: everything comes from /static/ on our own origin (no CDN).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def _csrf_mac(secret: str, login: str, session: str, window: int) -> str:
    message = f"userland-web-csrf-v2\n{login}\n{session}\n{window}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()[:40]


def csrf_token(secret: str, login: str, session: str, now: float | None = None) -> str:
    """A token for `login`'s forms in the gateway session `session` (the identity's session id)."""
    window = int((time.time() if now is None else now) // CSRF_WINDOW_SECONDS)
    return f"{window}.{_csrf_mac(secret, login, session, window)}"


def csrf_valid(token: str, secret: str, login: str, session: str, now: float | None = None) -> bool:
    """True for a token made for `login` and `session` in this window or the previous one;
    never without a session id."""
    window_text, _, mac = token.partition(".")
    if not session or not window_text.isdigit() or not mac:
        return False
    window = int(window_text)
    current = int((time.time() if now is None else now) // CSRF_WINDOW_SECONDS)
    if window not in (current, current - 1):
        return False
    return hmac.compare_digest(mac, _csrf_mac(secret, login, session, window))


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL, lowercased; '' when it has none."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return ""
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def same_origin_request(origin: str | None, referer: str | None, public_origin: str) -> bool:
    """Whether an unsafe request comes from the platform's own pages (see module docstring)."""
    if origin is not None and origin != "null":
        return origin.lower() == public_origin
    if origin == "null":
        return False  # sandboxed frames, file: pages, some cross-origin redirects
    if referer:
        return origin_of(referer) == public_origin
    return True
