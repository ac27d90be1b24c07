"""Pending logins: OAuth `state`, PKCE verifier and next-URL, in Redis for 10 minutes.

`begin()` makes a random `state` and PKCE verifier and a browser nonce; Redis keeps the
verifier, the next-URL and a hash of the nonce under a hash of the state. The nonce goes into
a short-lived cookie, so a callback only completes in the browser that started the login
(no login CSRF: a victim cannot be made to finish an attacker's login). `finish()` takes the
record with GETDEL, so each state works once.
The development login uses the same records for its form's CSRF protection.

Anonymous clients create these records, so they are kept small (a next-URL over
`MAX_NEXT_URL` characters is replaced by `/`) and `LoginRateLimiter` caps how many one client
address starts per minute. Sessions never compete with them for memory: Redis runs with
`maxmemory-policy noeviction` (deploy/redis.yaml), so a full Redis refuses new writes (a 503
for new logins) instead of evicting a signed-in student's session.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio
import redis.exceptions
from authlib.common.security import generate_token

from userland.platform.clients.sessions import store_error
from userland.platform.model.keyspace import digest, login_rate_key, oauth_state_key

STATE_TTL_SECONDS = 600
_STATE_LENGTH = 43
# RFC 7636: a verifier is 43-128 characters of [A-Za-z0-9-._~]; generate_token's are letters
# and digits.
_VERIFIER_LENGTH = 64
# The longest next-URL kept with a pending login (redirects.safe_next allows as much).
MAX_NEXT_URL = 2048


@dataclass(frozen=True)
class PendingLogin:
    state: str
    verifier: str
    next_url: str
    nonce: str  # the browser's half, set as the nonce cookie (auth/rules/origins.py `CookieNames.nonce`)
    # "Link your GitHub account" (auth/account_link.py): the login to link to and the digest of
    # the session cookie that asked; empty for a sign-in.
    link: str = ""
    link_session: str = ""


class StateMismatch(Exception):
    """The state is unknown, expired, already used, or was started in another browser."""


class OAuthStateStore:
    def __init__(self, client: redis.asyncio.Redis, ttl: int = STATE_TTL_SECONDS) -> None:
        self._redis = client
        self.ttl = ttl

    async def begin(self, next_url: str, *, link: str = "", link_session: str = "") -> PendingLogin:
        if len(next_url) > MAX_NEXT_URL:
            next_url = "/"
        pending = PendingLogin(state=generate_token(_STATE_LENGTH),
                               verifier=generate_token(_VERIFIER_LENGTH),
                               next_url=next_url, nonce=generate_token(_STATE_LENGTH),
                               link=link, link_session=link_session)
        record = {"verifier": pending.verifier, "next": next_url, "nonce": digest(pending.nonce),
                  **({"link": link, "link_session": link_session} if link else {})}
        try:
            await self._redis.set(oauth_state_key(pending.state), json.dumps(record),
                                  ex=self.ttl)
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return pending

    async def finish(self, state: str, nonce: str | None) -> PendingLogin:
        """The pending login of `state`, removed from Redis; StateMismatch when there is none
        or when `nonce` (from the browser's cookie) is not the one it was started with."""
        if not state or len(state) > 256:
            raise StateMismatch("malformed state")
        try:
            raw = await self._redis.getdel(oauth_state_key(state))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        if raw is None:
            raise StateMismatch("unknown, expired or used state")
        try:
            record = json.loads(raw)
            verifier, next_url, nonce_hash = record["verifier"], record["next"], record["nonce"]
        except (ValueError, TypeError, KeyError):
            raise StateMismatch("malformed state record") from None
        if not nonce or not hmac.compare_digest(digest(nonce), str(nonce_hash)):
            raise StateMismatch("state was started in another browser")
        return PendingLogin(state=state, verifier=str(verifier), next_url=str(next_url), nonce=nonce,
                            link=str(record.get("link") or ""),
                            link_session=str(record.get("link_session") or ""))


# Addresses this process counts locally per minute before it starts afresh (memory bound).
LOCAL_COUNT_ADDRESSES = 100_000


class LoginRateLimiter:
    """How many logins one client address may start per minute, counted in Redis (so every
    gateway replica shares the count): a fixed one-minute window per address.

    This process also counts what it sent to Redis: once it alone has counted `per_minute` for an
    address in this minute, Redis's count (every replica's) is at least that, so further starts
    are refused without asking Redis. A flood of login starts from one address costs at most
    `per_minute` Redis round trips a minute per process, and is answered 429 at once."""

    def __init__(self, client: redis.asyncio.Redis, per_minute: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._redis = client
        self.per_minute = per_minute
        self._clock = clock
        self._window = -1
        self._local: dict[str, int] = {}

    async def allow(self, address: str) -> bool:
        """Count one more login from `address`; False when it is over the limit.
        Raises SessionStoreUnavailable when Redis cannot count (the caller fails closed), or
        SessionStoreBusy (429)."""
        window = int(self._clock() // 60)
        address = address[:64]
        if window != self._window or len(self._local) >= LOCAL_COUNT_ADDRESSES:
            self._window, self._local = window, {}
        counted = self._local.get(address, 0)
        if counted >= self.per_minute:
            return False
        self._local[address] = counted + 1
        key = login_rate_key(window, address)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.incr(key)
                pipe.expire(key, 120)
                count, _ = await pipe.execute()
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return int(count) <= self.per_minute
