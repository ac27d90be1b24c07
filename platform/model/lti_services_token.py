"""The tool's OAuth2 client-credentials token for LTI Advantage services. Pure, no I/O.

LTI Advantage services (Names and Role Provisioning, Assignment and Grade) take a bearer token
the tool gets from the platform's token endpoint (IMS Security Framework 1.0, section 4.1;
RFC 6749 section 4.4 with the RFC 7523 JWT client assertion):

    POST <token URL>  (application/x-www-form-urlencoded)
        grant_type=client_credentials
        client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer
        client_assertion=<RS256 JWT: iss = sub = client id, aud = token URL, iat, exp, jti>
        scope=<the scopes this call needs, space separated>

This module builds that form, reads the answer (a JSON object with `access_token`,
`token_type: bearer`, `expires_in`, maybe `scope`) into an `AccessToken` or a `TokenError`
whose words an admin can act on, and keeps tokens in a `TokenCache` until shortly before they
expire. A token is asked for exactly the scopes a call needs, and cached under those scopes,
the client id and the token URL: it is never reused for another registration or scope set.
The token's value never appears in a repr, a message or an error.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from userland.platform.model.lti_services_keys import ToolKey, sign

SCOPE_MEMBERSHIP = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
SCOPE_LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCOPE_LINEITEM_READONLY = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly"
SCOPE_RESULT_READONLY = "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly"
SCOPE_SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
KNOWN_SCOPES = frozenset(
    {SCOPE_MEMBERSHIP, SCOPE_LINEITEM, SCOPE_LINEITEM_READONLY, SCOPE_RESULT_READONLY, SCOPE_SCORE}
)

GRANT_TYPE = "client_credentials"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
# The assertion is used at once; five minutes covers clock skew between tool and platform.
ASSERTION_LIFETIME_SECONDS = 300
# A token is dropped this long before the platform says it expires (at most a quarter of its
# life, so a platform handing out 60-second tokens still gets them reused).
REFRESH_MARGIN_SECONDS = 60.0
# A token endpoint answer larger than this is not a token (the client reads no more).
MAX_TOKEN_RESPONSE_BYTES = 65_536
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


class TokenError(Exception):
    """The tool got no usable token. str() is a sentence an admin can act on; no secret in it."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable  # a timeout or a 5xx may pass; a refusal will not


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, what: str) -> str:
    """`url` if credentials may be sent there: https, or plain http to this machine only.

    A bearer token or a client assertion sent over plain http to another host could be read on
    the way; a platform on loopback (tests, `make run`) is the one exception.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        parts, host = None, ""
    if parts is None or not host or parts.scheme not in ("https", "http") or parts.username or parts.password:
        raise ValueError(f"{what} is not an http(s) URL: {_said(url)!r}")
    if parts.scheme == "http" and not _loopback(host):
        raise ValueError(f"{what} must use https (plain http only for this machine): {_said(url)!r}")
    return url


@dataclass(frozen=True)
class ServiceCredentials:
    """What the tool needs to get a token from one registration's platform."""

    client_id: str
    token_url: str
    key: ToolKey
    # The `aud` of the client assertion: the token URL unless the platform names another
    # (Brightspace documents its own audience value).
    audience: str = ""

    def __post_init__(self) -> None:
        if not self.client_id:
            raise ValueError("the registration has no client id")
        check_url(self.token_url, "the registration's token URL")


@dataclass(frozen=True)
class AccessToken:
    value: str = field(repr=False)
    scopes: frozenset[str]
    expires_at: float  # seconds since the epoch, by the tool's clock

    def fresh(self, now: float) -> bool:
        return now < self.expires_at


CacheKey = tuple[str, str, frozenset[str]]  # token URL, client id, scopes asked


def cache_key(credentials: ServiceCredentials, scopes: Iterable[str]) -> CacheKey:
    return (credentials.token_url, credentials.client_id, frozenset(scopes))


def check_scopes(scopes: Iterable[str]) -> frozenset[str]:
    asked = frozenset(scopes)
    if not asked:
        raise ValueError("a token needs at least one scope")
    unknown = sorted(asked - KNOWN_SCOPES)
    if unknown:
        raise ValueError(f"not an LTI Advantage service scope: {', '.join(unknown)}")
    return asked


