"""Sessions of student origins, the handoff codes that create them, and sign-out chains (Redis).

A student origin (`alice.ide.example.edu`) never sees the platform's cookie. It gets its own
session through a handoff, the way JupyterHub's single-user servers are OAuth clients of the hub:
- `issue_code`: the platform, for a signed-in student who owns the origin, stores a random
  single-use code for 60 s, bound to the platform session (by its store key) and the origin;
  at most HANDOFF_CODES_PER_MINUTE a minute per platform session (TooManyHandoffs beyond), so
  a student asking for codes in a loop without redeeming them cannot pile records up either;
- `redeem`: the gateway on that origin takes the code with GETDEL (so it works once), checks the
  origin, and stores an origin session `{parent, origin, csrf}` under a hash of a new random
  cookie id; the parent's index (a hash, origin -> key; platform/model/keyspace.py) records it for
  sign-out. One origin session per platform session and origin: a new handoff replaces the
  previous one, so a student repeating handoffs in a loop cannot pile records up in Redis
  (which runs with `noeviction`: a full Redis refuses every new sign-in);
- `load`: one Lua script reads the origin session *and* its parent platform session in one round
  trip, so an origin session is valid only while the platform session that made it is: a
  sign-out (or expiry) of the platform session ends every origin at once, whatever else fails.
A member of staff let into a student's environment by a help grant (platform/model/grants.py) gets an
origin session on the student's origin bound to that grant: the code carries the grant's key,
`redeem` refuses it once the grant has ended and adds the new session to the grant's set (which
ending the grant announces on `INVALIDATION_CHANNEL`), and `load` reads the grant in the same
round trip: a session whose grant has ended loads as `grant_ended`, never as access.
`end_all` deletes a platform session's origin sessions (sign-out deletes them server side too)
and announces each on `INVALIDATION_CHANNEL` for the gateways' lookup caches.
A sign-out chain records the origins a signed-out browser visits to clear their data, so only
a real sign-out (never a link from elsewhere) makes an origin send Clear-Site-Data.
Redis failures become SessionStoreUnavailable (the gateway answers 503: fail closed), or
SessionStoreBusy when this process's pool is what is missing (429; platform/clients/redis_pool.py).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

import redis.asyncio
import redis.exceptions

from userland.platform.clients.sessions import Session, decode_session, store_error
from userland.platform.model.grants import Grant, decode_grant
from userland.platform.model.keyspace import (
    GRANT_PREFIX,
    INVALIDATION_CHANNEL,
    ORIGIN_SESSION_PREFIX,
    SESSION_PREFIX,
    digest,
    grant_key,
    grant_sessions_key,
    handoff_count_key,
    handoff_key,
    origin_index_key,
    origin_session_key,
    session_key_of,
    signout_key,
)

HANDOFF_TTL_SECONDS = 60
# Codes one platform session may be given per minute. A browser restoring a window of tabs asks
# for one per tab; a student opening environments by hand, a few. The count lives as long as a
# code (HANDOFF_TTL_SECONDS), so at most twice this many codes of a session are ever live.
HANDOFF_CODES_PER_MINUTE = 30
SIGNOUT_TTL_SECONDS = 300
_MAX_TOKEN = 128

# KEYS[1]: the origin session. Returns {origin session, parent session} or false; for a session
# bound to a help grant, a third element: the live grant, or "" once it has ended. The parent's
# and the grant's keys must be keys of their kind: a record can never make the script read
# another kind of key.
_LOAD = f"""
local raw = redis.call('GET', KEYS[1])
if not raw then return false end
local ok, record = pcall(cjson.decode, raw)
if not ok or type(record) ~= 'table' or type(record.parent) ~= 'string' then return false end
if string.sub(record.parent, 1, {len(SESSION_PREFIX)}) ~= '{SESSION_PREFIX}' then return false end
local parent = redis.call('GET', record.parent)
if not parent then return false end
if record.grant == nil or record.grant == cjson.null then return {{raw, parent}} end
if type(record.grant) ~= 'string' or string.sub(record.grant, 1, {len(GRANT_PREFIX)}) ~= '{GRANT_PREFIX}' then
  return false
