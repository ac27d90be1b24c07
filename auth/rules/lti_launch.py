"""Every id_token check of an LTI 1.3 launch (LTI Core 1.3 §5.1.3, 1EdTech Security Framework
§5.1.3), as plain functions: the token, the platform's keys, the registration and what the
login stored in, a `Launch` or a `LaunchRefused` out. No I/O: the keys are fetched and the
nonce remembered by auth/lti.py.

Order: the signature first (RS256 only, a key of the platform's JWKS by `kid`; `alg: none`,
HS256 keyed with the public key and any other algorithm are refused before a claim is read),
then `iss`, `aud`/`azp`, `exp`/`iat`, `nonce` (the login's), the deployment, the message type,
the version, `target_link_uri` (the login's, on this platform), the subject and the message's
own required claims. Each refusal carries a reason (for logs and metrics) and a sentence for
the person launching.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from jwt.exceptions import InvalidTokenError, PyJWKError

from userland.platform.model.lti import LtiRegistration

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
MESSAGE_TYPE = CLAIM + "message_type"
VERSION = CLAIM + "version"
DEPLOYMENT_ID = CLAIM + "deployment_id"
TARGET_LINK_URI = CLAIM + "target_link_uri"
RESOURCE_LINK = CLAIM + "resource_link"
ROLES = CLAIM + "roles"
CONTEXT = CLAIM + "context"
CUSTOM = CLAIM + "custom"
DEEP_LINKING_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"

RESOURCE_LINK_REQUEST = "LtiResourceLinkRequest"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"
MESSAGE_TYPES = (RESOURCE_LINK_REQUEST, DEEP_LINKING_REQUEST)
LTI_VERSION = "1.3.0"
ALGORITHM = "RS256"
# Clock skew allowed between the platform and us, and how old a token's `iat` may be.
LEEWAY_SECONDS = 60
MAX_AGE_SECONDS = 3600
MAX_TOKEN_CHARS = 64 * 1024
MAX_CLAIM_CHARS = 255


class LaunchRefused(Exception):
    """A launch that must not sign anyone in. `reason`: a short word for logs and metrics;
    `message`: what the person launching reads."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.message = message


_TRY_AGAIN = "Please open the link in your course again."


@dataclass(frozen=True)
class Launch:
    """A checked launch: who, from where, as what."""

    issuer: str
    client_id: str
    deployment_id: str
    subject: str
    message_type: str
    target_link_uri: str
    roles: tuple[str, ...]
    context_id: str
    context_title: str
    resource_link_id: str
    claims: Mapping[str, Any]

    @property
    def deep_linking(self) -> bool:
        return self.message_type == DEEP_LINKING_REQUEST


def unverified_claims(token: str) -> dict[str, Any]:
    """The token's claims before any check: only to find which registration to check it with
    (`iss`, `aud`); never trusted for anything else."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise LaunchRefused("malformed", "The launch carried no usable id_token. " + _TRY_AGAIN)
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except InvalidTokenError:
        raise LaunchRefused("malformed", "The launch carried no usable id_token. " + _TRY_AGAIN) from None
    if not isinstance(claims, dict):
        raise LaunchRefused("malformed", "The launch carried no usable id_token. " + _TRY_AGAIN)
    return claims


def token_kid(token: str) -> str | None:
    """The `kid` of the token's header (which key set entry to look for), None when none or unreadable."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise LaunchRefused("malformed", "The launch carried no usable id_token. " + _TRY_AGAIN)
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except InvalidTokenError:
        raise LaunchRefused("malformed", "The launch carried no usable id_token. " + _TRY_AGAIN) from None
    return kid if isinstance(kid, str) else None


def audiences(claims: Mapping[str, Any]) -> tuple[str, ...]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return (aud,)
    if isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        return tuple(aud)
    return ()


def key_for(token: str, jwks: Mapping[str, Any]) -> Any:
    """The public key of the platform's JWKS that signed `token` (by `kid`; a JWKS of one key
    serves a token without one). Raises LaunchRefused for any algorithm but RS256."""
    try:
        header = jwt.get_unverified_header(token)
    except InvalidTokenError:
        raise LaunchRefused("malformed", "The launch carried no usable id_token. " + _TRY_AGAIN) from None
    if header.get("alg") != ALGORITHM:
        raise LaunchRefused(
            "algorithm", "The launch was not signed the way LTI 1.3 requires (RS256), so it was refused."
        )
    keys = (
        [k for k in jwks.get("keys", []) if isinstance(k, dict)] if isinstance(jwks.get("keys"), list) else []
    )
    kid = header.get("kid")
    if kid is not None:
        keys = [k for k in keys if k.get("kid") == kid]
    if len(keys) != 1:
        raise LaunchRefused(
            "unknown_key",
            "The launch was signed with a key your LMS does not publish, "
            "so it was refused. If this keeps happening, tell your LMS admin.",
        )
    if keys[0].get("kty") != "RSA" or keys[0].get("alg", ALGORITHM) != ALGORITHM:
        raise LaunchRefused("unknown_key", "Your LMS's key is not an RS256 key, so the launch was refused.")
    try:
        return jwt.PyJWK(keys[0], algorithm=ALGORITHM).key
    except PyJWKError:
        raise LaunchRefused("unknown_key", "Your LMS published a key Userland cannot read.") from None


