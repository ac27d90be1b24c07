"""Stopping `userland local` in bounded time: each step logged with how long it took, and a part
that does not end within its limit logged with its stack and left behind (local/setup.py)."""

from __future__ import annotations

import asyncio
import io
import logging
import time

log = logging.getLogger("userland.local.setup")

# Ctrl-C ends `userland local` in seconds, whatever one part does: the runner stops each
# environment within STOP_GRACE (local/process_tree.py), so a runner still busy after this long
# is stuck; its stack is logged and the stop goes on (the reaper, in a session of its own, stops
# whatever containers it leaves once this process has ended).
RUNNER_STOP_LIMIT = 60.0


async def within(task: asyncio.Task[None], limit: float, part: str) -> None:
    """Wait for a cancelled `task` to end, at most `limit` seconds; log where it is stuck if not."""
    done, _ = await asyncio.wait({task}, timeout=limit)
    if not done:
        stack = io.StringIO()
        task.print_stack(file=stack)
        log.warning("a part did not stop in time: going on without it",
                    extra={"part": part, "seconds": limit, "stack": stack.getvalue()[-4000:]})
    elif not task.cancelled() and (error := task.exception()) is not None:
        log.warning("a part failed while stopping", extra={"part": part, "error": repr(error)})


class Steps:
    """Logs each step of stopping with how long the one before took: where a stop that hangs
    stands is the last line of local.log (and `kill -USR1` prints every thread's stack)."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.since = time.monotonic()

    def __call__(self, what: str | None) -> None:
        now = time.monotonic()
        if self.current is not None:
            log.info("stopped", extra={"part": self.current, "seconds": round(now - self.since, 2)})
        if what is not None:
            log.info("stopping", extra={"part": what})
        self.current, self.since = what, now
