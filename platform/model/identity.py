"""Signed identity: how the gateway tells an upstream (and the web UI) who the user is.

The contract (also in docs/identity.md), for every request the gateway forwards for a
signed-in user:

    X-User:           <login>                       (lowercase GitHub login)
    X-User-Role:      admin | instructor | student  (audience `web`); for `env`, only with
                      X-User-Owner: the staff member's role in the owner's course
                      (admin | instructor | assistant)
    X-User-Teams:     org/team,org/team             (audience `web` only; may be empty)
    X-User-Session:   <32 hex characters>           (audience `web` only)
    X-User-Owner:     <login>                       (audience `env`, staff only: whose
                      environment this is, when X-User is a member of staff let in by a grant)
    X-User-Signature: t=<unix seconds>,aud=<audience>,v4=<hex HMAC-SHA256>

The HMAC (key `USERLAND_IDENTITY_SECRET`) covers a version tag, the audience, the timestamp,
the login, the role, the sorted teams, the session id and the owner, one per line (v3 had no
owner; v4 came with help grants, docs/identity.md). The audience is `web`
for the web UI and `env` for students' environments, so a signature an environment receives can
never be replayed to the web UI; the timestamp makes a signature short-lived: it is accepted
within `SIGNATURE_SKEW_SECONDS` of the verifier's clock, in the past or in the future.
The session id (`session_id`) names the gateway session the request came with, one way (a
keyed hash): the web UI binds its CSRF tokens to it, so signing out ends every token of that
session. The web UI believes `X-User*` only through `verify_identity`; anything missing,
malformed, stale, for another audience or with a bad MAC is refused.

Clients can never set any of these: the gateway strips every header that looks like an
identity (`is_identity_header`) before it adds its own.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

USER_HEADER = "X-User"
ROLE_HEADER = "X-User-Role"
TEAMS_HEADER = "X-User-Teams"
SESSION_HEADER = "X-User-Session"
OWNER_HEADER = "X-User-Owner"
SIGNATURE_HEADER = "X-User-Signature"

Audience = Literal["web", "env"]
AUDIENCE_WEB: Audience = "web"
AUDIENCE_ENV: Audience = "env"
# Who a signed-in user is to the platform: every session and every signed identity has one.
Role = Literal["admin", "instructor", "student"]
ROLES: tuple[str, ...] = get_args(Role)

# How far a signature's timestamp may be from the verifier's clock, either way. The gateway
# signs each request as it forwards it, so an honest signature is milliseconds old by the
# gateway's clock; the window is the clock skew allowed between the gateway's and the web UI's
# pods (NTP keeps them far closer). Past it, in the past or in the future, a signature is
# refused: a captured one is useless after SIGNATURE_SKEW_SECONDS, and one dated ahead by a
# gateway whose clock runs fast cannot live longer than twice that.
SIGNATURE_SKEW_SECONDS = 30
_VERSION = "userland-identity-v4"
_SIGNATURE_FIELD = "v4"

# Exact names and prefixes of headers a client may try to smuggle an identity in (lowercase,
# `_` as `-`). The gateway strips them all, whatever it sets afterwards.
IDENTITY_HEADERS = frozenset({
    "x-user", "x-forwarded-user", "x-forwarded-email", "x-forwarded-preferred-username",
    "x-forwarded-groups", "remote-user", "x-remote-user", "x-remote-group", "x-email",
})
IDENTITY_PREFIXES = ("x-user-", "x-auth-", "x-webauth-", "x-remote-", "x-forwarded-user-")


@dataclass(frozen=True)
class Identity:
    """Who the gateway says is asking, for which audience."""

    login: str
    role: str = "student"
    teams: tuple[str, ...] = ()
    audience: str = AUDIENCE_WEB
    # The gateway session's id (`session_id`); web only: environments never learn it.
    session: str = ""
    # env only: whose environment this is, when `login` is a member of staff let in by a help
    # grant (platform/model/grants.py); `role` is then their role in the course. Empty for the owner.
    owner: str = ""


def session_id(session_key: str, secret: str) -> str:
    """The id the web UI knows a gateway session by: a keyed hash of the session's own key (the
    SHA-256 of its random cookie id), so it tells nothing about the cookie, differs for every
    session (a new sign-in is a new id) and cannot be made up without `secret`."""
    message = f"userland-session-id\n{session_key}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()[:32]


def _mac(ident: Identity, timestamp: int, secret: str) -> str:
    message = "\n".join((_VERSION, ident.audience, str(timestamp), ident.login, ident.role,
                         ",".join(sorted(ident.teams)), ident.session, ident.owner))
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def sign(ident: Identity, secret: str, now: float | None = None) -> str:
    """The `X-User-Signature` value for `ident` at `now`."""
    timestamp = int(time.time() if now is None else now)
    return f"t={timestamp},aud={ident.audience},{_SIGNATURE_FIELD}={_mac(ident, timestamp, secret)}"


def identity_headers(ident: Identity, secret: str, now: float | None = None) -> list[tuple[str, str]]:
    """The headers the gateway adds for `ident` (role, teams and session only for the web UI;
    owner and role for an environment only when staff are let in by a grant)."""
    headers = [(USER_HEADER, ident.login)]
    if ident.audience == AUDIENCE_WEB:
        headers.append((ROLE_HEADER, ident.role))
        headers.append((TEAMS_HEADER, ",".join(sorted(ident.teams))))
        headers.append((SESSION_HEADER, ident.session))
    elif ident.owner:
        headers.append((OWNER_HEADER, ident.owner))
        headers.append((ROLE_HEADER, ident.role))
    headers.append((SIGNATURE_HEADER, sign(ident, secret, now)))
    return headers


def for_audience(login: str, audience: Audience, role: str = "student",
                 teams: Iterable[str] = (), session: str = "") -> Identity:
    """The identity to sign for `audience`: environments get the login only."""
    if audience == AUDIENCE_ENV:
        return Identity(login=login, role="", teams=(), audience=AUDIENCE_ENV)
    return Identity(login=login, role=role, teams=tuple(sorted(set(teams))), audience=audience,
                    session=session)


def for_staff(login: str, owner: str, course_role: str) -> Identity:
    """What an environment is told of a member of staff let into `owner`'s environment by a help
    grant: their login, the owner, and their role in the course (env audience)."""
    return Identity(login=login, role=course_role, teams=(), audience=AUDIENCE_ENV, owner=owner)


class IdentityRejected(Exception):
    """Why a signed identity was refused; str() is a short reason for logs (never secret)."""


def _parse_signature(value: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in value.split(","):
        key, sep, field_value = part.strip().partition("=")
        if not sep or key in fields:
            raise IdentityRejected("malformed signature")
        fields[key] = field_value
    return fields


def verify_identity(headers: Mapping[str, str], secret: str, *, audience: Audience,
                    now: float | None = None) -> Identity:
    """The identity in `headers` (a case-insensitive mapping), or raise IdentityRejected.
    For the web UI it carries the session id too (refused without one)."""
    if not secret:
        raise IdentityRejected("no identity secret configured")
    login = headers.get(USER_HEADER, "")
    signature = headers.get(SIGNATURE_HEADER, "")
    if not login or not signature:
        raise IdentityRejected("no signed identity")
    fields = _parse_signature(signature)
    if fields.get("aud") != audience:
        raise IdentityRejected("signature for another audience")
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        raise IdentityRejected("malformed signature") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > SIGNATURE_SKEW_SECONDS:
        raise IdentityRejected("stale signature")
    web = audience == AUDIENCE_WEB
    owner = "" if web else headers.get(OWNER_HEADER, "")
    role = headers.get(ROLE_HEADER, "") if web or owner else ""
    teams_text = headers.get(TEAMS_HEADER, "") if web else ""
    teams = tuple(sorted(t for t in teams_text.split(",") if t))
    session = headers.get(SESSION_HEADER, "") if web else ""
    ident = Identity(login=login, role=role, teams=teams, audience=audience, session=session,
                     owner=owner)
    if not hmac.compare_digest(fields.get(_SIGNATURE_FIELD, ""), _mac(ident, timestamp, secret)):
        raise IdentityRejected("bad signature")
    if web and role not in ROLES:
        raise IdentityRejected("unknown role")
    if web and not session:
        raise IdentityRejected("no session id")
    return ident


def is_identity_header(name: str) -> bool:
    """Case-insensitive, with `_` the same as `-` (nginx and others translate one to the other)."""
    key = name.strip().lower().replace("_", "-")
    return key in IDENTITY_HEADERS or key.startswith(IDENTITY_PREFIXES)

