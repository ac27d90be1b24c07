"""Large bodies stream through the gateway both ways with flat memory.

The gateway, the upstream and the client all run in this test process, so its resident set
size bounds the gateway's: if any of the three buffered a body, RSS would grow by its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from .conftest import EchoFactory, GatewayFactory, Origins, World, origin_cookie

IDE_HOST = "ide.test"
MiB = 1 << 20
# 1 GiB takes about 10 s per direction here; the second variant of each test uses less.
BIG = int(os.environ.get("USERLAND_TEST_STREAM_MIB", "1024")) * MiB
SMALL = 256 * MiB
MAX_GROWTH = 100 * MiB


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """Samples this process's RSS in the background; `growth` is peak minus the start."""

    def __init__(self) -> None:
        self.start = rss()
        self.peak = self.start
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss())
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> PeakRss:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.start


def block(index: int) -> bytes:
    return index.to_bytes(8, "big") * (MiB // 8)


@pytest.fixture
async def gw(world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
             origins: Origins) -> tuple[Any, Any, dict[str, str]]:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    client = await gateway_factory()
    headers = {"Host": f"alice.{IDE_HOST}", **origin_cookie(await origins.login("alice"))}
    return client, echo, headers


@pytest.mark.slow
@pytest.mark.parametrize(("chunked", "size"), [(True, BIG), (False, SMALL)],
                         ids=["chunked", "content-length"])
async def test_large_upload_streams_with_flat_memory(gw: tuple[Any, Any, dict[str, str]],
                                                     chunked: bool, size: int) -> None:
    client, _echo, headers = gw
    expected = hashlib.sha256()
    for index in range(size // MiB):
        expected.update(block(index))

    async def body() -> AsyncIterator[bytes]:
        for index in range(size // MiB):
            yield block(index)

    extra = {} if chunked else {"Content-Length": str(size)}
    async with PeakRss() as memory:
        resp = await client.put("/upload", data=body(), headers={**headers, **extra})
        seen = await resp.json()
    assert resp.status == 200
    assert seen["body_len"] == size
    assert seen["body_sha256"] == expected.hexdigest()
    assert memory.growth < MAX_GROWTH, f"RSS grew by {memory.growth / MiB:.0f} MiB"


@pytest.mark.slow
@pytest.mark.parametrize(("with_length", "size"), [(True, BIG), (False, SMALL)],
                         ids=["content-length", "chunked"])
async def test_large_download_streams_with_flat_memory(gw: tuple[Any, Any, dict[str, str]],
                                                       with_length: bool, size: int) -> None:
    client, _, headers = gw
    query = f"/download?size={size}&length={int(with_length)}"
    expected = hashlib.sha256()
    one = bytes(range(256)) * 4096
    for _ in range(size // MiB):
        expected.update(one)
    received = hashlib.sha256()
    got = 0
    async with PeakRss() as memory:
        resp = await client.get(query, headers=headers)
        assert resp.status == 200
        if with_length:
            assert resp.headers["Content-Length"] == str(size)
        else:
            assert resp.headers.get("Transfer-Encoding") == "chunked"
        async for chunk in resp.content.iter_chunked(MiB):
            received.update(chunk)
            got += len(chunk)
    assert got == size
    assert received.hexdigest() == expected.hexdigest()
    assert memory.growth < MAX_GROWTH, f"RSS grew by {memory.growth / MiB:.0f} MiB"
