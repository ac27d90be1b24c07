"""Attack review of the form's repository check (SECURITY.md, "The form's repository
check is not a network scanner"): what an instructor typing addresses into the form can learn of the network
where the store runs, and whether a flood of checks lets an address through unchecked.

Real: the store over HTTP on loopback, git, a TCP server that accepts and never answers (a
firewalled or hanging service), a port nothing listens on. Nothing is patched."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from tests.support.coursework import ASG, NS, STORE_SECRET
from userland.coursework.store_app import create_store_app
from userland.coursework.store_fetch import CHECKS_AT_ONCE
from userland.coursework.store_requests import StoreOptions
from userland.coursework.trees import Limits
from userland.platform.clients.store_client import StoreClient

# The check's time limit in these tests (the store's default is 15 s).
CHECK_SECONDS = 2.0
# The flood test's: every slot is held by a check of the silent server until it runs out, and the
# test's extra check must come before that (2 s was a race with a loaded machine's git starts).
FLOOD_CHECK_SECONDS = 10.0


class Silent:
    """A TCP server that accepts every connection and never says anything; `accepted` counts,
    `full` is set once `expect` connections came."""

    def __init__(self, expect: int = 1) -> None:
        self.accepted = 0
        self.expect = expect
        self.full = asyncio.Event()
        self.url = ""
        self._writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.accepted >= self.expect:
            self.full.set()
        self._writers.append(writer)
        await reader.read()  # until git gives up and closes

    async def __aenter__(self) -> Silent:
        # Listening before the store is made, on a port of its own (a port chosen earlier and
        # bound later could be taken in between by another test, another xdist worker).
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/quiet.git"
        return self

    async def __aexit__(self, *_: object) -> None:
        for writer in self._writers:
            writer.close()
        self._server.close()


@pytest.fixture
async def silent() -> AsyncIterator[Silent]:
    async with Silent() as server:
        yield server


@contextlib.asynccontextmanager
async def serve_checker(data: Path, silent: Silent, check_seconds: float) -> AsyncIterator[StoreClient]:
    """The store (its checks limited to `check_seconds`) as the web UI calls it, allowed to check
    the silent server and a port nothing listens on (USERLAND_STORE_GIT_URLS)."""
    options = StoreOptions(data=data, secret=STORE_SECRET, source_limits=Limits(100, 10**7),
                           copy_limits=Limits(100, 10**7), check_timeout=check_seconds,
                           git_urls=(f"http://127.0.0.1:{silent.port}/", "http://127.0.0.1:1/"))
    server = TestServer(create_store_app(options), host="127.0.0.1")
    await server.start_server()
    client = StoreClient(str(server.make_url("")).rstrip("/"), STORE_SECRET, "web")
    try:
        yield client
    finally:
        await client.close()
        await server.close()


@pytest.fixture
async def checker(tmp_path: Path, silent: Silent) -> AsyncIterator[StoreClient]:
    async with serve_checker(tmp_path / "store", silent, CHECK_SECONDS) as client:
        yield client


@pytest.fixture
async def holding_checker(tmp_path: Path, silent: Silent) -> AsyncIterator[StoreClient]:
    """The same store, whose checks of the silent server hold their slots for FLOOD_CHECK_SECONDS:
    long enough for the test to send one more check while they do, however loaded the machine."""
    async with serve_checker(tmp_path / "store", silent, FLOOD_CHECK_SECONDS) as client:
        yield client


async def _timed_check(client: StoreClient, url: str) -> tuple[float, tuple[str, str] | None]:
    started = time.monotonic()
    problem = await client.check(NS, ASG, url=url, ref="main")
    return time.monotonic() - started, problem


async def test_a_closed_port_answers_no_sooner_than_one_that_never_answers(checker: StoreClient,
                                                                           silent: Silent) -> None:
    """Attack: time the check. A port nothing listens on was said at once, a firewalled one (or a
    service that keeps the connection and says nothing) after the time limit: the same sentence,
    but the time mapped which addresses have something behind them. Every "not reachable" is now
    said at the end of the time limit. (A lower bound, so no slow machine makes it flaky.)"""
    quiet_time, quiet = await _timed_check(checker, silent.url)
    assert silent.accepted >= 1  # git did reach it, and was told nothing
    closed_time, closed = await _timed_check(checker, "http://127.0.0.1:1/nothing-here.git")
    assert quiet is not None and closed is not None
    assert quiet[0] == closed[0] == "Unreachable"
    assert quiet_time >= CHECK_SECONDS
    assert closed_time >= CHECK_SECONDS, f"a closed port was told apart in {closed_time:.2f} s"


async def test_a_flood_of_checks_is_told_busy_not_queued_past_the_web_uis_patience(
        holding_checker: StoreClient, silent: Silent) -> None:
    """Attack: send more checks than the store runs at once, each to an address that never
    answers. The others waited in an unbounded queue, past the web UI's 30 s, and the web UI saves
    an assignment whose check did not answer unchecked: a flood let any address through to the
    operator's fetch (whose words are more detailed). Now a check that finds every slot taken is
    answered at once: busy, try again (the web UI then refuses to save, see the web test)."""
    checker, silent.expect = holding_checker, CHECKS_AT_ONCE
    running = [asyncio.create_task(checker.check(NS, ASG, url=silent.url, ref="main"))
               for _ in range(CHECKS_AT_ONCE)]
    await asyncio.wait_for(silent.full.wait(), 60)
    assert silent.accepted == CHECKS_AT_ONCE  # every slot holds a git waiting on the silent server
    extra = await checker.check(NS, ASG, url=silent.url, ref="main")
    assert extra is not None and extra[0] == "Busy", extra
    assert "try again" in extra[1]
    for problem in await asyncio.gather(*running):
        assert problem is not None and problem[0] == "Unreachable"
