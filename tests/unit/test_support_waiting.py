"""The tests' own waiting helper (tests/support/waiting.py): it must never pass without checking."""

from __future__ import annotations

import time

import pytest

from tests.support import eventually, eventually_sync


async def _true() -> bool:
    return True


def test_a_sync_wait_refuses_an_async_check_instead_of_passing_at_once() -> None:
    # A coroutine object is truthy: a helper that took it for the answer passed without checking.
    with pytest.raises(TypeError, match="async check"):
        eventually_sync(_true, timeout=1)


def test_a_sync_wait_waits_for_its_condition_and_fails_with_its_last_value() -> None:
    deadline = time.monotonic() + 0.2
    assert eventually_sync(lambda: time.monotonic() > deadline and "done", timeout=5, interval=0.01) == "done"
    with pytest.raises(AssertionError, match=r"within 0.1s \(last: \[\]\)"):
        eventually_sync(lambda: [], timeout=0.1, interval=0.01)


async def test_the_async_wait_takes_sync_and_async_checks() -> None:
    assert await eventually(_true, timeout=1) is True
    calls: list[int] = []

    def third_time() -> bool:
        calls.append(1)
        assert len(calls) >= 3, "not yet"  # an assertion means "not yet" until the last try
        return True

    assert await eventually(third_time, timeout=5, interval=0.01) is True
    with pytest.raises(AssertionError, match="never"):
        await eventually(_assert_never, timeout=0.1, interval=0.01)  # its own words explain the failure


def _assert_never() -> bool:
    raise AssertionError("never")
