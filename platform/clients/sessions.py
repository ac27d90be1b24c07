"""Session store: the session cookie is only a ticket, the store holds the session.

The cookie carries a random 256-bit id (`secrets.token_urlsafe(32)`); the store keeps the
session under the SHA-256 of the id (platform/model/keyspace.py `session_key`), so a copy of the
store never yields a usable cookie. One interface (`SessionStore`) with two implementations,
both checked by one conformance suite: `RedisSessionStore` (deployed) and `MemorySessionStore`
(unit tests and the local setup). A store that cannot be reached raises `SessionStoreUnavailable`, which the
gateway maps to a 503: it never lets a request through unauthenticated. A store this process
cannot get a connection to in time (its own pool busy, platform/clients/redis_pool.py) raises
`SessionStoreBusy` instead: a 429 for that request, never "Redis is down".
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol, cast

import redis.asyncio
import redis.exceptions

from userland.platform.clients.redis_pool import PoolExhausted
from userland.platform.clients.redis_pool import connect_redis as connect_redis
from userland.platform.model.identity import ROLES, Role
from userland.platform.model.keyspace import INVALIDATION_CHANNEL, digest, session_key, session_key_of

# token_urlsafe(32) gives 43 characters; anything far from that is not one of ours.
_COOKIE_ID_MAX = 128


@dataclass(frozen=True)
class Session:
    login: str
    github_id: int
    role: Role
    csrf: str
    created: float
    name: str = ""
    avatar_url: str = ""
    # GitHub teams as lowercase `org/slug`, kept when team rules need them (signed to the web UI).
    teams: tuple[str, ...] = ()


class SessionStoreUnavailable(Exception):
    """The store (Redis) cannot be reached; callers must fail closed (503)."""


class SessionStoreBusy(Exception):
    """The store is there, but this process could not get (its client's share of) a connection
    to it in time: answer this request 429 and try again; Redis is not down (nothing else
    changes, the session cache keeps serving)."""


def store_error(exc: redis.exceptions.RedisError) -> Exception:
    """What a Redis failure means to the store's callers (raise it `from exc`)."""
    if isinstance(exc, PoolExhausted):
        return SessionStoreBusy(str(exc))
    return SessionStoreUnavailable(type(exc).__name__)


class SessionStore(Protocol):
    async def save(self, session: Session) -> str:
        """Store `session` under a new random id and return that id (the cookie value)."""
        ...

    async def load(self, cookie_id: str) -> Session | None:
        """The live session for a cookie id, or None (unknown, expired or malformed)."""
        ...

    async def clear(self, cookie_id: str) -> None:
        """Forget the session of a cookie id; unknown ids are fine."""
        ...


def new_cookie_id() -> str:
    return secrets.token_urlsafe(32)


def _plausible(cookie_id: str) -> bool:
    return 0 < len(cookie_id) <= _COOKIE_ID_MAX and cookie_id.isascii()


def encode_session(session: Session) -> str:
    return json.dumps(asdict(session), separators=(",", ":"))


def decode_session(raw: str | bytes) -> Session | None:
    """The session in `raw`, or None when it is not a well-formed session."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("role") not in ROLES:
            return None
        session = Session(
            login=str(data["login"]), github_id=int(data["github_id"]),
            role=cast(Role, data["role"]), csrf=str(data["csrf"]), created=float(data["created"]),
            name=str(data.get("name") or ""), avatar_url=str(data.get("avatar_url") or ""),
            teams=tuple(str(team) for team in data.get("teams") or ()),
        )
    except (ValueError, TypeError, KeyError):
        return None
    return session if session.login and session.csrf else None


class RedisSessionStore:
    """Sessions in Redis with a TTL; every Redis failure becomes SessionStoreUnavailable."""

    def __init__(self, client: redis.asyncio.Redis, ttl: int) -> None:
        if ttl <= 0:
            raise ValueError("session ttl must be positive")
        self._redis = client
        self._ttl = ttl

    async def save(self, session: Session) -> str:
        cookie_id = new_cookie_id()
        try:
            await self._redis.set(session_key(cookie_id), encode_session(session), ex=self._ttl)
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return cookie_id

    async def load(self, cookie_id: str) -> Session | None:
        if not _plausible(cookie_id):
            return None
        try:
            raw = await self._redis.get(session_key(cookie_id))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return None if raw is None else decode_session(raw)

    async def clear(self, cookie_id: str) -> None:
        if not _plausible(cookie_id):
            return
        cookie_digest = digest(cookie_id)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(session_key_of(cookie_digest))
                # Every gateway process drops it from its short-lived cache at once.
                pipe.publish(INVALIDATION_CHANNEL, cookie_digest)
                await pipe.execute()
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc


class MemorySessionStore:
    """In-process sessions with the same keys and expiry rules (tests, local setup).

    `available` can be set to False to make it behave as an unreachable store.
    """

    def __init__(self, ttl: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0:
            raise ValueError("session ttl must be positive")
        self._ttl = ttl
        self._clock = clock
        self._items: dict[str, tuple[float, str]] = {}
        self.available = True

    def _check(self) -> None:
        if not self.available:
            raise SessionStoreUnavailable("memory store marked unavailable")

    async def save(self, session: Session) -> str:
        self._check()
        cookie_id = new_cookie_id()
        self._items[session_key(cookie_id)] = (self._clock() + self._ttl, encode_session(session))
        return cookie_id

    async def load(self, cookie_id: str) -> Session | None:
        self._check()
        if not _plausible(cookie_id):
            return None
        key = session_key(cookie_id)
        item = self._items.get(key)
        if item is None:
            return None
        expires, raw = item
        if self._clock() >= expires:
            del self._items[key]
            return None
        return decode_session(raw)

    async def clear(self, cookie_id: str) -> None:
        self._check()
        if _plausible(cookie_id):
            self._items.pop(session_key(cookie_id), None)
