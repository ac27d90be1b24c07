"""Which WebSocket frames from a VS Code (code-server) tab are the student using it.

An open VS Code tab talks all the time by itself: keep-alives every 5 s, a telemetry ping every
2 s, and, once a second, an echo of a file-watch event for a lock file the workbench itself
touches (`$onFileEvent`, 230-400 bytes). Typing sends frames of 36-60 bytes. No size rule
separates the two (docs/sleep.md), so a Template with `activity.webSocketProtocol: vscode` has
its frames read as VS Code's remote protocol, and only messages that are not known background
count.

The protocol (VS Code's `ipc.net.ts`, stable since 2019): a WebSocket message carries one or
more protocol messages, each a 13-byte header (type: 1 byte; id, ack, data length: 4 bytes
big-endian) and its data. Regular messages (type 1) carry one of two encodings:
- the extension host's RPC (`rpcProtocol.ts`): a message type byte; requests (1-4) go on with
  a 4-byte request id, a 1-byte proxy id and the method name (1-byte length, e.g.
  `$acceptTerminalInteraction`); 5-12 are acknowledgements, cancels and replies.
- the management channels (`ipc.ts`): a serialized header array `[type, id, channel, command]`
  (e.g. `remoteterminal` `$input`, `telemetry` `ping`); types 100 (call), 101 (cancel), 102
  (listen), 103 (stop listening).

The rule fails toward awake: anything that does not decode, and any request whose name is not
on the background list below, counts. Replies, acknowledgements, cancels and event
(un)subscriptions never count: they answer the server or manage plumbing, and a student who
acts also sends requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

HEADER_BYTES = 13
REGULAR = 1  # other protocol message types: control, ack, keep-alive, disconnect, replay, pause...

# Requests an idle tab sends by itself (measured on code-server 4.100: tests/proxy/golden/).
BACKGROUND_RPC = frozenset({
    "$onFileEvent",                        # file-watch echo (e.g. the workbench's lock file)
    "$onDidTunnelsChange",                 # port-forwarding list refresh, every few seconds
    "$provideDecorations",                 # the git extension's periodic status refresh ...
    "$provideOriginalResource",            # ... and its quick-diff of open files
    "$provideSecondaryOriginalResource",
    "$onDidChangeWindowActive",            # the tab gained or lost focus
    # What a terminal prints, passed on by the tab: a program writing output while nobody
    # types (a server's log, `tail -f`) is a tab that only receives.
    "$shellExecutionStart",
    "$shellExecutionData",
    "$shellExecutionEnd",
    "$acceptTerminalTitleChange",
    "$acceptTerminalShellType",
    "$cwdChange",
    "$shellIntegrationChange",
})
BACKGROUND_CALLS = frozenset({
    ("telemetry", "ping"),                 # every 2 s
    ("remoteterminal", "$updateTitle"),    # a terminal's title follows the program it runs
    ("remoteterminal", "$acknowledgeDataEvent"),  # flow control: "I got the output so far"
})

_RPC_REQUESTS = range(1, 5)     # RequestJSONArgs .. RequestMixedArgsWithCancellation
_RPC_REPLIES = range(5, 13)     # Acknowledged, Cancel, ReplyOK*, ReplyErr*
_IPC_ARRAY, _IPC_INT, _IPC_STRING = 4, 6, 1
_IPC_CALL, _IPC_LISTEN = 100, 102
_PLUMBING = ("", "")  # cancel, listen, stop listening


CONTROL = 2  # a control message: the handshake's JSON (auth, sign, connectionType, ok, error)


class Undecodable(ValueError):
    pass


def handshake_error(reason: str) -> bytes:
    """The frame a VS Code server sends to refuse a connection: a control message
    `{"type": "error", "reason": ...}`. The workbench takes it as a permanent failure (its
    `VSCODE_CONNECTION_ERROR`): it stops reconnecting at once and asks to reload the window,
    where the reload shows the gateway's page saying why."""
    data = json.dumps({"type": "error", "reason": reason}).encode()
    # Header: type, id and ack (0 for control messages), the data's length; then the data.
    return bytes([CONTROL]) + bytes(8) + len(data).to_bytes(4, "big") + data


def counts_as_use(frame: bytes) -> bool:
    """Whether this frame from the browser holds anything the student did (see module doc)."""
    try:
        return any(_message_counts(data) for kind, data in _messages(frame) if kind == REGULAR)
    except Undecodable:
        return True


def _messages(frame: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 0
    if not frame:
        raise Undecodable("empty frame")
    while offset < len(frame):
        if len(frame) - offset < HEADER_BYTES:
            raise Undecodable("truncated header")
        kind = frame[offset]
        length = int.from_bytes(frame[offset + 9:offset + 13], "big")
        end = offset + HEADER_BYTES + length
        if end > len(frame):
            raise Undecodable("message longer than its frame")
        yield kind, frame[offset + HEADER_BYTES:end]
        offset = end


def _message_counts(data: bytes) -> bool:
    call = _ipc_call(data)
    if call is not None:
        return call != _PLUMBING and call not in BACKGROUND_CALLS
    if not data:
        raise Undecodable("empty message")
    kind = data[0]
    if kind in _RPC_REPLIES:
        return False
    if kind in _RPC_REQUESTS:
        return _rpc_method(data) not in BACKGROUND_RPC
    raise Undecodable(f"unknown message type {kind}")


def _rpc_method(data: bytes) -> str:
    # type (1), request id (4), proxy id (1), method name length (1), method name
    if len(data) < 7:
        raise Undecodable("short request")
    length = data[6]
    name = data[7:7 + length]
    if len(name) != length:
        raise Undecodable("short method name")
    return name.decode("ascii", "replace")


def _ipc_call(data: bytes) -> tuple[str, str] | None:
    """(channel, command) of a management-channel call; ("", "") for plumbing that never
    counts (cancel, listen, stop listening); None when `data` is not that encoding."""
    # The header array: 0x04, its length (2 or 4), then an Int (0x06) request type.
    if len(data) < 4 or data[0] != _IPC_ARRAY or data[1] not in (2, 4) or data[2] != _IPC_INT:
        return None
    reader = _Reader(data, 3)
    request_type = reader.varint()
    if request_type != _IPC_CALL:
        return _PLUMBING if 100 < request_type <= 103 else None
    if data[1] != 4:
        raise Undecodable("a call header has four parts")
    reader.expect(_IPC_INT)
    reader.varint()  # request id
    reader.expect(_IPC_STRING)
    channel = reader.string()
    reader.expect(_IPC_STRING)
    return channel, reader.string()


class _Reader:
    def __init__(self, data: bytes, offset: int) -> None:
        self.data, self.offset = data, offset

    def byte(self) -> int:
        if self.offset >= len(self.data):
            raise Undecodable("short call header")
        value = self.data[self.offset]
        self.offset += 1
        return value

    def expect(self, tag: int) -> None:
        if self.byte() != tag:
            raise Undecodable("unexpected value in a call header")

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise Undecodable("varint too long")

    def string(self) -> str:
        length = self.varint()
        text = self.data[self.offset:self.offset + length]
        if len(text) != length:
            raise Undecodable("short string")
        self.offset += length
        return text.decode("utf-8", "replace")
