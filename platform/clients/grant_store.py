"""Grants in Redis (what they are: platform/model/grants.py), shared by every web UI and gateway replica.

Every change that must be all-or-nothing is one Lua script (Redis runs it atomically):
- `create`: a new grant, unless the same staff member already has a live one for that student
  in that course (then that one: pressing Join twice gives one grant). It writes the live key
  (expiring with the grant), the pair index, the course's set of grants, the record and the
  student's history (the newest HISTORY_KEEP and any older one still running; the records of
  the grants it drops are deleted, so a loop of Join and Done keeps a bounded record);
- `end`: deletes the live key and the pair index, writes the end into the record, and publishes
  the digest of every origin session bound to the grant on the sessions' invalidation channel,
  so that every gateway replica drops them from its cache and closes their open connections at
  once (proxy/session_cache.py, proxy/live.py). Ending a grant that already ended does nothing
  and says so (None);
- `claim_expired`: the grants of a course whose time ran out, each returned to exactly one
  caller (ZREM decides), so that one replica of the web UI records its end.
Reads: a course's live grants, the live grant of a (course, student, staff), a student's history,
and which of some grants are still live (the gateway's check of its open connections).
Every change of a course's grants is announced on HELP_CHANNEL (the course's name), which the web
UI's live dashboards listen to. Redis failures are raised as they are (redis.exceptions): the web
UI answers them with its 503 page; the gateway treats a failed check as "not live" (fail closed).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import Any

import redis.asyncio

from userland.platform.model.grants import (
    HISTORY_KEEP,
    HISTORY_SECONDS,
    EndReason,
    Grant,
    decode_grant,
    encode_grant,
)
from userland.platform.model.keyspace import (
    COURSE_GRANTS_PREFIX,
    GRANT_LOG_PREFIX,
    GRANT_PAIR_PREFIX,
    GRANT_PREFIX,
    GRANT_SESSIONS_PREFIX,
    HELP_CHANNEL,
    INVALIDATION_CHANNEL,
    course_grants_key,
    grant_history_key,
    grant_key,
    grant_log_key,
    grant_pair_key,
    grant_sessions_key,
)

# KEYS: pair, live grant, record, course set, history. ARGV: record, TTL (ms), id, end (ms),
# start (s), history size, history TTL (s), grant key prefix, record key prefix. Returns
# {1, record} when created, {0, the live grant} when the pair already has one. The history keeps
# the newest `history size` grants and every older one still running (live, or run out and not
# yet claimed by claim_expired); the records of the grants it drops are deleted with them, so
# Join and Done in a loop cannot pile records up in Redis.
_CREATE = """
local existing = redis.call('GET', KEYS[1])
if existing then
  local live = redis.call('GET', ARGV[8] .. existing)
  if live then return {0, live} end
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[7])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
-- The history is ordered by start; a grant started in the same millisecond as the newest one
-- (Join and Done in a loop) still sorts after it, instead of by its random id.
local started = tonumber(ARGV[5])
local newest = redis.call('ZREVRANGE', KEYS[5], 0, 0, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) >= started then started = tonumber(newest[2]) + 0.001 end
redis.call('ZADD', KEYS[5], started, ARGV[3])
for _, old in ipairs(redis.call('ZRANGE', KEYS[5], 0, -(tonumber(ARGV[6]) + 1))) do
  if redis.call('EXISTS', ARGV[8] .. old) == 0 and not redis.call('ZSCORE', KEYS[4], old) then
    redis.call('ZREM', KEYS[5], old)
    redis.call('DEL', ARGV[9] .. old)
  end
end
redis.call('EXPIRE', KEYS[5], ARGV[7])
return {1, ARGV[1]}
"""

# KEYS: live grant, record, sessions set. ARGV: id, when (s), by, reason, invalidation channel,
# record TTL (s), course set prefix, pair prefix. Returns the ended record, or false when the
# grant was not live. Keys of the course and pair are built from the record itself.
_END = """
local live = redis.call('GET', KEYS[1])
if not live then return false end
local ok, grant = pcall(cjson.decode, live)
if not ok or type(grant) ~= 'table' then
  redis.call('DEL', KEYS[1])
  return false
end
redis.call('DEL', KEYS[1])
local course, student, staff = tostring(grant.course), tostring(grant.student), tostring(grant.staff)
redis.call('ZREM', ARGV[7] .. course, ARGV[1])
local pair = ARGV[8] .. course .. ':' .. student .. ':' .. staff
if redis.call('GET', pair) == ARGV[1] then redis.call('DEL', pair) end
grant.ended = tonumber(ARGV[2])
grant.ended_by = ARGV[3]
grant.end_reason = ARGV[4]
local record = cjson.encode(grant)
redis.call('SET', KEYS[2], record, 'EX', ARGV[6])
for _, digest in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('PUBLISH', ARGV[5], digest)
end
redis.call('DEL', KEYS[3])
return record
"""

# KEYS: the course set. ARGV: now (ms), record prefix, sessions prefix, record TTL (s).
# Returns the records of the grants whose end has come, removed from the set by this call.
_CLAIM_EXPIRED = """
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('DEL', ARGV[3] .. id)
    local raw = redis.call('GET', ARGV[2] .. id)
    if raw then
      local ok, grant = pcall(cjson.decode, raw)
      if ok and type(grant) == 'table' then
        if grant.ended == nil or grant.ended == cjson.null then
          grant.ended = grant.expires
          grant.end_reason = 'expired'
          raw = cjson.encode(grant)
          redis.call('SET', ARGV[2] .. id, raw, 'EX', ARGV[4])
        end
        table.insert(out, raw)
      end
    end
  end
