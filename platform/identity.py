"""Signed identity: how the gateway tells an upstream (and the web UI) who the user is.

The gateway sets `X-User: <login>` and `X-User-Signature: t=<unix time>,v1=<hex HMAC-SHA256>`
over `<login>\n<time>` with the shared `USERLAND_IDENTITY_SECRET`. The web UI trusts `X-User`
only when the signature verifies and is fresh, so a spoofed header fails even where
NetworkPolicies are not enforced.
"""

from __future__ import annotations

import hashlib
import hmac
import time

USER_HEADER = "X-User"
SIGNATURE_HEADER = "X-User-Signature"
# Headers a client may try to smuggle an identity in; the gateway strips them all.
IDENTITY_HEADERS = ("x-user", "x-forwarded-user", "x-forwarded-email", "x-user-signature",
                    "x-forwarded-preferred-username", "x-auth-request-user",
                    "x-auth-request-email", "remote-user")
DEFAULT_MAX_AGE = 300


def _mac(login: str, timestamp: int, secret: str) -> str:
    message = f"{login}\n{timestamp}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_identity(login: str, secret: str, now: float | None = None) -> str:
    timestamp = int(time.time() if now is None else now)
    return f"t={timestamp},v1={_mac(login, timestamp, secret)}"


def verify_identity(login: str, signature: str, secret: str, *,
                    max_age: int = DEFAULT_MAX_AGE, now: float | None = None) -> bool:
    """True when `signature` was made for `login` with `secret` within `max_age` seconds."""
    if not login or not signature or not secret:
        return False
    fields = dict(part.split("=", 1) for part in signature.split(",") if "=" in part)
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > max_age:
        return False
    return hmac.compare_digest(fields.get("v1", ""), _mac(login, timestamp, secret))


def is_identity_header(name: str) -> bool:
    """Case-insensitive, with `_` the same as `-` (nginx and others translate one to the other)."""
    return name.lower().replace("_", "-") in IDENTITY_HEADERS