def verify_signature(token: str, jwks: Mapping[str, Any]) -> dict[str, Any]:
    """The claims of `token` once its RS256 signature is checked against `jwks`; no claim is
    checked here (check_claims does, with its own clock)."""
    key = key_for(token, jwks)
    try:
        claims = jwt.decode(
            token,
            key=key,
            algorithms=[ALGORITHM],
            options={
                "verify_aud": False,
                "verify_iss": False,
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except InvalidTokenError:
        raise LaunchRefused(
            "signature", "The launch's signature is not your LMS's, so it was refused."
        ) from None
    return dict(claims)


def _text(claims: Mapping[str, Any], key: str) -> str:
    value = claims.get(key)
    return value if isinstance(value, str) and len(value) <= MAX_CLAIM_CHARS else ""


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(claims: Mapping[str, Any], key: str) -> float | None:
    value = claims.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def check_claims(
    claims: Mapping[str, Any],
    registration: LtiRegistration,
    *,
    nonce: str,
    target_link_uri: str,
    platform_origin: str,
    now: float | None = None,
) -> Launch:
    """The launch of signature-checked `claims`, or LaunchRefused. `nonce` and
    `target_link_uri`: what the login that this launch answers stored."""
    now = time.time() if now is None else now
    if claims.get("iss") != registration.issuer:
        raise LaunchRefused("issuer", "The launch came from an LMS that is not registered here.")
    auds = audiences(claims)
    if registration.client_id not in auds:
        raise LaunchRefused("audience", "The launch was meant for another tool, so it was refused.")
    azp = claims.get("azp")
    if (len(auds) > 1 or azp is not None) and azp != registration.client_id:
        raise LaunchRefused("audience", "The launch was meant for another tool, so it was refused.")
    exp, iat = _number(claims, "exp"), _number(claims, "iat")
    if exp is None or iat is None:
        raise LaunchRefused("expired", "The launch had no expiry. " + _TRY_AGAIN)
    if exp < now - LEEWAY_SECONDS:
        raise LaunchRefused("expired", "The launch has expired. " + _TRY_AGAIN)
    if iat > now + LEEWAY_SECONDS or iat < now - MAX_AGE_SECONDS:
        raise LaunchRefused("expired", "The launch's time is not now (check the LMS's clock). " + _TRY_AGAIN)
    token_nonce = claims.get("nonce")
    if not isinstance(token_nonce, str) or not nonce or not hmac.compare_digest(token_nonce, nonce):
        raise LaunchRefused("nonce", "This launch does not answer the sign-in it claims to. " + _TRY_AGAIN)
    deployment = _text(claims, DEPLOYMENT_ID)
    if not deployment or not registration.knows_deployment(deployment):
        raise LaunchRefused(
            "deployment",
            "This deployment of Userland in your LMS is not registered "
            "here. Ask your LMS admin to add its deployment id to the registration.",
        )
    message_type = claims.get(MESSAGE_TYPE)
    if message_type not in MESSAGE_TYPES:
        raise LaunchRefused("message_type", "Userland cannot open this kind of LTI message.")
    if claims.get(VERSION) != LTI_VERSION:
        raise LaunchRefused("version", "Userland speaks LTI 1.3.0; this launch was another version.")
    target = _text(claims, TARGET_LINK_URI) if len(str(claims.get(TARGET_LINK_URI))) <= 2048 else ""
    if not target or target != target_link_uri or not same_origin(target, platform_origin):
        raise LaunchRefused("target", "This launch points somewhere other than this site, so it was refused.")
    subject = _text(claims, "sub")
    if not subject:
        raise LaunchRefused(
            "subject",
            "Your LMS did not say who you are (an anonymous launch): "
            "Userland needs to know whose environment to open.",
        )
    roles = claims.get(ROLES)
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise LaunchRefused("roles", "The launch did not list your roles in the course.")
    context = _mapping(claims.get(CONTEXT))
    link = _mapping(claims.get(RESOURCE_LINK))
    resource_link_id = _text(link, "id")
    if message_type == RESOURCE_LINK_REQUEST and not resource_link_id:
        raise LaunchRefused("resource_link", "The launch did not name the link it came from.")
    if message_type == DEEP_LINKING_REQUEST and not isinstance(claims.get(DEEP_LINKING_SETTINGS), dict):
        raise LaunchRefused("deep_linking", "The content selection launch had no settings.")
    return Launch(
        issuer=registration.issuer,
        client_id=registration.client_id,
        deployment_id=deployment,
        subject=subject,
        message_type=str(message_type),
        target_link_uri=target,
        roles=tuple(roles[:50]),
        context_id=_text(context, "id"),
        context_title=_text(context, "title"),
        resource_link_id=resource_link_id,
        claims=dict(claims),
    )


def same_origin(url: str, origin: str) -> bool:
    """Whether `url` is on `origin` (scheme://host[:port]) exactly."""
    return url == origin or url.startswith(origin.rstrip("/") + "/")


def seconds_to_remember_nonce(claims: Mapping[str, Any], now: float | None = None) -> int:
    """How long a used nonce must be remembered: until the token could no longer be accepted."""
    now = time.time() if now is None else now
    exp = _number(claims, "exp") or now
    return max(60, min(int(exp - now + LEEWAY_SECONDS) + 1, MAX_AGE_SECONDS + LEEWAY_SECONDS))


def jwks_digest(jwks: Mapping[str, Any]) -> str:
    """A short fingerprint of a key set, for logs (which keys were tried)."""
    kids = sorted(str(k.get("kid", "?")) for k in jwks.get("keys", []) if isinstance(k, dict))
    return json.dumps(kids)[:200]
