"""The benchmarks' load: wrk for HTTP (its figures parsed), an aiohttp client for WebSockets
(echo round trips per second, in a process of its own), and many idle WebSockets held open."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import subprocess
import time
from typing import Any

import aiohttp
from bench_processes import Proc, use_uvloop  # bench/ is this script's folder

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    if not match:
        raise ValueError(f"wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(out: str) -> dict[str, float]:
    result: dict[str, float] = {}
    for pct in ("50", "99"):
        match = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        if match:
            result[f"p{pct}_ms"] = _ms(match.group(1))
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    result["rps"] = float(match.group(1)) if match else 0.0
    match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    result["non_2xx"] = float(match.group(1)) if match else 0.0
    match = re.search(r"Socket errors:.*", out)
    result["socket_errors"] = 1.0 if match else 0.0
    return result


def wrk(port: int, seconds: float, connections: int, headers: list[str]) -> tuple[dict[str, float], str]:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "--timeout", "5s"]
    for header in headers:
        cmd += ["-H", header]
    cmd.append(f"http://127.0.0.1:{port}/")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    return parse_wrk(out), out


async def ws_throughput(port: int, headers: dict[str, str], connections: int, seconds: float,
                        payload: str | bytes = "x" * 64) -> float:
    """Round trips per second: K connections each sending a message and awaiting its echo."""
    url = f"http://127.0.0.1:{port}/ws"
    count = 0
    kind = aiohttp.WSMsgType.BINARY if isinstance(payload, bytes) else aiohttp.WSMsgType.TEXT
    async with aiohttp.ClientSession() as http:
        sockets = [await http.ws_connect(url, headers=headers, autoping=False) for _ in range(connections)]

        async def loop(ws: aiohttp.ClientWebSocketResponse, deadline: float) -> None:
            nonlocal count
            while time.monotonic() < deadline:
                if isinstance(payload, bytes):
                    await ws.send_bytes(payload)
                else:
                    await ws.send_str(payload)
                msg = await ws.receive(timeout=10)
                if msg.type is not kind or msg.data != payload:
                    raise RuntimeError(f"bad echo: {msg}")
                count += 1

        await asyncio.gather(*(loop(ws, time.monotonic() + 0.5) for ws in sockets))  # warm-up
        count = 0
        start = time.monotonic()
        await asyncio.gather(*(loop(ws, start + seconds) for ws in sockets))
        elapsed = time.monotonic() - start
        for ws in sockets:
            await ws.close()
    return count / elapsed


def _ws_client_main(port: int, headers: dict[str, str], connections: int, seconds: float,
                    out: Any) -> None:
    use_uvloop()
    out.put(asyncio.run(ws_throughput(port, headers, connections, seconds)))


def ws_throughput_in_process(port: int, headers: dict[str, str], connections: int, seconds: float) -> float:
    """The WebSocket client in its own process (so it gets a core to itself when it can)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_ws_client_main, args=(port, headers, connections, seconds, queue))
    proc.start()
    try:
        return float(queue.get(timeout=seconds + 60))
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


async def idle_websockets(gateway: Proc, port: int, headers: dict[str, str], n: int, hold: float
                          ) -> dict[str, float]:
    before = gateway.rss_mib()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        sem = asyncio.Semaphore(50)

        async def one() -> aiohttp.ClientWebSocketResponse:
            async with sem:
                return await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers=headers,
                                             autoping=False, heartbeat=None)

        start = time.monotonic()
        sockets = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), 120)
        opened_s = time.monotonic() - start
        await asyncio.sleep(hold)
        # all still alive: one echo on a sample
        for ws in sockets[:: max(1, n // 20)]:
            await ws.send_str("alive?")
            msg = await ws.receive(timeout=10)
            assert msg.data == "alive?", msg
        held = gateway.rss_mib()
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return {"n": n, "rss_mib_before": round(before, 1), "rss_mib_held": round(held, 1),
            "open_s": round(opened_s, 2)}
