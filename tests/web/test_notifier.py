"""The change notifier: per course, coalesced per tick, ends cleanly (real asyncio, no fakes)."""

from __future__ import annotations

import asyncio

from userland.web.notifier import Notifier


async def test_many_changes_in_one_tick_are_one_notice_per_subscriber() -> None:
    notifier = Notifier(tick=0.05)
    runner = asyncio.create_task(notifier.run())
    try:
        with notifier.subscribe("cs101") as a, notifier.subscribe("cs101") as b, \
                notifier.subscribe("db202") as other:
            for i in range(500):
                for _ in range(5):  # five objects per student change
                    notifier.changed("cs101", {f"s{i}"})
            assert await a.next(1.0) == {f"s{i}" for i in range(500)}
            assert await b.next(1.0) == {f"s{i}" for i in range(500)}
            assert notifier.ticks_sent == 1
            assert await other.next(0.1) == set()  # another course heard nothing
            notifier.changed("cs101", {"late"})
            assert await a.next(1.0) == {"late"}
    finally:
        runner.cancel()


async def test_nobody_listening_keeps_nothing_and_close_ends_subscribers() -> None:
    notifier = Notifier(tick=0.01)
    notifier.changed("cs101", {"a"})
    notifier.flush()
    assert notifier.ticks_sent == 0
    with notifier.subscribe("cs101") as sub:
        assert notifier.subscribers("cs101") == 1
        waiting = asyncio.create_task(sub.next(30.0))
        await asyncio.sleep(0)
        notifier.close_all()
        assert await asyncio.wait_for(waiting, 1.0) is None
    assert notifier.subscribers("cs101") == 0
