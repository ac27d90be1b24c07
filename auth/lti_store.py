"""What an LTI launch keeps in Redis (platform/model/keyspace.py names each key):

- the pending login of each OIDC `state` (its nonce, registration, target and the hash of the
  browser's secret), single-use (GETDEL) and gone after 10 minutes;
- every nonce an id_token used, until that token expires: a replayed token is refused even
  with a fresh state;
- a checked launch waiting for its browser (a ticket), single-use and gone after 2 minutes;
- which login each LMS user (issuer, sub) is bound to, for good.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio
import redis.exceptions

from userland.platform.clients.sessions import store_error
from userland.platform.model.keyspace import (
    digest,
    login_binding_key,
    lti_assignment_launches_key,
    lti_course_key,
    lti_nonce_key,
    lti_state_key,
    lti_subject_key,
    lti_ticket_key,
)

STATE_TTL_SECONDS = 600
TICKET_TTL_SECONDS = 120
COURSE_TTL_SECONDS = 1800
ASSIGNMENT_LAUNCH_TTL_SECONDS = 86400
_MAX_RECORD = 16 * 1024


@dataclass(frozen=True)
class PendingLaunch:
    """What /lti/login stored for its `state`."""

    nonce: str
    issuer: str
    client_id: str
    target: str
    bind: str  # digest of the browser's secret (cookie or Platform Storage)
    mode: str  # "cookie" or "storage"
    # The login's own parameters, to start it again in a new window when the browser's secret
    # cannot come back (third-party cookies blocked and no Platform Storage).
    params: dict[str, str] = field(default_factory=dict)
    storage_target: str = ""


class NameTaken(Exception):
    """The login an LMS user is bound to now belongs to another account (an admin released it)."""

    def __init__(self, login: str) -> None:
        super().__init__(login)
        self.login = login


# The LMS user's binding and the name's, in one step: the subject keeps its first login for good;
# a name a GitHub account or another LMS user holds is never taken (a name holding both this LMS
# user and a GitHub account is one they linked: auth/account_link.py). Returns the login bound now,
# the subject's earlier login (the caller tries that one), or nil (the name is taken).
_BIND_SUBJECT = """
local bound = redis.call('HGET', KEYS[1], 'login')
if bound and bound ~= ARGV[2] then return bound end
local owner = redis.call('HGET', KEYS[2], 'lti')
if owner and owner ~= ARGV[1] then return false end
if not owner and redis.call('HEXISTS', KEYS[2], 'github_id') == 1 then return false end
if not owner then redis.call('HSET', KEYS[2], 'lti', ARGV[1], 'bound_at', ARGV[3]) end
if not bound then redis.call('HSET', KEYS[1], 'login', ARGV[2], 'bound_at', ARGV[3]) end
return ARGV[2]
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LtiStore:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._redis = client

    async def begin(self, pending: PendingLaunch) -> str:
        """Store `pending` under a new random state; returns the state."""
        state = secrets.token_urlsafe(32)
        try:
            await self._redis.set(lti_state_key(state), json.dumps(asdict(pending)), ex=STATE_TTL_SECONDS)
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return state

    async def finish(self, state: str) -> PendingLaunch | None:
        """The pending login of `state`, removed (None: unknown, expired or used)."""
        if not state or len(state) > 256:
            return None
        try:
            raw = await self._redis.getdel(lti_state_key(state))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        if raw is None or len(raw) > _MAX_RECORD:
            return None
        try:
            data = json.loads(raw)
            return PendingLaunch(**{k: data[k] for k in PendingLaunch.__dataclass_fields__ if k in data})
        except (ValueError, TypeError):
            return None

    async def use_nonce(self, issuer: str, nonce: str, ttl: int) -> bool:
        """Record `nonce` as used; False when it already was (a replay)."""
        try:
            return bool(await self._redis.set(lti_nonce_key(issuer, nonce), "1", nx=True, ex=ttl))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc

    async def issue_ticket(self, payload: dict[str, Any]) -> str:
        ticket = secrets.token_urlsafe(32)
        try:
            await self._redis.set(lti_ticket_key(ticket), json.dumps(payload), ex=TICKET_TTL_SECONDS)
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return ticket

    async def remember_course(self, payload: dict[str, Any]) -> str:
        """A launch's LMS course for the web UI's course linking; the id goes in its URL."""
        launch = secrets.token_urlsafe(24)
        try:
            await self._redis.set(lti_course_key(launch), json.dumps(payload), ex=COURSE_TTL_SECONDS)
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return launch

    async def note_assignment_launch(self, namespace: str, name: str, payload: dict[str, str]) -> None:
        """An Assignment's resource link was launched: the web UI finds its gradebook column."""
        key = lti_assignment_launches_key(namespace)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, name, json.dumps(payload))
                pipe.expire(key, ASSIGNMENT_LAUNCH_TTL_SECONDS)
                await pipe.execute()
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc

    async def redeem_ticket(self, ticket: str) -> dict[str, Any] | None:
        if not ticket or len(ticket) > 256:
            return None
        try:
            raw = await self._redis.getdel(lti_ticket_key(ticket))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        if raw is None:
            return None
        try:
            payload = json.loads(raw)
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None

    async def bound_login(self, subject: str) -> str | None:
        try:
            value = await self._redis.hget(lti_subject_key(subject), "login")  # type: ignore[misc]
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return None if value is None else _text(value)

    async def _try(self, subject: str, login: str) -> str | None:
        try:
            result = await self._redis.eval(_BIND_SUBJECT, 2, lti_subject_key(subject),  # type: ignore[misc]
                                            login_binding_key(login), subject, login, f"{time.time():.3f}")
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return None if result is None else _text(result)

    async def bind(self, subject: str, candidates: Iterable[str]) -> str:
        """The login of the LMS user `subject` (a digest of issuer and sub): the one bound at
        first sight, else the first free candidate, bound now. NameTaken when the bound name
        now belongs to someone else; RuntimeError when no candidate is free (never in practice:
        the last candidate is derived from the subject)."""
        earlier = await self.bound_login(subject)
        if earlier is not None:
            if await self._try(subject, earlier) != earlier:
                raise NameTaken(earlier)
            return earlier
        for login in candidates:
            result = await self._try(subject, login)
            if result == login:
                return login
            if result is not None:  # bound a moment ago by a concurrent launch of the same user
                if await self._try(subject, result) != result:
                    raise NameTaken(result)
                return result
        raise RuntimeError("no free login for an LMS user")


def browser_secret() -> tuple[str, str]:
    """A secret for the browser and its digest for the record."""
    secret = secrets.token_urlsafe(32)
    return secret, digest(secret)