end
return {{raw, parent, redis.call('GET', record.grant) or ''}}
"""

# KEYS[1]: the session's code count, KEYS[2]: the new code; ARGV: the code's record, the TTL of
# both, the limit. Returns 1, or false (nothing stored) when the session is over the limit.
_ISSUE = """
local count = redis.call('INCR', KEYS[1])
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if count > tonumber(ARGV[3]) then return false end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
return 1
"""

# KEYS[1]: the parent platform session, KEYS[2]: the new origin session, KEYS[3]: the parent's
# index (origin -> key), and for a staff member's session KEYS[4]: the grant, KEYS[5]: its set of
# sessions; ARGV: the record, its TTL, the origin, the new session's digest. Nothing is written
# when the parent is gone (signed out meanwhile) or the grant has ended; the origin's previous
# session, if any, is deleted.
_REDEEM = f"""
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local grant_ttl = 0
if #KEYS >= 5 then
  grant_ttl = redis.call('PTTL', KEYS[4])
  if grant_ttl <= 0 then return false end
  redis.call('SADD', KEYS[5], ARGV[4])
  redis.call('PEXPIRE', KEYS[5], grant_ttl + 60000)
end
local old = redis.call('HGET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[3], KEYS[2])
redis.call('EXPIRE', KEYS[3], ARGV[2])
if old and old ~= KEYS[2]
   and string.sub(old, 1, {len(ORIGIN_SESSION_PREFIX)}) == '{ORIGIN_SESSION_PREFIX}' then
  redis.call('DEL', old)
end
return 1
"""


def _plausible(token: str | None) -> bool:
    return bool(token) and len(token or "") <= _MAX_TOKEN and (token or "").isascii()


class TooManyHandoffs(Exception):
    """The platform session asked for more handoff codes this minute than a browser would."""


@dataclass(frozen=True)
class OriginSession:
    """A student origin's session: the platform session it came from, bound to one origin (and,
    for a member of staff, to the help grant that let them in)."""

    session: Session
    origin: str
    csrf: str  # this origin's own form token (never the platform session's)
    # Bound to a help grant: the grant while it is live; None once it has ended (`grant_ended`).
    grant_bound: bool = False
    grant: Grant | None = None
    # The bound grant's id, kept once it has ended: the gateway's page says who ended it and when.
    grant_id: str = ""

    @property
    def grant_ended(self) -> bool:
        return self.grant_bound and self.grant is None

    @property
    def login(self) -> str:
        return self.session.login

    @property
    def role(self) -> str:
        return self.session.role

    @property
    def teams(self) -> tuple[str, ...]:
        return self.session.teams


@dataclass(frozen=True)
class SignOut:
    login: str
    origins: tuple[str, ...]


class OriginSessions:
    def __init__(self, client: redis.asyncio.Redis, ttl: int) -> None:
        self._redis = client
        self._ttl = ttl
        self._load = client.register_script(_LOAD)
        self._redeem = client.register_script(_REDEEM)
        self._issue = client.register_script(_ISSUE)

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    # -- handoff

    async def issue_code(self, platform_cookie: str, origin: str, next_path: str,
                         grant: str | None = None) -> str:
        """A new code for `origin` (for a member of staff: bound to the help grant with id
        `grant`); TooManyHandoffs when this session is over its limit."""
        code = secrets.token_urlsafe(32)
        session_digest = digest(platform_cookie)
        record = {"parent": session_key_of(session_digest), "origin": origin, "next": next_path}
        if grant is not None:
            record["grant"] = grant_key(grant)
        stored = await self._call(self._issue(
            keys=[handoff_count_key(session_digest), handoff_key(code)],
            args=[json.dumps(record), HANDOFF_TTL_SECONDS, HANDOFF_CODES_PER_MINUTE]))
        if not stored:
            raise TooManyHandoffs
        return code

    async def redeem(self, code: str | None, origin: str) -> tuple[str, str] | None:
        """(new origin cookie id, next path) for a live code issued for `origin`, else None."""
        if not code or not _plausible(code):
            return None
        raw = await self._call(self._redis.getdel(handoff_key(code)))
        if raw is None:
            return None
        try:
            record = json.loads(raw)
            parent, bound, next_path = str(record["parent"]), str(record["origin"]), str(record["next"])
            grant = record.get("grant")
        except (ValueError, TypeError, KeyError):
            return None
        if bound != origin or not parent.startswith(SESSION_PREFIX):
            return None
        if grant is not None and (not isinstance(grant, str) or not grant.startswith(GRANT_PREFIX)):
            return None
        cookie_id = secrets.token_urlsafe(32)
        cookie_digest = digest(cookie_id)
        key = origin_session_key(cookie_digest)
        fields = {"parent": parent, "origin": origin, "csrf": secrets.token_urlsafe(32)}
        keys = [parent, key, origin_index_key(parent.removeprefix(SESSION_PREFIX))]
        if grant is not None:
            fields["grant"] = grant
            keys += [grant, grant_sessions_key(grant.removeprefix(GRANT_PREFIX))]
        # A replaced session is not announced on the invalidation channel: it is this browser's
        # previous cookie for the origin (the new one replaces it there), and announcing it would
        # cut a WebSocket a second tab opened with it a moment ago. Caches forget it within 1 s.
        done = await self._call(self._redeem(keys=keys,
                                             args=[json.dumps(fields), self._ttl, origin, cookie_digest]))
        if not done:  # signed out meanwhile, or the grant has ended
            return None
        return cookie_id, next_path

    # -- the request path

    async def load(self, cookie_id: str | None) -> OriginSession | None:
        if not cookie_id or not _plausible(cookie_id):
            return None
        found = await self._call(self._load(keys=[origin_session_key(digest(cookie_id))]))
        if not found:
            return None
        try:
            record = json.loads(found[0])
            origin, csrf = str(record["origin"]), str(record["csrf"])
        except (ValueError, TypeError, KeyError):
            return None
        session = decode_session(found[1])
        if session is None:
            return None
        if len(found) < 3:
            return OriginSession(session=session, origin=origin, csrf=csrf)
        grant = decode_grant(found[2] or None)
        if grant is not None and (grant.staff != session.login.lower()
                                  or grant_key(grant.id) != record.get("grant")):
            grant = None  # never someone else's grant: treated as ended
        bound = record.get("grant")
        grant_id = bound.removeprefix(GRANT_PREFIX) if isinstance(bound, str) else ""
        return OriginSession(session=session, origin=origin, csrf=csrf, grant_bound=True, grant=grant,
                             grant_id=grant_id)

    # -- sign-out

    async def end_all(self, platform_cookie: str) -> tuple[str, ...]:
        """Delete every origin session made from this platform session; their origins."""
        origins_of = origin_index_key(digest(platform_cookie))
        index = {self._text(origin): self._text(key)
                 for origin, key in (await self._call(self._redis.hgetall(origins_of))).items()}
        keys = sorted(set(index.values()))
        origins = sorted(index)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(origins_of, *keys)
            for key in keys:
                pipe.publish(INVALIDATION_CHANNEL, key.removeprefix(ORIGIN_SESSION_PREFIX))
            await self._call(pipe.execute())
        return tuple(origins)

    async def start_signout(self, login: str, origins: tuple[str, ...]) -> str:
        chain = secrets.token_urlsafe(24)
        await self._call(self._redis.set(signout_key(chain),
                                         json.dumps({"login": login, "origins": list(origins)}),
                                         ex=SIGNOUT_TTL_SECONDS))
        return chain

    async def signout(self, chain: str | None, *, finish: bool = False) -> SignOut | None:
        """The sign-out chain `chain`, if live; `finish` removes it (its last step)."""
        if not chain or not _plausible(chain):
            return None
        key = signout_key(chain)
        raw = await self._call(self._redis.getdel(key) if finish else self._redis.get(key))
        if raw is None:
            return None
        try:
            record = json.loads(raw)
            return SignOut(login=str(record["login"]), origins=tuple(str(o) for o in record["origins"]))
        except (ValueError, TypeError, KeyError):
            return None
