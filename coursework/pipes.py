"""Bytes written by blocking code in a thread (tarfile, zipfile), read as async chunks (an aiohttp
request or response body), with back-pressure: the writer waits while `depth` chunks are queued,
so a 5 GB zip of every student's copy is never held in memory (about depth x 256 KiB is)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")
CHUNK = 256 * 1024
_END = b""


class ChunkPipe(io.RawIOBase):
    """A write-only file for the thread; `chunks()` for the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, depth: int = 8) -> None:
        super().__init__()
        self._loop = loop
        self._queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(depth)
        self._buffer = bytearray()
        self.written = 0
        self.cancelled = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.cancelled:
            raise BrokenPipeError("the reader went away")
        view = memoryview(data).cast("B")
        self._buffer += view
        self.written += len(view)
        if len(self._buffer) >= CHUNK:
            self._put(bytes(self._buffer))
            self._buffer.clear()
        return len(view)

    def _put(self, item: bytes | BaseException) -> None:
        asyncio.run_coroutine_threadsafe(self._queue.put(item), self._loop).result()

    def finish(self, error: BaseException | None = None) -> None:
        """The writer is done (or failed: the reader raises `error`)."""
        if self._buffer and error is None and not self.cancelled:
            self._put(bytes(self._buffer))
        self._buffer.clear()
        if not self.cancelled:
            self._put(error if error is not None else _END)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                item = await self._queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item == _END:
                    return
                yield item
        finally:
            self.cancelled = True
            while not self._queue.empty():  # unblock a writer waiting on a full queue
                self._queue.get_nowait()


async def produce(write: Callable[[ChunkPipe], T], *, depth: int = 8,
                  executor: Executor | None = None) -> tuple[ChunkPipe, asyncio.Future[T]]:
    """Run `write(pipe)` in a thread (of `executor`, else the loop's default); read
    `pipe.chunks()`; await the future for its result."""
    loop = asyncio.get_running_loop()
    pipe = ChunkPipe(loop, depth=depth)

    def run() -> T:
        try:
            result = write(pipe)
        except BaseException as err:
            pipe.finish(err)
            raise
        pipe.finish()
        return result

    return pipe, loop.run_in_executor(executor, run)
