"""Connection limits of the gateway's HTTP server, below aiohttp's request handling.

aiohttp's server alone let anyone exhaust the gateway without logging in: it buffered up to
128 header fields of 32 KiB each per connection (sixty unfinished requests took 63 -> 519 MiB),
kept a connection that sent nothing for an hour, and accepted any number of connections from
one address. `GuardedRequestHandler` (aiohttp's `RequestHandler` plus these checks) enforces:
- at most `max_header_bytes` for one request head: counted as bytes arrive, before aiohttp
  parses them, so a connection never holds more than that plus one read; over it: 431, closed;
- a head must be complete `header_timeout` seconds after its first byte (slowloris): 408, closed;
- idle keep-alive connections, and new ones that send nothing, are closed after
  `keepalive_timeout` (aiohttp's own timer, set shorter);
- at most `max_connections_per_client` open connections per client address (an IPv6 /64
  counts as one address; 0: no limit);
  one more is answered 429 and closed. Behind a load balancer that does not keep client
  addresses they all share one, hence a generous default;
- a malformed request is answered 400 (a fixed text, not aiohttp's, which quotes the header)
  and logged as one line (the client's address and the error's kind), never as a traceback
  holding the header's bytes.
Refusals write a minimal HTTP/1.1 response themselves only while no request is in progress
on the connection (otherwise the connection is just closed).

`GatewayRunner` is an `AppRunner` whose server makes these handlers; `userland gateway` runs
the app with it. The handler relies on aiohttp 3.14's RequestHandler attributes
(`_payload_parser`, `_upgraded`, `_messages`, `_request_count`); tests/proxy/test_hardening_limits.py
performs each attack against the real server, so an aiohttp change that breaks one shows there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader

from userland.platform.model.settings import Settings

log = logging.getLogger(__name__)

# After a refusal, how long the client's remaining bytes are read and dropped before closing.
LINGER_SECONDS = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 15.0
    keepalive_timeout: float = 30.0
    max_connections_per_client: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(max_header_bytes=settings.max_header_bytes,
                   header_timeout=settings.header_timeout_seconds,
                   keepalive_timeout=settings.keepalive_timeout_seconds,
                   max_connections_per_client=settings.max_connections_per_client)


@dataclass
class ConnectionCounts:
    """Open connections per client address, for one server (one gateway process)."""

    limits: ConnectionLimits
    per_client: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=lambda: {"connections": 0, "header_size": 0,
                                                              "header_timeout": 0, "bad_request": 0})
    total: int = 0  # open connections, every address together (/metrics)

    def opened(self, address: str) -> bool:
        """Count a new connection from `address`; False when it is one too many."""
        count = self.per_client.get(address, 0)
        limit = self.limits.max_connections_per_client
        if limit and count >= limit:
            return False
        self.per_client[address] = count + 1
        self.total += 1
        return True

    def closed(self, address: str) -> None:
        self.total -= 1
        count = self.per_client.get(address, 0) - 1
        if count > 0:
            self.per_client[address] = count
        else:
            self.per_client.pop(address, None)


def client_key(address: str) -> str:
    """What connections are counted by: the IPv4 address, or an IPv6 address's /64 (one
    subscriber usually holds a whole /64, so counting single IPv6 addresses would be no limit)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _raw_response(status: int, reason: str, text: str) -> bytes:
    body = text.encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
            ).encode() + body


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's request handler with the limits described in the module docstring."""

    def __init__(self, manager: web.Server, *, counts: ConnectionCounts, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._counts = counts
        self._address: str | None = None
        self._head_bytes = 0
        self._head_started = 0.0  # the loop time of the head's first byte
        self._head_timer: asyncio.TimerHandle | None = None
        # The body of the latest request: while it is still arriving, bytes are body, not head.
        self._last_payload: StreamReader | None = None
        self._lingering = False
        self._head_tail = b""  # the last bytes of the head so far: its end may straddle two reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = client_key(str(peer[0])) if isinstance(peer, tuple) and peer else ""
        if not self._counts.opened(address):
            self._counts.refused["connections"] += 1
            log.info("connection refused: too many from one address",
                     extra={"event": "gateway.too_many_connections", "client": address,
                            "limit": self._counts.limits.max_connections_per_client})
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(_raw_response(429, "Too Many Requests",
                                              "Too many connections from your address.\n"))
            transport.close()
            return  # never handed to aiohttp: no task, no timers
        self._address = address
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._address is None:
            return  # refused in connection_made: aiohttp never saw it
        self._counts.closed(self._address)
        self._address = None
        self._stop_head_timer()
        super().connection_lost(exc)

    def _reading_head(self) -> bool:
        if self._payload_parser is not None or self._upgraded:
            return False  # a WebSocket (or other upgraded protocol): frames, not requests
        payload = self._last_payload
        return payload is None or payload.is_eof()

    def data_received(self, data: bytes) -> None:
        if self._address is None or self._lingering or self._force_close or self._close:
            return
        reading_head = self._reading_head()
        if reading_head:
            if self._head_bytes == 0:
                self._head_started = self._loop.time()
            room = self._counts.limits.max_header_bytes - self._head_bytes
            self._head_bytes += len(data)
            if self._head_bytes > self._counts.limits.max_header_bytes and not self._head_ends(data, room):
                self._counts.refused["header_size"] += 1
                log.info("request refused: head too large", extra={
                    "event": "gateway.header_too_large", "client": self._address,
                    "limit": self._counts.limits.max_header_bytes})
                self._refuse(431, "Request Header Fields Too Large", "Request headers too large.\n")
                return
            self._head_tail = data[-3:]
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            # A head was parsed (and maybe part of its body): the next head starts from zero.
            self._head_bytes = 0
            if self._head_timer is not None:
                self._stop_head_timer()
            self._last_payload = self._messages[-1][1] if self._messages else None
        elif reading_head and self._head_bytes and self._head_timer is None:
            # A head still incomplete after this read (most arrive whole in one): its deadline
            # counts from its first byte. No timer at all for the heads that arrive whole.
            self._head_timer = self._loop.call_at(
                self._head_started + self._counts.limits.header_timeout, self._head_too_slow)

    def _head_ends(self, data: bytes, room: int) -> bool:
        """Whether the head ends within its first `room` bytes of `data` (the rest of such a
        chunk is body, or the next pipelined request, which gets its own count)."""
        if room <= 0:
            return False
        return (self._head_tail + data[:room]).find(b"\r\n\r\n") != -1

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._address is None or not self._reading_head() or self._head_bytes == 0:
            return
        self._counts.refused["header_timeout"] += 1
        log.info("request refused: head not complete in time", extra={
            "event": "gateway.header_timeout", "client": self._address,
            "seconds": self._counts.limits.header_timeout})
        self._refuse(408, "Request Timeout", "Request headers took too long.\n")

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status: int, reason: str, text: str) -> None:
        transport = self.transport
        if transport is None or transport.is_closing() or self._request_in_progress:
            self.force_close()
            return
        # Answer, end our side, and read (and drop) what the client still sends for a moment:
        # closing with unread data would reset the connection and lose the answer.
        transport.write(_raw_response(status, reason, text))
        if transport.can_write_eof():
            transport.write_eof()
        self._lingering = True
        self._stop_head_timer()
        self._loop.call_later(LINGER_SECONDS, self.force_close)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError) and status < 500:
            # aiohttp's own text quotes the offending header back; ours does not.
            message = "Bad request: malformed request line or headers.\n"
        return super().handle_error(request, status, exc, message)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            # A malformed request (bad header bytes, a line too long...): the client's fault, and
            # its message would quote the header. One line; aiohttp answers 400 by itself.
            self._counts.refused["bad_request"] += 1
            log.info("malformed request refused", extra={
                "event": "gateway.bad_request", "client": self._address or "",
                "error": type(exc).__name__, "status": getattr(exc, "code", 400)})
            return
        super().log_exception(*args, **kw)


class GuardedServer(web.Server):
    """An aiohttp low-level server whose connections are `GuardedRequestHandler`s."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counts = ConnectionCounts(limits)
        # What aiohttp's Server passes to each RequestHandler, with the shorter keep-alive.
        self._handler_kwargs = {**self._kwargs, "keepalive_timeout": limits.keepalive_timeout}

    def __call__(self) -> GuardedRequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, counts=self.counts, **self._handler_kwargs)


class GatewayRunner(web.AppRunner):
    """`web.AppRunner` serving the app through a `GuardedServer` with `limits`."""

    def __init__(self, app: web.Application, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._limits = limits

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return GuardedServer(plain.request_handler, request_factory=plain.request_factory,
                             handler_cancellation=plain.handler_cancellation, loop=plain._loop,
                             limits=self._limits, **plain._kwargs)

    @property
    def counts(self) -> ConnectionCounts:
        server = self.server
        assert isinstance(server, GuardedServer), "GatewayRunner.setup() was not called"
        return server.counts
