"""A slim pooled HTTP/1.1 client for the gateway's upstream requests.

aiohttp's `ClientSession.request` spent about 40% of a gateway worker's CPU per proxied request
in Python bookkeeping (URL objects, auto headers, cookie jars, traces, timers, the connector's
generic pool). This client keeps aiohttp's own C-parser protocol (`ResponseHandler`, the one
`ClientSession` reads responses with: same parser, same `StreamReader` bodies with the same
flow control) and does the rest directly:
- one keep-alive pool of idle connections per (scheme, host, port), most recently used first,
  no limit (as the former `TCPConnector(limit=0)`), idle connections closed after 60 s (one
  found expired when it is wanted is closed then; a sweep every `keepalive_timeout` while any
  are idle closes the rest, and those the upstream closed meanwhile);
- the request line and headers serialized in one buffer and sent in one write;
- a request body streamed as it arrives (length-delimited when the client sent a
  Content-Length, chunked otherwise), waiting for the socket to drain (backpressure);
- a connection goes back to the pool only after a complete response (body read to its end,
  request body fully sent, nothing left over, no `Connection: close`); anything else closes it;
- a request that fails on a reused connection before any byte of an answer (the upstream
  closed it while it was idle) is retried once on a new connection when it has no body.
A response without Content-Length or chunked framing is read until the upstream closes the
connection (never pooled again).
Errors are `UpstreamError` kinds as before: "refused" (connect failed), "timeout" (connect
timed out), "broken" (the connection failed before a complete response head).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

from aiohttp import ClientError, web
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import RawResponseMessage
from aiohttp.streams import StreamReader
from multidict import CIMultiDictProxy

KEEPALIVE_TIMEOUT = 60.0
READ_BUFSIZE = 2**18
_BODYLESS_DEFAULT_LENGTH = frozenset({"POST", "PUT", "PATCH"})
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})

Key = tuple[str, str, int]


class UpstreamError(Exception):
    """The upstream could not be reached, or a response broke off; `kind` names how.

    `response` is set when the status line had already gone out (nothing more can be sent).
    """

    def __init__(self, kind: str, detail: str, response: web.StreamResponse | None = None) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.response = response


class _Base:
    """A base URL taken apart once: where to connect, and the path to put before the target."""

    __slots__ = ("key", "netloc", "path", "server_hostname")

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        self.key: Key = (scheme, parts.hostname, port)
        self.netloc = parts.netloc
        self.path = parts.path.rstrip("/")
        self.server_hostname = parts.hostname


class UpstreamResponse:
    """Status, reason, headers and the body (`content`, an aiohttp StreamReader).
    Call `release()` when done with it (always: it returns or closes the connection)."""

    __slots__ = ("_conn", "_pool", "_sender", "content", "message", "reason", "status")

    def __init__(self, pool: UpstreamPool, conn: _Connection, message: RawResponseMessage,
                 content: StreamReader, sender: asyncio.Task[None] | None) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._sender = sender
        self.message = message
        self.status = message.code
        self.reason = message.reason
        self.content = content

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self.message.headers

    @property
    def content_length(self) -> int | None:
        value = self.message.headers.get("Content-Length")
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            return None

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        sender = self._sender
        reusable = (self.content.is_eof() and (sender is None or (sender.done() and not sender.cancelled()
                                                                   and sender.exception() is None)))
        if sender is not None and not sender.done():
            sender.cancel()
        self._pool._release(conn, reusable=reusable)


class _Connection:
    __slots__ = ("idle_since", "key", "protocol")

    def __init__(self, key: Key, protocol: ResponseHandler) -> None:
        self.key = key
        self.protocol = protocol
        self.idle_since = 0.0

    def usable(self) -> bool:
        protocol = self.protocol
        return protocol.is_connected() and not protocol.should_close

    def close(self) -> None:
        self.protocol.close()


class UpstreamPool:
    def __init__(self, *, connect_timeout: float = 10.0, keepalive_timeout: float = KEEPALIVE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.connect_timeout = connect_timeout
        self.keepalive_timeout = keepalive_timeout
        self._clock = clock  # how long a connection has been idle (tests give their own)
        self._idle: dict[Key, list[_Connection]] = {}
        self._bases: dict[str, _Base] = {}
        self._ssl: ssl.SSLContext | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        self.connections_made = 0  # for tests: how many connections were opened

    # -- the public part

    async def request(self, method: str, base: str, target: str, headers: list[tuple[str, str]],
                      body: AsyncIterator[bytes] | None = None) -> UpstreamResponse:
        """Send `method` `base + target` with exactly `headers` (plus Host when missing, and
        the body framing); returns once the response head has arrived."""
        parsed = self._bases.get(base)
        if parsed is None:
            parsed = _Base(base)
            if len(self._bases) > 10_000:
                self._bases.clear()
            self._bases[base] = parsed
        if not target.startswith("/"):
            target = "/" + target
        head, chunked = _head(method, parsed.path + target, headers, parsed.netloc, body is not None)
        retry = body is None and method in _IDEMPOTENT
        while True:
            conn, reused = self._idle_connection(parsed.key)
            if conn is None:
                conn = await self._connect(parsed)
            try:
                return await self._exchange(conn, method, head, body, chunked)
            except UpstreamError:
                if reused and retry:
                    retry = False
                    continue
                raise

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def idle_count(self) -> int:
        return sum(len(conns) for conns in self._idle.values())

    # -- connections

    def _idle_connection(self, key: Key) -> tuple[_Connection | None, bool]:
        conns = self._idle.get(key)
        if not conns:
            return None, False
        deadline = self._clock() - self.keepalive_timeout
        while conns:
            conn = conns.pop()
            if conn.idle_since > deadline and conn.usable():
                return conn, True
            conn.close()
        return None, False

    async def _connect(self, base: _Base) -> _Connection:
        loop = asyncio.get_running_loop()
        scheme, host, port = base.key
        ssl_context: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_context = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(
                    lambda: ResponseHandler(loop), host, port, ssl=ssl_context,
                    server_hostname=base.server_hostname if ssl_context else None)
        except TimeoutError:
            raise UpstreamError("timeout", "no answer in time") from None
        except OSError as err:  # refused, unreachable, name not found, TLS failure
            raise UpstreamError("refused", f"cannot connect to {host}:{port}: {err}") from None
        self.connections_made += 1
        return _Connection(base.key, protocol)

    def _release(self, conn: _Connection, *, reusable: bool) -> None:
        if self._closed or not reusable or not conn.usable():
            conn.close()
            return
        conn.idle_since = self._clock()
        self._idle.setdefault(conn.key, []).append(conn)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self.keepalive_timeout, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        deadline = self._clock() - self.keepalive_timeout
        for key in list(self._idle):
            kept = []
            for conn in self._idle[key]:
                if conn.idle_since > deadline and conn.usable():
                    kept.append(conn)
                else:
                    conn.close()
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]
        if self._idle and not self._closed:
            self._sweeper = asyncio.get_running_loop().call_later(self.keepalive_timeout, self._sweep)

    # -- one request/response exchange

    async def _exchange(self, conn: _Connection, method: str, head: bytes,
                        body: AsyncIterator[bytes] | None, chunked: bool) -> UpstreamResponse:
        protocol = conn.protocol
        transport = protocol.transport
        if transport is None:
            raise UpstreamError("broken", "connection closed")
        # read_until_eof: a response with neither Content-Length nor chunked framing ends when
        # the upstream closes (HTTP/1.1 section 6.3; PHP's built-in server answers so).
        protocol.set_response_params(skip_payload=method == "HEAD", auto_decompress=False,
                                     read_bufsize=READ_BUFSIZE, read_until_eof=True)
        sender: asyncio.Task[None] | None = None
        try:
            transport.write(head)
            if body is not None:
                sender = asyncio.ensure_future(_send_body(protocol, body, chunked))
            while True:
                message, payload = await protocol.read()
                # 1xx answers (other than 101) precede the real one: skip them.
                if not 100 <= message.code <= 199 or message.code == 101:
                    break
        except (ClientError, HttpProcessingError, OSError) as err:
            if sender is not None:
                sender.cancel()
            conn.close()
            raise UpstreamError("broken", repr(err)) from None
        except BaseException:
            if sender is not None:
                sender.cancel()
            conn.close()
            raise
        return UpstreamResponse(self, conn, message, payload, sender)


async def _send_body(protocol: ResponseHandler, body: AsyncIterator[bytes], chunked: bool) -> None:
    transport = protocol.transport
    try:
        async for chunk in body:
            if not chunk:
                continue
            if transport is None or transport.is_closing():
                raise ConnectionResetError("upstream connection closed")
            if chunked:
                transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
            else:
                transport.write(chunk)
            await protocol._drain_helper()
        if chunked and transport is not None and not transport.is_closing():
            transport.write(b"0\r\n\r\n")
    except BaseException:
        # The upstream must not take a truncated body for a whole one.
        protocol.force_close()
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.abort()
        raise


def _head(method: str, target: str, headers: list[tuple[str, str]], netloc: str,
          has_body: bool) -> tuple[bytes, bool]:
    """The request line and headers as one buffer; whether the body goes chunked."""
    has_host = has_length = False
    lines = [f"{method} {target} HTTP/1.1"]
    append = lines.append
    for name, value in headers:
        lower = name.lower()
        if lower == "host":
            has_host = True
        elif lower == "content-length":
            has_length = True
        elif lower == "transfer-encoding":
            continue  # framing is this client's business (headers.py drops it anyway)
        append(f"{name}: {value}")
    if not has_host:
        append(f"Host: {netloc}")
    chunked = False
    if has_body and not has_length:
        append("Transfer-Encoding: chunked")
        chunked = True
    elif not has_body and not has_length and method in _BODYLESS_DEFAULT_LENGTH:
        append("Content-Length: 0")
    text = "\r\n".join(lines)
    breaks = len(lines) - 1
    if text.count("\n") != breaks or text.count("\r") != breaks:
        raise UpstreamError("broken", "a header holds a line break")
    return (text + "\r\n\r\n").encode("utf-8", "surrogateescape"), chunked