end
return out
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GrantStore:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.redis = client
        self._create = client.register_script(_CREATE)
        self._end = client.register_script(_END)
        self._claim = client.register_script(_CLAIM_EXPIRED)

    async def create(self, *, course: str, student: str, staff: str, role: str, basis: str,
                     seconds: int, message: str = "", staff_global_role: str = "student",
                     staff_teams: Iterable[str] = (), now: float | None = None) -> tuple[Grant, bool]:
        """(the grant, True) when made now; (the live one, False) when the pair already had one."""
        # Times to the millisecond: Redis's Lua (cjson) keeps 14 significant digits when it rewrites
        # a record, so a finer time would not survive the grant's end unchanged.
        started = round(time.time() if now is None else now, 3)
        grant = Grant(id=secrets.token_urlsafe(16), course=course, student=student, staff=staff, role=role,
                      basis="instructors" if basis == "instructors" else "request", started=started,
                      expires=round(started + seconds, 3), message=message,
                      staff_global_role=staff_global_role, staff_teams=",".join(sorted(staff_teams)))
        ttl_ms = int((grant.expires - time.time()) * 1000)
        if ttl_ms <= 0:
            raise ValueError("a grant must end in the future")
        made, raw = await self._create(
            keys=[grant_pair_key(course, student, staff), grant_key(grant.id), grant_log_key(grant.id),
                  course_grants_key(course), grant_history_key(course, student)],
            args=[encode_grant(grant), ttl_ms, grant.id, int(grant.expires * 1000), started,
                  HISTORY_KEEP, HISTORY_SECONDS, GRANT_PREFIX, GRANT_LOG_PREFIX])
        found = decode_grant(raw)
        if found is None:  # never: the script returns what was written or a live record
            raise ValueError("grant store returned a malformed grant")
        if made:
            await self.redis.publish(HELP_CHANNEL, course)
        return found, bool(made)

    async def end(self, grant_id: str, *, by: str, reason: EndReason,
                  now: float | None = None) -> Grant | None:
        """End a live grant at once; the ended record, or None when it was not live."""
        keys = [grant_key(grant_id), grant_log_key(grant_id), grant_sessions_key(grant_id)]
        raw = await self._end(keys=keys,
                              args=[grant_id, round(time.time() if now is None else now, 3), by, reason,
                                    INVALIDATION_CHANNEL, HISTORY_SECONDS, COURSE_GRANTS_PREFIX,
                                    GRANT_PAIR_PREFIX])
        grant = decode_grant(raw)
        if grant is not None:
            await self.redis.publish(HELP_CHANNEL, grant.course)
        return grant

    async def claim_expired(self, course: str, now: float | None = None) -> list[Grant]:
        moment = time.time() if now is None else now
        raws = await self._claim(keys=[course_grants_key(course)],
                                 args=[int(moment * 1000), GRANT_LOG_PREFIX, GRANT_SESSIONS_PREFIX,
                                       HISTORY_SECONDS])
        found = [g for g in (decode_grant(r) for r in raws or ()) if g is not None]
        if found:
            await self.redis.publish(HELP_CHANNEL, course)
        return found

    async def get(self, grant_id: str) -> Grant | None:
        """The live grant with this id, or None."""
        return decode_grant(await self.redis.get(grant_key(grant_id)))

    async def live_for(self, course: str, student: str, staff: str) -> Grant | None:
        grant_id = await self.redis.get(grant_pair_key(course, student, staff))
        return None if grant_id is None else await self.get(_text(grant_id))

    async def live_in(self, course: str, now: float | None = None) -> list[Grant]:
        """The course's live grants, oldest first."""
        moment = time.time() if now is None else now
        ids = await self.redis.zrangebyscore(course_grants_key(course), f"({int(moment * 1000)}", "+inf")
        if not ids:
            return []
        raws = await self.redis.mget([grant_key(_text(i)) for i in ids])
        grants = [g for g in (decode_grant(r) for r in raws) if g is not None and g.live(moment)]
        return sorted(grants, key=lambda g: g.started)

    async def history(self, course: str, student: str, count: int = HISTORY_KEEP) -> list[Grant]:
        """The student's grants in the course, newest first: the newest `count`, and any older
        one still live."""
        # Every entry: the newest `count`, and older grants still running (create keeps those, so
        # that a live grant never drops out of the student's sight behind newer ones).
        ids = await self.redis.zrevrange(grant_history_key(course, student), 0, -1)
        if not ids:
            return []
        raws = await self.redis.mget([grant_log_key(_text(i)) for i in ids])
        live = await self.redis.mget([grant_key(_text(i)) for i in ids])
        out = []
        for index, (raw, alive) in enumerate(zip(raws, live, strict=True)):
            grant = decode_grant(raw)
            if grant is None or (index >= count and alive is None):
                continue
            if alive is None and grant.ended is None:
                # Its time ran out and nobody has claimed it yet: it ended at its end.
                grant = grant.ended_at(grant.expires, "", "expired")
            out.append(grant)
        return out

    async def record(self, grant_id: str) -> Grant | None:
        """A grant's record, live or ended (kept HISTORY_SECONDS): who ended it and when. One
        whose time ran out and that nobody has claimed yet ended at its end."""
        grant = decode_grant(await self.redis.get(grant_log_key(grant_id)))
        if grant is not None and grant.ended is None and not await self.redis.exists(grant_key(grant_id)):
            grant = grant.ended_at(grant.expires, "", "expired")
        return grant

    async def which_live(self, grant_ids: Iterable[str]) -> dict[str, bool]:
        """For each id, whether its grant is still live (one round trip)."""
        ids = list(grant_ids)
        if not ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for grant_id in ids:
                pipe.exists(grant_key(grant_id))
            found = await pipe.execute()
        return {grant_id: bool(count) for grant_id, count in zip(ids, found, strict=True)}
