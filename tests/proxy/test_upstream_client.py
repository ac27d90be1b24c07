"""The slim upstream client (upstream_client.py) against real local servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from userland.proxy.upstream_client import UpstreamError, UpstreamPool

BIG = 8 * 1024 * 1024


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async def small(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {request.path_qs}", headers={"X-Seen-Host": request.host})

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        block = b"x" * 65536
        for _ in range(BIG // len(block)):
            await response.write(block)
        await response.write_eof()
        return response

    async def upload(request: web.Request) -> web.Response:
        digest = hashlib.sha256()
        size = 0
        async for chunk in request.content.iter_chunked(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        return web.json_response({"sha256": digest.hexdigest(), "size": size,
                                  "te": request.headers.get("Transfer-Encoding"),
                                  "length": request.headers.get("Content-Length")})

    app = web.Application(client_max_size=2**40)
    app.router.add_route("*", "/small", small)
    app.router.add_get("/chunked", chunked)
    app.router.add_post("/upload", upload)
    runner, url = await _serve(app)
    yield url
    await runner.cleanup()


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool(connect_timeout=1.0)
    yield pool
    await pool.close()


async def _read(pool: UpstreamPool, method: str, base: str, path: str,
                headers: list[tuple[str, str]] | None = None,
                body: AsyncIterator[bytes] | None = None) -> tuple[int, bytes]:
    response = await pool.request(method, base, path, headers or [("Host", "ide.test")], body)
    try:
        data = b""
        async for chunk in response.content.iter_any():
            data += chunk
        return response.status, data
    finally:
        response.release()


async def test_keep_alive_connections_are_reused(upstream: str, pool: UpstreamPool) -> None:
    for i in range(5):
        status, body = await _read(pool, "GET", upstream, f"/small?i={i}")
        assert status == 200 and body == f"hello /small?i={i}".encode()
    assert pool.connections_made == 1 and pool.idle_count() == 1


async def test_host_header_is_passed_as_given_or_set_from_the_base(upstream: str, pool: UpstreamPool) -> None:
    response = await pool.request("GET", upstream, "/small", [("Host", "ide.test")])
    assert response.headers["X-Seen-Host"] == "ide.test"
    await response.content.read()
    response.release()
    response = await pool.request("GET", upstream, "/small", [])
    assert response.headers["X-Seen-Host"] == upstream.split("://")[1]
    await response.content.read()
    response.release()
    assert pool.idle_count() == 1 and pool.connections_made == 1


async def test_a_response_left_unread_closes_its_connection(upstream: str, pool: UpstreamPool) -> None:
    response = await pool.request("GET", upstream, "/chunked", [])
    await response.content.readexactly(1000)
    response.release()
    assert pool.idle_count() == 0
    status, _ = await _read(pool, "GET", upstream, "/small")
    assert status == 200 and pool.connections_made == 2


async def test_chunked_large_body_streams_and_the_connection_is_reused(
        upstream: str, pool: UpstreamPool) -> None:
    response = await pool.request("GET", upstream, "/chunked", [])
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
    response.release()
    assert response.status == 200 and size == BIG
    assert response.content_length is None
    status, _ = await _read(pool, "GET", upstream, "/small")
    assert status == 200 and pool.connections_made == 1


async def test_head_has_no_body_and_keeps_the_connection(upstream: str, pool: UpstreamPool) -> None:
    response = await pool.request("HEAD", upstream, "/small", [])
    assert response.status == 200 and response.content_length == len(b"hello /small")
    assert response.content.is_eof()
    response.release()
    _, body = await _read(pool, "GET", upstream, "/small")
    assert body == b"hello /small" and pool.connections_made == 1


async def _blocks(count: int, size: int = 1 << 20) -> AsyncIterator[bytes]:
    for i in range(count):
        yield bytes([i % 256]) * size


async def test_request_bodies_chunked_or_with_their_length(upstream: str, pool: UpstreamPool) -> None:
    expected = hashlib.sha256(b"".join([bytes([i]) * (1 << 20) for i in range(16)])).hexdigest()
    status, body = await _read(pool, "POST", upstream, "/upload", [], _blocks(16))
    seen = json.loads(body)
    assert status == 200 and seen == {"sha256": expected, "size": 16 << 20, "te": "chunked", "length": None}
    status, body = await _read(pool, "POST", upstream, "/upload",
                               [("Content-Length", str(16 << 20))], _blocks(16))
    seen = json.loads(body)
    assert seen == {"sha256": expected, "size": 16 << 20, "te": None, "length": str(16 << 20)}
    assert pool.connections_made == 1


async def test_refused_connection(pool: UpstreamPool) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UpstreamError) as caught:
        await pool.request("GET", f"http://127.0.0.1:{port}", "/", [])
    assert caught.value.kind == "refused"


async def test_connect_timeout() -> None:
    # A listener that never accepts, its backlog filled: further SYNs go unanswered.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    pool = UpstreamPool(connect_timeout=0.5)
    try:
        with pytest.raises(UpstreamError) as caught:
            for _ in range(4):  # the first connects may still fit in the queue
                await pool.request("GET", f"http://127.0.0.1:{port}", "/", [])
        assert caught.value.kind in ("timeout", "broken")
    finally:
        await pool.close()
        for filler in fillers:
            filler.close()
        listener.close()


class _RawServer:
    """Answers each request with `reply`, then (if `close_after`) closes the connection,
    without saying so in the headers."""

    def __init__(self, reply: bytes, *, close_after: bool) -> None:
        self.reply = reply
        self.close_after = close_after
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(self.reply)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_connection_closed_by_the_server_while_pooled(pool: UpstreamPool) -> None:
    server = _RawServer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", close_after=True)
    base = await server.start()
    try:
        for _ in range(3):
            status, body = await _read(pool, "GET", base, "/")
            assert (status, body) == (200, b"ok")
            await asyncio.sleep(0.05)  # the server's close arrives while the connection is idle
        # and without the pause: the closed connection may be picked up; the request is retried
        for _ in range(3):
            status, body = await _read(pool, "GET", base, "/")
            assert (status, body) == (200, b"ok")
        assert server.connections == 6
    finally:
        await server.stop()


async def test_truncated_body_is_an_error_and_the_connection_is_not_pooled(pool: UpstreamPool) -> None:
    server = _RawServer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", close_after=True)
    base = await server.start()
    try:
        response = await pool.request("GET", base, "/", [])
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.content.read()
        response.release()
        assert pool.idle_count() == 0
    finally:
        await server.stop()


async def test_informational_answers_are_skipped(pool: UpstreamPool) -> None:
    server = _RawServer(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
                        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", close_after=False)
    base = await server.start()
    try:
        status, body = await _read(pool, "GET", base, "/")
        assert (status, body) == (201, b"ok")
        status, body = await _read(pool, "GET", base, "/")
        assert (status, body) == (201, b"ok") and server.connections == 1
    finally:
        await server.stop()


async def test_header_values_with_line_breaks_are_refused(upstream: str, pool: UpstreamPool) -> None:
    with pytest.raises(UpstreamError) as caught:
        await pool.request("GET", upstream, "/small", [("X-Evil", "a\r\nX-Injected: 1")])
    assert caught.value.kind == "broken" and pool.connections_made == 0


# -- idle connections: expiry when wanted, and the sweep --------------------------------------


class Clock:
    """How long the pool thinks connections have been idle; its sweeps still run on the loop's
    real timer (every `keepalive_timeout`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingServer:
    """A real keep-alive HTTP server that records each connection's opening and closing."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self.changed = asyncio.Event()
        self.close_after_answer = False
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> CountingServer:
        outer = self

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport
                outer.opened += 1

            def data_received(self, data: bytes) -> None:
                if b"\r\n\r\n" in data:
                    self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # type: ignore[attr-defined]
                    if outer.close_after_answer:
                        asyncio.get_running_loop().call_later(0.05, self.transport.close)

            def connection_lost(self, exc: Exception | None) -> None:
                outer.closed += 1
                outer.changed.set()

        self.server = await asyncio.get_running_loop().create_server(Protocol, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def until_closed(self, count: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while self.closed < count:
                self.changed.clear()
                await self.changed.wait()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def servers() -> AsyncIterator[list[CountingServer]]:
    started = [await CountingServer().start() for _ in range(2)]
    yield started
    for server in started:
        await server.stop()


async def test_an_idle_connection_found_expired_is_closed_and_a_new_one_made(
        servers: list[CountingServer]) -> None:
    clock, server = Clock(), servers[0]
    pool = UpstreamPool(keepalive_timeout=30, clock=clock)  # its sweep does not come in this test
    try:
        assert (await _read(pool, "GET", server.url, "/"))[0] == 200
        clock.now += 10  # idle, but within its keep-alive: reused
        assert (await _read(pool, "GET", server.url, "/"))[0] == 200
        assert (pool.connections_made, server.opened) == (1, 1)
        clock.now += 30.5  # idle longer than the keep-alive: closed when wanted, a new one made
        assert (await _read(pool, "GET", server.url, "/"))[0] == 200
        assert (pool.connections_made, server.opened) == (2, 2)
        await server.until_closed(1)
        assert pool.idle_count() == 1
    finally:
        await pool.close()


async def test_the_sweep_closes_expired_idle_connections_and_keeps_fresh_ones(
        servers: list[CountingServer]) -> None:
    clock = Clock()
    old, fresh = servers
    pool = UpstreamPool(keepalive_timeout=0.3, clock=clock)
    try:
        await _read(pool, "GET", old.url, "/")  # idle from 1000.0; the first sweep is due in 0.3 s
        clock.now += 0.2
        await _read(pool, "GET", fresh.url, "/")  # idle from 1000.2
        assert pool.idle_count() == 2
        clock.now += 0.15  # when the sweep runs: the old one is 0.35 idle, the fresh one 0.15
        await old.until_closed(1)
        assert (fresh.closed, pool.idle_count()) == (0, 1)
        clock.now += 1  # the sweep comes again while any connection is idle
        await fresh.until_closed(1)
        assert pool.idle_count() == 0
    finally:
        await pool.close()


async def test_the_sweep_drops_an_idle_connection_the_upstream_closed(servers: list[CountingServer]) -> None:
    clock, server = Clock(), servers[0]
    server.close_after_answer = True  # the upstream ends the connection a moment after answering
    pool = UpstreamPool(keepalive_timeout=0.3, clock=clock)  # its clock stands still: no expiry
    try:
        await _read(pool, "GET", server.url, "/")
        await server.until_closed(1)
        assert pool.idle_count() == 1  # pooled, but no longer usable
        deadline = asyncio.get_running_loop().time() + 5
        while pool.idle_count():  # the sweep (every 0.3 s) finds it unusable
            assert asyncio.get_running_loop().time() < deadline, "never swept"
            await asyncio.sleep(0.05)
        assert (await _read(pool, "GET", server.url, "/"))[0] == 200  # a new one serves
        assert pool.connections_made == 2
    finally:
        await pool.close()
