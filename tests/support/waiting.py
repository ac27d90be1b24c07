"""Waiting for a condition, the one way tests here do it.

`eventually(check)` polls `check` (a function, sync or async) until it returns something
truthy, and returns that. An AssertionError raised by the check counts as "not yet"; after the
timeout the check runs once more so its own assertion (or its last value) explains the failure,
with `explain()` added when given (the real-node suite adds the node's state).

`eventually_sync` is the same for code without an event loop; it refuses an async check
outright: a coroutine is truthy, so a synchronous poll of an async function would pass at once
without checking anything.

`MUST_COMPLETE` is the timeout for work that must complete (a hand-out, a collection, a Pod
starting, a program saying it is ready): a safety net, not a claim about speed. On a loaded
machine (other workers, other jobs) such work takes several times what it takes on a quiet
one; waiting longer costs nothing when the test passes. A wait that asserts something does
NOT happen keeps its own short window.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

# Seconds; below pytest-timeout's 300 per test (pyproject.toml), the outer net.
MUST_COMPLETE = 180.0
MUST_COMPLETE_MS = int(MUST_COMPLETE * 1000)  # the same, in Playwright's unit


def _refuse(value: Any, check: Callable[[], Any]) -> None:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: do not leave a warning behind
        raise TypeError(f"eventually_sync got an async check ({check!r}): use `await eventually(...)`")


async def _value(check: Callable[[], Any]) -> Any:
    value = check()
    if inspect.isawaitable(value):
        value = await value
    return value


def _failure(timeout: float, last: Any, explain: Callable[[], str] | None) -> str:
    text = f"condition not met within {timeout}s (last: {last!r})"
    return f"{text}\n{explain()}" if explain is not None else text


async def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, *,
                     explain: Callable[[], str] | None = None) -> Any:
    """Poll `check` until it returns something truthy; fail with its last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await _value(check)
        except AssertionError:
            last = None
        else:
            if last:
                return last
        await asyncio.sleep(interval)
    last = await _value(check)  # one last try: its assertion, if any, explains the failure
    assert last, _failure(timeout, last, explain)
    return last


def eventually_sync(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, *,
                    explain: Callable[[], str] | None = None) -> Any:
    """`eventually` for a synchronous check, polled without an event loop."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            last = check()
        except AssertionError:
            last = None
        _refuse(last, check)
        if last:
            return last
        time.sleep(interval)
    last = check()
    _refuse(last, check)
    assert last, _failure(timeout, last, explain)
    return last
