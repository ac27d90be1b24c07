"""Students' requests for help, per course, in Redis (every web UI replica sees the same queue).

One open request per student per course: a sorted set per course (student -> when they asked)
and the request itself (JSON: message and time; both keys: platform/model/keyspace.py), which
expires after `REQUEST_TTL_SECONDS` (a request nobody answered by the end of the day goes away
by itself; the set entry is dropped when it is next read).
Asking again while a request is open keeps its place in the queue and takes the new message.
A student may ask (or ask again) at most `ASKS_PER_WINDOW` times per `ASK_WINDOW_SECONDS`
per course, so a script cannot churn a course's queue and every dashboard watching it; a member
of staff may join at most `JOINS_PER_WINDOW` times per `JOIN_WINDOW_SECONDS` per course
(`count_join`), so Join and Done in a loop cannot flood the API server with the grants' Events.
Taking a request (a member of staff joins) and cancelling it are one atomic step each: when two
members of staff press Join at once, exactly one of them takes it.
Every change is announced on platform/model/keyspace.py's HELP_CHANNEL (the course's name) for the
live dashboards of every replica.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio

from userland.platform.model import naming
from userland.platform.model.grants import MESSAGE_MAX, clean_message
from userland.platform.model.keyspace import (
    HELP_CHANNEL,
    help_asks_key,
    help_joins_key,
    help_queue_key,
    help_request_key,
)
from userland.web.rules.help import HelpRequest

REQUEST_TTL_SECONDS = 12 * 3600
ASKS_PER_WINDOW = 20
ASK_WINDOW_SECONDS = 600
# Grants one member of staff may make in a course per window (Join, or Open as staff): more than
# a lab's helper gets through, few enough that Join and Done in a loop cannot flood the API
# server with the grants' Events (two per environment per round) or the audit log.
JOINS_PER_WINDOW = 20
JOIN_WINDOW_SECONDS = 600

# KEYS: queue, request, ask counter. ARGV: student, now, record, TTL, limit, window.
# Returns 1 (asked), 0 (already open: message updated, place kept), -1 (too many asks).
_ASK = """
local asks = redis.call('INCR', KEYS[3])
if asks == 1 then redis.call('EXPIRE', KEYS[3], ARGV[6]) end
if asks > tonumber(ARGV[5]) then return -1 end
local had = redis.call('ZSCORE', KEYS[1], ARGV[1])
local raw = redis.call('GET', KEYS[2])
if had and raw then
  local ok, old = pcall(cjson.decode, raw)
  local new = cjson.decode(ARGV[3])
  if ok and type(old) == 'table' then new.asked = old.asked end
  redis.call('SET', KEYS[2], cjson.encode(new), 'KEEPTTL')
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
return 1
"""

# KEYS: queue, request. ARGV: student. Returns the request (now removed), or false.
_TAKE = """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local raw = redis.call('GET', KEYS[2])
redis.call('DEL', KEYS[2])
if removed == 1 and raw then return raw end
return false
"""


# KEYS: the staff member's join counter. ARGV: limit, window. Returns 1 (allowed) or 0.
_JOIN = """
local joins = redis.call('INCR', KEYS[1])
if joins == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if joins > tonumber(ARGV[1]) then return 0 end
return 1
"""


class TooManyAsks(Exception):
    """The student asked (or asked again) more often than a person would."""


class TooManyJoins(Exception):
    """The member of staff joined students in this course more often than a person would."""


def _decode(course: str, student: str, raw: Any) -> HelpRequest | None:
    try:
        data = json.loads(raw)
        return HelpRequest(course=course, student=student,
                           message=str(data.get("message") or "")[:MESSAGE_MAX], asked=float(data["asked"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class HelpQueue:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.redis = client
        self._ask = client.register_script(_ASK)
        self._take = client.register_script(_TAKE)
        self._join = client.register_script(_JOIN)

    async def ask(self, course: str, student: str, message: str, now: float | None = None) -> bool:
        """Open a request (True), or update the open one's message (False); TooManyAsks."""
        asked = time.time() if now is None else now
        record = json.dumps({"message": clean_message(message), "asked": asked})
        done = await self._ask(keys=[help_queue_key(course), help_request_key(course, student),
                                     help_asks_key(course, student)],
                               args=[student, asked, record, REQUEST_TTL_SECONDS, ASKS_PER_WINDOW,
                                     ASK_WINDOW_SECONDS])
        if int(done) < 0:
            raise TooManyAsks
        await self.redis.publish(HELP_CHANNEL, course)
        return int(done) == 1

    async def take(self, course: str, student: str) -> HelpRequest | None:
        """Remove the student's open request and return it (None: there was none); cancelling
        and a member of staff joining both take it."""
        raw = await self._take(keys=[help_queue_key(course), help_request_key(course, student)],
                               args=[student])
        if not raw:
            return None
        await self.redis.publish(HELP_CHANNEL, course)
        return _decode(course, student, raw)

    async def count_join(self, course: str, staff: str) -> None:
        """Count a member of staff's join in the course; TooManyJoins past JOINS_PER_WINDOW."""
        allowed = await self._join(keys=[help_joins_key(course, staff)],
                                   args=[JOINS_PER_WINDOW, JOIN_WINDOW_SECONDS])
        if not int(allowed):
            raise TooManyJoins

    async def get(self, course: str, student: str) -> HelpRequest | None:
        raw = await self.redis.get(help_request_key(course, student))
        return None if raw is None else _decode(course, student, raw)

    async def waiting(self, course: str) -> list[HelpRequest]:
        """The course's open requests, oldest first."""
        entries = await self.redis.zrange(help_queue_key(course), 0, -1)
        students = [e.decode() if isinstance(e, bytes) else str(e) for e in entries]
        students = [s for s in students if naming.is_valid_login(s)]
        if not students:
            return []
        raws = await self.redis.mget([help_request_key(course, s) for s in students])
        found, gone = [], []
        for student, raw in zip(students, raws, strict=True):
            request = None if raw is None else _decode(course, student, raw)
            if request is None:
                gone.append(student)
            else:
                found.append(request)
        if gone:  # expired requests: their place in the queue goes too
            await self.redis.zrem(help_queue_key(course), *gone)
        return sorted(found, key=lambda r: (r.asked, r.student))
