"""Load for the flood attack tests (tests/proxy/test_attack_flood.py), each part in a process of
its own so that the attacker, the gateway and the upstreams do not share one core's event loop:

- `Upstream`: a tiny HTTP/1.1 keep-alive server on asyncio protocols that answers every request
  `200` with `user=<the X-User it received>`: the web UI's and a student environment's stand-in
  (they are not what is attacked, and must never be the bottleneck);
- `attack`: N concurrent loops, each sending requests as fast as answers come, for S seconds and
  at least M requests in all (a loaded machine's attacker sends fewer a second: it goes on until
  the flood is the size the test means); every request a fresh random session cookie (or a login
  start), counted by status.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import secrets
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp


def _use_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class _Upstream(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
            user = b"-"
            for line in head.split(b"\r\n")[1:]:
                if line[:7].lower() == b"x-user:":
                    user = line[7:].strip()
            body = b"user=" + user
            out.append(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body))
        if out:
            self.transport.write(b"".join(out))


def _upstream_main(sock: socket.socket) -> None:
    _use_uvloop()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Upstream, sock=sock, backlog=1024)
        await server.serve_forever()

    asyncio.run(main())


class Upstream:
    """The stand-in upstream, in a process of its own; `url` is where it answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.process = multiprocessing.get_context("spawn").Process(
            target=_upstream_main, args=(self.sock,), daemon=True)
        self.process.start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(5)
        self.sock.close()


@dataclass(frozen=True)
class Target:
    """What one attacker loop sends: `cookie` names the session cookie to fill with a fresh
    random id per request (empty: none)."""

    host: str
    path: str
    cookie: str = ""
    random_path: bool = False


async def _attack(port: int, targets: list[Target], loops: int, seconds: float, at_least: int
                  ) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                     timeout=timeout) as http:
        deadline = time.monotonic() + seconds

        async def loop(target: Target) -> None:
            while time.monotonic() < deadline or sum(statuses.values()) < at_least:
                headers = {"Host": target.host, "Accept": "text/html"}
                if target.cookie:
                    headers["Cookie"] = f"{target.cookie}={secrets.token_urlsafe(32)}"
                path = target.path + (secrets.token_hex(4) if target.random_path else "")
                try:
                    async with http.get(f"http://127.0.0.1:{port}{path}", headers=headers,
                                        allow_redirects=False) as response:
                        await response.read()
                        statuses[str(response.status)] += 1
                except (aiohttp.ClientError, OSError, TimeoutError) as err:
                    statuses[type(err).__name__] += 1

        await asyncio.gather(*(loop(targets[i % len(targets)]) for i in range(loops)))
    return {"statuses": dict(statuses), "requests": sum(statuses.values()), "seconds": seconds}


def _attack_main(port: int, targets: list[Target], loops: int, seconds: float, at_least: int,
                 out: Any) -> None:
    _use_uvloop()
    out.put(asyncio.run(_attack(port, targets, loops, seconds, at_least)))


class Attack:
    """`loops` concurrent loops over `targets` for `seconds` and `at_least` requests, in a process
    of its own."""

    def __init__(self, port: int, targets: list[Target], loops: int, seconds: float, *,
                 at_least: int = 0) -> None:
        context = multiprocessing.get_context("spawn")
        self.queue = context.Queue()
        self.seconds = seconds
        self.process = context.Process(target=_attack_main,
                                       args=(port, targets, loops, seconds, at_least, self.queue))
        self.process.start()

    def result(self) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self.queue.get(timeout=self.seconds + 300)
            return found
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()


@dataclass
class Student:
    """A signed-in student's requests during an attack, one after another, a few a second."""

    name: str
    host: str
    path: str
    cookie: str
    login: str
    latencies: list[float]
    failures: list[str]

    async def run(self, http: aiohttp.ClientSession, port: int, until: float, pause: float = 0.1) -> None:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                async with http.get(f"http://127.0.0.1:{port}{self.path}", allow_redirects=False,
                                    headers={"Host": self.host, "Cookie": self.cookie}) as response:
                    body = await response.text()
                    ok = response.status == 200 and body == f"user={self.login}"
                    if not ok:
                        self.failures.append(f"{response.status} {body[:80]!r}")
            except (aiohttp.ClientError, OSError, TimeoutError) as err:
                self.failures.append(type(err).__name__)
            self.latencies.append(time.perf_counter() - started)
            await asyncio.sleep(pause)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0
