"""The work queue: deduplicated, one worker per key at a time, backoff per key."""

from __future__ import annotations

import asyncio

from userland.operator.workqueue import WorkQueue


async def test_a_key_waits_once_however_often_it_is_added() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a", "c", "b"):
        queue.add(key)
    assert queue.depth == 3
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]


async def test_a_key_added_while_processed_comes_back_after_done_not_before() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # an event arrives while a worker holds "a"
    assert queue.depth == 0, "a second worker must not get the same key"
    queue.done(key)
    assert queue.depth == 1
    assert await queue.get() == "a"


async def test_retry_backs_off_exponentially_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.08)
    delays = [queue.retry("a") for _ in range(6)]
    assert delays[0] < delays[2] < delays[3]
    assert max(delays) <= 0.08 * 1.2
    assert queue.failures("a") == 6
    queue.forget("a")
    assert queue.failures("a") == 0
    assert await asyncio.wait_for(queue.get(), 1) == "a"  # the scheduled retry arrives


async def test_add_after_keeps_the_earliest_due_time() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 30)
    queue.add_after("a", 0.01)
    queue.add_after("a", 20)
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    queue.done("a")
    await asyncio.sleep(0.05)
    assert queue.depth == 0
    queue.close()


async def test_resync_keys_wait_behind_event_keys_and_can_be_promoted() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("r1", "r2", "r3"):
        queue.add(key, low=True)
    queue.add("event")
    queue.add("r3")  # an event names a key already waiting for the resync: it moves up
    assert queue.depth == 4
    order = [await queue.get() for _ in range(4)]
    assert order == ["event", "r3", "r1", "r2"]
    assert queue.depth == 0
