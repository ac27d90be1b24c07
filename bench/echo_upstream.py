"""The benchmarks' upstream: HTTP/1.1 keep-alive with a fixed body, and a WebSocket echo, on
asyncio protocols (uvloop) in processes sharing one port: a few microseconds per request, so it
is never the bottleneck (bench/gateway_bench.py, bench/help_bench.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import multiprocessing
import signal
import socket
import struct

from bench_processes import use_uvloop  # bench/ is this script's folder

BODY = b"hello from the upstream\n"
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _http_response(body: bytes, status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "\r\n").encode() + body


OK = _http_response(BODY)


class Upstream(asyncio.Protocol):
    """GET/HEAD without bodies (what the benchmark sends); `/whoami` answers the X-User it got;
    an `Upgrade: websocket` request becomes an echo of text/binary frames."""

    def __init__(self) -> None:
        self.buf = b""
        self.ws = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.ws:
            self._frames()
            return
        assert self.transport is not None
        out = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            if b"websocket" in head.lower():
                self._upgrade(head)
                self._frames()
                break
            if head.startswith(b"GET /whoami"):
                user = b""
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"x-user:"):
                        user = line.split(b":", 1)[1].strip()
                out.append(_http_response(user))
            else:
                out.append(OK)
        if out:
            self.transport.write(b"".join(out))

    def _upgrade(self, head: bytes) -> None:
        assert self.transport is not None
        key = b""
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"sec-websocket-key:"):
                key = line.split(b":", 1)[1].strip()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        self.transport.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        self.ws = True

    def _frames(self) -> None:
        assert self.transport is not None
        buf = self.buf
        out = []
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]
            length = b1 & 0x7F
            pos = 2
            if length == 126:
                if len(buf) < 4:
                    break
                length = struct.unpack(">H", buf[2:4])[0]
                pos = 4
            elif length == 127:
                if len(buf) < 10:
                    break
                length = struct.unpack(">Q", buf[2:10])[0]
                pos = 10
            masked = b1 & 0x80
            mask = buf[pos:pos + 4] if masked else b""
            pos += 4 if masked else 0
            if len(buf) < pos + length:
                break
            payload = buf[pos:pos + length]
            buf = buf[pos + length:]
            if masked:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping -> pong
                b0 = 0x80 | 0xA
            elif opcode == 0xA:
                continue
            n = len(payload)
            if n < 126:
                header = bytes([b0, n])
            elif n < 65536:
                header = bytes([b0, 126]) + struct.pack(">H", n)
            else:
                header = bytes([b0, 127]) + struct.pack(">Q", n)
            out.append(header + payload)
            if opcode == 0x8:  # close: echoed, then the connection ends
                self.transport.write(b"".join(out))
                self.transport.close()
                self.buf = b""
                return
        self.buf = buf
        if out:
            self.transport.write(b"".join(out))


def _upstream_main(port: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_uvloop()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(
            Upstream, "127.0.0.1", port, reuse_port=True, backlog=4096)
        await server.serve_forever()

    asyncio.run(main())


class UpstreamServers:
    """`processes` servers sharing one port (SO_REUSEPORT), spawned (no fork of a running loop)."""

    def __init__(self, processes: int) -> None:
        self.sock = socket.socket()  # holds the port number; never listens
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        ctx = multiprocessing.get_context("spawn")
        self.procs = [ctx.Process(target=_upstream_main, args=(self.port,), daemon=True)
                      for _ in range(processes)]
        for proc in self.procs:
            proc.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.join(5)
        self.sock.close()