def client_assertion(credentials: ServiceCredentials, *, now: float, jti: str) -> str:
    """The signed JWT that authenticates the tool to the token endpoint (RFC 7523)."""
    issued = int(now)
    return sign(
        {
            "iss": credentials.client_id,
            "sub": credentials.client_id,
            "aud": credentials.audience or credentials.token_url,
            "iat": issued,
            "exp": issued + ASSERTION_LIFETIME_SECONDS,
            "jti": jti,
        },
        credentials.key,
    )


def token_request_form(
    credentials: ServiceCredentials, scopes: Iterable[str], *, now: float, jti: str
) -> dict[str, str]:
    asked = check_scopes(scopes)
    return {
        "grant_type": GRANT_TYPE,
        "client_assertion_type": ASSERTION_TYPE,
        "client_assertion": client_assertion(credentials, now=now, jti=jti),
        "scope": " ".join(sorted(asked)),
    }


def _said(text: Any, limit: int = 200) -> str:
    """A remote string fit for a message: one line, printable, short."""
    return _CONTROL.sub(" ", str(text)).strip()[:limit]


def parse_token_response(
    status: int, body: bytes, *, asked: frozenset[str], now: float, where: str
) -> AccessToken:
    """The token in a token endpoint's answer, or a TokenError saying what was wrong with it.

    `where` names the endpoint in messages (its URL, which is no secret).
    """
    try:
        document = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        document = None
    if status >= 500 or status == 429:
        raise TokenError(
            f"The LMS's token endpoint ({where}) answered HTTP {status}: it may be down "
            "or busy; Userland will try again.",
            retryable=True,
        )
    if status >= 400:
        error = document.get("error") if isinstance(document, dict) else None
        detail = document.get("error_description") if isinstance(document, dict) else None
        said = f": {_said(error)}" + (f" ({_said(detail)})" if detail else "") if error else ""
        raise TokenError(
            f"The LMS's token endpoint ({where}) refused Userland's credentials with HTTP "
            f"{status}{said}. Check the registration's client id, and that the LMS has "
            "Userland's public key (its JWKS URL).",
            retryable=False,
        )
    if not isinstance(document, dict):
        raise TokenError(
            f"The LMS's token endpoint ({where}) answered HTTP {status} with something that "
            "is not a token (not a JSON object). Check the registration's token URL.",
            retryable=True,
        )
    value = document.get("access_token")
    if not isinstance(value, str) or not value or len(value) > 16_384 or _CONTROL.search(value):
        raise TokenError(
            f"The LMS's token endpoint ({where}) answered without a usable access_token. "
            "Check the registration's token URL.",
            retryable=True,
        )
    token_type = document.get("token_type")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise TokenError(
            f"The LMS's token endpoint ({where}) gave a token of type {_said(token_type)!r}, "
            "not a bearer token.",
            retryable=False,
        )
    lifetime = document.get("expires_in", 3600)
    if isinstance(lifetime, str) and lifetime.isdigit():
        lifetime = int(lifetime)
    if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)) or lifetime <= 0:
        raise TokenError(
            f"The LMS's token endpoint ({where}) gave a token with no usable lifetime "
            f"(expires_in {_said(document.get('expires_in'))!r}).",
            retryable=True,
        )
    granted = asked
    if isinstance(document.get("scope"), str):
        granted = frozenset(document["scope"].split())
        missing = sorted(asked - granted)
        if missing:
            raise TokenError(
                f"The LMS did not grant Userland the scope(s) {', '.join(missing)}. Enable "
                "the matching LTI Advantage service for Userland in the LMS's tool settings.",
                retryable=False,
            )
    margin = min(REFRESH_MARGIN_SECONDS, float(lifetime) / 4)
    return AccessToken(value=value, scopes=granted, expires_at=now + float(lifetime) - margin)


class TokenCache:
    """Tokens by (token URL, client id, scopes asked), each until shortly before it expires."""

    def __init__(self) -> None:
        self._tokens: dict[CacheKey, AccessToken] = {}

    def get(self, key: CacheKey, now: float) -> AccessToken | None:
        token = self._tokens.get(key)
        if token is None:
            return None
        if not token.fresh(now):
            del self._tokens[key]
            return None
        return token

    def put(self, key: CacheKey, token: AccessToken) -> None:
        self._tokens[key] = token

    def forget(self, key: CacheKey) -> None:
        """Drop a token the platform no longer accepts (a service answered 401)."""
        self._tokens.pop(key, None)

    def __len__(self) -> int:
        return len(self._tokens)
