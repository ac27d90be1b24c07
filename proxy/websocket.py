"""WebSocket forwarding: text, binary, ping and pong both ways, and close codes both ways.

The upstream is connected first, so a refused upstream still gets the 502 page; then the
client's handshake is answered with the subprotocol the upstream chose. Neither side pings
or closes by itself (autoping/autoclose off): pings are passed through as pings, and a close
from one side is passed to the other with its code and reason, then answered.
Open sessions are tracked so a draining gateway can close them with 1001 (going away).
`WebSocketQuota` caps the WebSockets one signed-in user holds open in one gateway process
(one student opened 3,000, each with an upstream connection and two pump tasks); the one over
the cap is refused with a 429 page before the upstream is contacted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web
from multidict import CIMultiDict
from yarl import URL

from userland.platform.model.quota import PerUserQuota
from userland.proxy.upstream import UpstreamError

# Codes that must not appear in a close frame (RFC 6455 section 7.4.1); what to send instead.
_NOT_SENDABLE = {1004, 1005, 1006, 1015}
# How long a close being passed from one side to the other may take.
CLOSE_TIMEOUT = 5.0


WebSocketQuota = PerUserQuota  # WebSockets per user in this gateway process


def sendable_close_code(code: int | None) -> int:
    """The code to pass on for a close received as `code` (None: the peer just vanished)."""
    if code is None or code == 1006:
        return int(WSCloseCode.INTERNAL_ERROR)  # the other side dropped without a close frame
    if code in _NOT_SENDABLE or not (1000 <= code <= 4999):
        return int(WSCloseCode.OK)
    return code


# Closing a WebSocket to an environment that is not running (asleep, waking): an application
# code (4000-4999), 4503 after HTTP's "unavailable". docs/sleep.md explains it to site admins;
# apps reconnect, and the page's reload wakes the environment.
CLOSE_NOT_RUNNING = 4503


async def refuse_websocket(request: web.Request, reason: str) -> web.WebSocketResponse:
    """Accept the upgrade and close at once with CLOSE_NOT_RUNNING: never left hanging."""
    ws = web.WebSocketResponse(protocols=requested_protocols(request)[:1], autoping=False)
    await ws.prepare(request)
    await ws.close(code=CLOSE_NOT_RUNNING, message=reason.encode()[:123])
    return ws


async def refuse_vscode(request: web.Request, frame: bytes) -> web.WebSocketResponse:
    """Accept a VS Code workbench's (re)connection and refuse it in its own protocol: wait for
    its first message (the handshake's `auth`, briefly), answer `frame`
    (proxy/rules/vscode_frames.py `handshake_error`), close. A plain refused upgrade makes it retry in
    a loop for minutes while the tab looks normal; this makes it stop and offer a reload."""
    ws = web.WebSocketResponse(protocols=requested_protocols(request)[:1], autoping=False)
    await ws.prepare(request)
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, ConnectionError):
        await ws.receive(timeout=5)
        await ws.send_bytes(frame)
    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"help access ended")
    return ws


def is_websocket_upgrade(request: web.Request) -> bool:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return False
    tokens = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return "upgrade" in tokens and request.method == "GET"


def requested_protocols(request: web.Request) -> tuple[str, ...]:
    value = ",".join(request.headers.getall("Sec-WebSocket-Protocol", ()))
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(eq=False)  # identity semantics: kept in a set of open sessions
class WebSocketPair:
    client: web.WebSocketResponse
    upstream: aiohttp.ClientWebSocketResponse
    # Set as soon as one side's close is being passed to the other: (code, reason).
    closing: tuple[int, bytes] | None = None

    async def close_going_away(self) -> None:
        """Close both sides with 1001 (the gateway is shutting down)."""
        self.closing = self.closing or (int(WSCloseCode.GOING_AWAY), b"gateway shutting down")
        await asyncio.gather(
            self.client.close(code=WSCloseCode.GOING_AWAY, message=b"gateway shutting down"),
            self.upstream.close(code=WSCloseCode.GOING_AWAY, message=b"gateway shutting down"),
            return_exceptions=True,
        )


async def _pump(pair: WebSocketPair, source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                on_data: Callable[[bytes | str], None] | None = None) -> None:
    """Copy messages from `source` to `sink` until `source` closes; pass the close on.
    `on_data(data)` hears each data frame (the browser's side: activity)."""
    while True:
        msg = await source.receive()
        if msg.type is WSMsgType.TEXT:
            if on_data is not None:
                on_data(msg.data)
            await sink.send_str(msg.data)
        elif msg.type is WSMsgType.BINARY:
            if on_data is not None:
                on_data(msg.data)
            await sink.send_bytes(msg.data)
        elif msg.type is WSMsgType.PING:
            await sink.ping(msg.data)
        elif msg.type is WSMsgType.PONG:
            await sink.pong(msg.data)
        elif msg.type is WSMsgType.CLOSE:
            code = sendable_close_code(msg.data)
            reason = (msg.extra or "").encode()[:123]
            pair.closing = pair.closing or (code, reason)
            # Answer the close first: the other pump then sees CLOSING and leaves this side be.
            await source.close(code=code, message=reason)
            await sink.close(code=code, message=reason)
            return
        elif msg.type is WSMsgType.CLOSING:
            return  # closed from this process (the other pump, or a draining gateway)
        else:  # CLOSED, ERROR: the source vanished without a close frame
            pair.closing = pair.closing or (sendable_close_code(None), b"")
            await sink.close(code=pair.closing[0], message=pair.closing[1])
            return


async def forward_websocket(
    request: web.Request, session: aiohttp.ClientSession, url: URL, headers: CIMultiDict[str],
    *, register: Callable[[WebSocketPair], None], unregister: Callable[[WebSocketPair], None],
    on_client_data: Callable[[bytes | str], None] | None = None,
) -> web.WebSocketResponse:
    ws_url = url.with_scheme("wss" if url.scheme == "https" else "ws")
    try:
        upstream = await session.ws_connect(
            ws_url, headers=headers, protocols=requested_protocols(request),
            autoclose=False, autoping=False, max_msg_size=0, compress=0,
        )
    except aiohttp.WSServerHandshakeError as err:
        raise UpstreamError("handshake", f"upstream answered {err.status}") from None
    except aiohttp.ClientConnectorError as err:
        raise UpstreamError("refused", str(err)) from None
    except TimeoutError:
        raise UpstreamError("timeout", "no answer in time") from None
    except aiohttp.ClientError as err:
        raise UpstreamError("broken", repr(err)) from None

    client = web.WebSocketResponse(
        protocols=(upstream.protocol,) if upstream.protocol else (),
        autoclose=False, autoping=False, max_msg_size=0,
    )
    pair = WebSocketPair(client, upstream)
    try:
        await client.prepare(request)
    except Exception:
        await upstream.close()
        raise
    register(pair)
    pumps = {asyncio.create_task(_pump(pair, client, upstream, on_client_data)),
             asyncio.create_task(_pump(pair, upstream, client))}
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also when this handler is cancelled (the client's connection dropped right after
        # its close frame): a close being passed on is allowed to finish first.
        if pair.closing is not None:
            await asyncio.wait(pumps, timeout=CLOSE_TIMEOUT)
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        code, reason = pair.closing or (int(WSCloseCode.OK), b"")
        for side in (upstream, client):
            if not side.closed:
                with contextlib.suppress(Exception):
                    await side.close(code=code, message=reason)
        unregister(pair)
    return client
