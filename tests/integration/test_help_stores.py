"""The help stores against a real Redis: grants (platform/clients/grant_store.py), the help queue
(web/help_queue.py), and the gateway's watch of staff connections (proxy/grant_watch.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from aiohttp.test_utils import make_mocked_request

from tests.support import eventually
from userland.platform.clients.grant_store import GrantStore
from userland.platform.model.grants import HISTORY_KEEP, Grant
from userland.platform.model.keyspace import (
    GRANT_LOG_PREFIX,
    HELP_CHANNEL,
    INVALIDATION_CHANNEL,
    grant_key,
    grant_log_key,
    grant_sessions_key,
    help_queue_key,
    help_request_key,
    pattern,
)
from userland.proxy.grant_watch import GrantWatch
from userland.web.help_queue import ASKS_PER_WINDOW, HelpQueue, TooManyAsks

DB = 7  # a database of its own on the session's Redis


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    conn = redis.asyncio.from_url(redis_url.rsplit("/", 1)[0] + f"/{DB}")
    await conn.flushdb()
    yield conn
    await conn.aclose()


async def test_one_live_grant_per_staff_member_and_student_in_a_course(client: redis.asyncio.Redis) -> None:
    store = GrantStore(client)
    first, made = await store.create(course="cs101", student="alice", staff="tina", role="assistant",
                                     basis="request", seconds=600, message="stuck")
    again, made_again = await store.create(course="cs101", student="alice", staff="tina", role="assistant",
                                           basis="request", seconds=600)
    assert made and not made_again and again == first
    other, made_other = await store.create(course="cs101", student="alice", staff="sam", role="assistant",
                                           basis="request", seconds=600)
    assert made_other and other.id != first.id
    assert await store.live_for("cs101", "alice", "tina") == first
    assert await store.live_for("cs202", "alice", "tina") is None
    assert [g.staff for g in await store.live_in("cs101")] == ["tina", "sam"]
    assert await store.live_in("cs202") == []
    assert 595 <= await client.ttl(grant_key(first.id)) <= 600


async def test_ending_announces_the_bound_sessions_once_and_keeps_the_record(
        client: redis.asyncio.Redis) -> None:
    store = GrantStore(client)
    grant, _ = await store.create(course="cs101", student="alice", staff="tina", role="assistant",
                                  basis="request", seconds=600)
    await client.sadd(grant_sessions_key(grant.id), "digest-one", "digest-two")  # what redeem adds
    pubsub: Any = client.pubsub()
    await pubsub.subscribe(INVALIDATION_CHANNEL, HELP_CHANNEL)
    ended = await store.end(grant.id, by="alice", reason="student", now=grant.started + 30)
    assert ended is not None and (ended.ended, ended.ended_by, ended.end_reason) == (
        grant.started + 30, "alice", "student")
    assert await store.end(grant.id, by="alice", reason="student") is None  # once
    heard: list[tuple[str, str]] = []

    async def all_heard() -> bool:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if message is not None:
            heard.append((message["channel"].decode(), message["data"].decode()))
        return len(heard) >= 3
    await eventually(all_heard, timeout=10)
    await pubsub.aclose()
    wanted = [(INVALIDATION_CHANNEL, "digest-one"), (INVALIDATION_CHANNEL, "digest-two"),
              (HELP_CHANNEL, "cs101")]
    assert sorted(heard) == sorted(wanted)
    assert await store.get(grant.id) is None and await store.live_for("cs101", "alice", "tina") is None
    assert await store.live_in("cs101") == []
    [kept] = await store.history("cs101", "alice")
    assert kept.id == grant.id and kept.end_reason == "student" and kept.until == grant.started + 30


async def test_a_grant_that_ran_out_is_claimed_by_exactly_one_caller(client: redis.asyncio.Redis) -> None:
    store = GrantStore(client)
    grant, _ = await store.create(course="cs101", student="alice", staff="tina", role="assistant",
                                  basis="request", seconds=1)
    assert await store.claim_expired("cs101") == []  # not yet

    async def gone() -> bool:
        return await store.get(grant.id) is None
    await eventually(gone, timeout=10)  # its key expired with it
    claims = await asyncio.gather(*(GrantStore(client).claim_expired("cs101") for _ in range(8)))
    found = [g for claim in claims for g in claim]
    assert [(g.id, g.end_reason, g.ended) for g in found] == [(grant.id, "expired", grant.expires)]
    [kept] = await store.history("cs101", "alice")
    assert kept.end_reason == "expired"


async def test_history_is_newest_first_and_bounded(client: redis.asyncio.Redis) -> None:
    store = GrantStore(client)
    base = time.time() - 50_000
    for index in range(25):
        grant, _ = await store.create(course="cs101", student="alice", staff=f"ta{index}", role="assistant",
                                      basis="request", seconds=100_000, now=base + index * 1000)
        await store.end(grant.id, by=grant.staff, reason="done", now=base + index * 1000 + 60)
    history = await store.history("cs101", "alice")
    assert [g.staff for g in history] == [f"ta{i}" for i in range(24, 4, -1)]  # the newest 20


async def test_a_student_has_one_open_request_per_course(client: redis.asyncio.Redis) -> None:
    queue = HelpQueue(client)
    assert await queue.ask("cs101", "alice", "first", now=1000.0)
    assert await queue.ask("cs101", "bob", "", now=1010.0)
    assert not await queue.ask("cs101", "alice", "  second\nline ", now=1020.0)  # kept its place
    assert await queue.ask("cs202", "alice", "other course", now=1030.0)
    waiting = await queue.waiting("cs101")
    assert [(r.student, r.message, r.asked) for r in waiting] == [("alice", "second line", 1000.0),
                                                                  ("bob", "", 1010.0)]
    # Two members of staff take it at once: one gets it.
    taken = await asyncio.gather(queue.take("cs101", "alice"), queue.take("cs101", "alice"))
    assert sorted(r is not None for r in taken) == [False, True]
    assert [r.student for r in await queue.waiting("cs101")] == ["bob"]
    assert [r.student for r in await queue.waiting("cs202")] == ["alice"]


async def test_asking_in_a_loop_is_refused(client: redis.asyncio.Redis) -> None:
    queue = HelpQueue(client)
    for _ in range(ASKS_PER_WINDOW):
        await queue.ask("cs101", "alice", "help")
        await queue.take("cs101", "alice")
    with pytest.raises(TooManyAsks):
        await queue.ask("cs101", "alice", "help")
    assert await queue.waiting("cs101") == []
    assert await queue.ask("cs101", "bob", "help")  # others are not affected


async def test_an_expired_request_leaves_the_queue(client: redis.asyncio.Redis) -> None:
    queue = HelpQueue(client)
    await queue.ask("cs101", "alice", "help")
    await client.delete(help_request_key("cs101", "alice"))  # what its TTL does at the end of the day
    assert await queue.waiting("cs101") == []
    assert await client.zcard(help_queue_key("cs101")) == 0


async def test_the_watch_closes_staff_connections_when_their_grant_ends_or_runs_out(
        client: redis.asyncio.Redis) -> None:
    store = GrantStore(client)
    long, _ = await store.create(course="cs101", student="alice", staff="tina", role="assistant",
                                 basis="request", seconds=600)
    short, _ = await store.create(course="cs101", student="bob", staff="tina", role="assistant",
                                  basis="request", seconds=600)
    closed: list[tuple[str, int]] = []
    now = [time.time()]
    watch = GrantWatch(store, clock=lambda: now[0], on_close=lambda r, n: closed.append((r, n)),
                       check_seconds=0.0)
    requests = [make_mocked_request("GET", "/ws") for _ in range(3)]
    watch.add(requests[0], long)
    watch.add(requests[1], long)
    watch.add(requests[2], short)
    assert await watch.sweep() == 0 and len(watch) == 3
    await store.end(long.id, by="alice", reason="student")
    assert await watch.sweep() == 2 and closed == [("ended", 2)]
    assert all(r.transport.close.called for r in requests[:2])  # type: ignore[union-attr]
    assert not requests[2].transport.close.called  # type: ignore[union-attr]
    now[0] = short.expires  # its time has come (this replica knows without asking Redis)
    assert await watch.sweep() == 1 and closed[-1] == ("expired", 1) and len(watch) == 0


async def test_the_watch_fails_closed_when_redis_cannot_answer(redis_url: str) -> None:
    dead = redis.asyncio.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    grant_store = GrantStore(dead)
    grant = Grant(id="G" * 22, course="cs101", student="alice", staff="tina", role="assistant",
                  basis="request", started=time.time(), expires=time.time() + 600)
    watch = GrantWatch(grant_store, check_seconds=0.0)
    request = make_mocked_request("GET", "/ws")
    watch.add(request, grant)
    assert await watch.sweep() == 1
    await dead.aclose()


async def test_join_and_done_in_a_loop_keeps_a_bounded_record(client: redis.asyncio.Redis) -> None:
    """Attack review (issue 20, floods): an instructor of a course that lets instructors open any
    student's environment presses Join and Done in a loop (or an assistant with a student who asks
    again and again). Each grant's record lived 30 days while the student's history kept only the
    newest HISTORY_KEEP: records piled up in Redis (which runs with `noeviction`)."""
    store = GrantStore(client)
    for _ in range(HISTORY_KEEP * 3):
        grant, _made = await store.create(course="cs101", student="alice", staff="teacher", role="instructor",
                                          basis="instructors", seconds=600)
        await store.end(grant.id, by="teacher", reason="done")
    live, _made = await store.create(course="cs101", student="alice", staff="tina", role="assistant",
                                     basis="request", seconds=600)
    records = [key async for key in client.scan_iter(match=pattern(GRANT_LOG_PREFIX))]
    assert len(records) == HISTORY_KEEP  # the history's, and no more
    history = await store.history("cs101", "alice")
    assert len(history) == HISTORY_KEEP and history[0].id == live.id
    # A live grant's record is never dropped, however many newer ones there are.
    for index in range(HISTORY_KEEP + 2):
        await store.create(course="cs101", student="alice", staff=f"ta{index}", role="assistant",
                           basis="request", seconds=600)
    assert await client.exists(grant_log_key(live.id))
    # ... nor out of the student's sight on /me (where they end it), behind newer ones.
    assert live.id in [g.id for g in await store.history("cs101", "alice")]
    ended = await store.end(live.id, by="alice", reason="student")
    assert ended is not None and ended.end_reason == "student"


async def test_grants_made_in_one_millisecond_are_newest_first_in_the_history(
        client: redis.asyncio.Redis) -> None:
    """Join and Done in a loop can start two grants in the same millisecond: the student's
    history still lists the one made last first (it sorted by the grants' random ids)."""
    store = GrantStore(client)
    moment = time.time()
    made = []
    for index in range(8):
        grant, _made = await store.create(course="cs102", student="bob", staff=f"ta{index}", role="assistant",
                                          basis="request", seconds=600, now=moment)
        made.append(grant.id)
    assert [g.id for g in await store.history("cs102", "bob")] == list(reversed(made))
