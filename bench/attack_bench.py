"""Attack measurements for the gateway's hardening (run by hand; loopback only, bounded).

`python bench/attack_bench.py [--only headers,idle,login,cache]` runs each attack against
the "before" and the "after" configuration and prints a table (and bench/results/attacks.json):

  headers  60 connections each sending an unfinished request head (up to 127 fields of 32 KiB,
           what aiohttp accepts with the gateway's handler options): the server process's RSS.
           before = aiohttp's AppRunner, after = GatewayRunner (proxy/connections.py); both serve
           a trivial app with the gateway's runner and handler options in a child process (the
           attack never reaches the app: it is about the server layer).
  idle     N idle connections from 127.0.0.1 (default 12,000) against a server allowed 10,000
           files, then a real request from 127.0.0.2: how many the server holds, whether the
           real request is answered (and how fast), and how many attacker connections are still
           open after the keep-alive timeout (+1 s).
  login    redis-server with deploy/redis.yaml's options (small maxmemory) holding 500 sessions,
           then 20,000 pending-login records as anonymous /auth/login calls write them:
           sessions left. before = maxmemory-policy volatile-lru, after = noeviction.
  cache    the session lookup per request: a cache hit vs a Redis GET (microseconds), i.e. what
           dropping the cache would cost; the fail-closed cache keeps the hit path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from userland.local.ports import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the server under attack (a child process) ------------------------------------------------


def serve(mode: str, port: int, keepalive: float, nofile: int) -> None:
    """Child process: the gateway's server layer around a trivial app, with `nofile` file
    descriptors at most (a process's limit is what 20,000 idle connections exhaust)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from aiohttp import web

    from userland.proxy.app import RUNNER_KWARGS
    from userland.proxy.connections import ConnectionLimits, GatewayRunner

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def main() -> None:
        # The gateway's handler options (create_app): 32 KiB header fields.
        app = web.Application(handler_args={"max_field_size": 32768})
        app.router.add_get("/{tail:.*}", ok)
        if mode == "before":
            runner: web.AppRunner = web.AppRunner(app, **RUNNER_KWARGS)
        else:
            runner = GatewayRunner(app, limits=ConnectionLimits(keepalive_timeout=keepalive), **RUNNER_KWARGS)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class Server:
    def __init__(self, mode: str, keepalive: float = 30.0, nofile: int = 4096) -> None:
        self.mode = mode
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", mode, "--port", str(self.port),
             "--keepalive", str(keepalive), "--server-nofile", str(nofile)],
            stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"

    def rss(self) -> float:
        return rss_mib(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# -- attacks ---------------------------------------------------------------------------------


async def _unfinished_head(port: int, fields: int) -> str:
    """Send a head that never ends; 'answered' if the server refused it, else 'held'."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return "refused"
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        for i in range(fields):
            writer.write(b"X-F%d: " % i + b"a" * 32000 + b"\r\n")
            await writer.drain()
        with contextlib.suppress(TimeoutError):
            answer = await asyncio.wait_for(reader.read(64), 1.0)
            if answer.startswith(b"HTTP/1.1 4"):
                return "answered"
        return "held"
    except (ConnectionError, OSError):
        return "answered"
    finally:
        # Keep it open: the point is what the server holds meanwhile (closed by the caller's exit).
        _held.append(writer)


_held: list[asyncio.StreamWriter] = []


async def attack_headers(mode: str, connections: int = 60, fields: int = 127) -> dict[str, Any]:
    server = Server(mode)
    try:
        idle = server.rss()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(_unfinished_head(server.port, fields) for _ in range(connections))), 120)
        await asyncio.sleep(1.0)
        peak = server.rss()
        return {"rss_idle_mib": round(idle, 1), "rss_attacked_mib": round(peak, 1),
                "held": outcomes.count("held"), "answered_4xx": outcomes.count("answered"),
                "refused": outcomes.count("refused")}
    finally:
        for writer in _held:
            writer.close()
        _held.clear()
        server.stop()


async def _idle_connection(port: int) -> asyncio.StreamReader | None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    _held.append(writer)
    return reader


async def _is_open(reader: asyncio.StreamReader) -> bool:
    """Whether the server still holds this connection (a refusal's answer is read first)."""
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65536), 0.005)
            if not data:
                return False
    except TimeoutError:
        return True
    except (ConnectionError, OSError):
        return False


async def _count_open(readers: list[asyncio.StreamReader]) -> int:
    return sum(await asyncio.gather(*(_is_open(r) for r in readers)))


async def _real_request(port: int) -> tuple[float | None, int]:
    """A request from another address (127.0.0.2): its latency in ms and status (None, 0: no
    answer within 10 s)."""
    started = time.perf_counter()

    async def go() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        writer.write(b"GET /real HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try:
            return await reader.read()
        finally:
            writer.close()

    try:
        answer = await asyncio.wait_for(go(), 10)
    except (TimeoutError, OSError):
        return None, 0
    return round((time.perf_counter() - started) * 1000, 1), int(answer.split(b" ", 2)[1])


async def attack_idle(mode: str, count: int, keepalive: float, nofile: int) -> dict[str, Any]:
    server = Server(mode, keepalive=keepalive, nofile=nofile)
    try:
        readers: list[asyncio.StreamReader] = []
        for start in range(0, count, 200):  # in batches, so the backlog is not the limit measured
            size = min(200, count - start)
            batch = await asyncio.gather(*(_idle_connection(server.port) for _ in range(size)))
            readers += [r for r in batch if r is not None]
        await asyncio.sleep(0.5)
        accepted = await _count_open(readers)
        latency, status = await _real_request(server.port)
        rss = server.rss()
        await asyncio.sleep(keepalive + 1.0)
        still_open = await _count_open(readers)
        return {"attempted": count, "server_nofile": nofile, "open_after_0.5s": accepted,
                "real_request_ms": latency, "real_request_status": status, "rss_mib": round(rss, 1),
                f"open_after_{keepalive + 1:.0f}s": still_open}
    finally:
        for writer in _held:
            writer.close()
        _held.clear()
        server.stop()


async def attack_login(policy: str, records: int = 20_000, sessions: int = 500) -> dict[str, Any]:
    import redis.asyncio
    import redis.exceptions

    from userland.auth.oauth_state import OAuthStateStore
    from userland.local.redisserver import redis_server
    from userland.platform.clients.sessions import RedisSessionStore, Session, SessionStoreUnavailable

    state = Path(tempfile.mkdtemp(prefix="attack-bench-redis-"))
    with redis_server(state, ["--maxmemory", "4mb", "--maxmemory-policy", policy]) as url:
        client = redis.asyncio.Redis.from_url(url)
        for _ in range(100):
            with contextlib.suppress(redis.exceptions.ConnectionError):
                await client.ping()
                break
            await asyncio.sleep(0.05)
        store = RedisSessionStore(client, 8 * 3600)
        cookies = [await store.save(Session(login=f"s{i}", github_id=i, role="student", csrf="c",
                                            created=time.time())) for i in range(sessions)]
        states = OAuthStateStore(client)
        refused = 0
        for _ in range(records):
            try:
                await states.begin("/" + "x" * 1500)
            except SessionStoreUnavailable:
                refused += 1
        alive = sum([await store.load(c) is not None for c in cookies])
        stats = await client.info("stats")
        await client.aclose()
    return {"policy": policy, "sessions_before": sessions, "sessions_left": alive,
            "records_refused": refused, "evicted_keys": stats["evicted_keys"]}


async def measure_cache(n: int = 20_000) -> dict[str, Any]:
    import redis.asyncio
    from aiohttp.test_utils import make_mocked_request

    from userland.local.redisserver import redis_server
    from userland.platform.clients.sessions import RedisSessionStore, Session
    from userland.proxy.session_cache import SessionCache

    state = Path(tempfile.mkdtemp(prefix="attack-bench-redis-"))
    with redis_server(state) as url:
        client = redis.asyncio.Redis.from_url(url)
        for _ in range(100):
            with contextlib.suppress(Exception):
                await client.ping()
                break
            await asyncio.sleep(0.05)
        store = RedisSessionStore(client, 3600)
        cookie = await store.save(Session(login="a", github_id=1, role="student", csrf="c", created=0.0))
        request = make_mocked_request("GET", "/", headers={"Cookie": f"userland_session={cookie}"})

        async def lookup(req: Any) -> Any:
            return await store.load(req.cookies["userland_session"])

        cache = SessionCache(lookup, "userland_session", ttl=3600, redis_client=client)
        ctx = cache.running()
        await ctx.__anext__()
        for _ in range(500):
            if cache.serving:
                break
            await asyncio.sleep(0.01)
        started = time.perf_counter()
        for _ in range(n):
            await lookup(request)
        redis_us = (time.perf_counter() - started) / n * 1e6
        started = time.perf_counter()
        for _ in range(n):
            await cache(request)
        hit_us = (time.perf_counter() - started) / n * 1e6
        with contextlib.suppress(StopAsyncIteration):
            await ctx.__anext__()
        await client.aclose()
    return {"redis_get_us": round(redis_us, 1), "cache_hit_us": round(hit_us, 2)}


async def run(only: set[str], idle_count: int, keepalive: float, nofile: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if "headers" in only:
        results["headers"] = {mode: await attack_headers(mode) for mode in ("before", "after")}
    if "idle" in only:
        results["idle"] = {"before": await attack_idle("before", idle_count, keepalive, nofile),
                           "after": await attack_idle("after", idle_count, keepalive, nofile)}
    if "login" in only:
        results["login"] = {"before": await attack_login("volatile-lru"),
                            "after": await attack_login("noeviction")}
    if "cache" in only:
        results["cache"] = await measure_cache()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="headers,idle,login,cache")
    parser.add_argument("--idle-connections", type=int, default=12000,
                        help="idle connections opened (at most this process's file limit - 512)")
    parser.add_argument("--server-nofile", type=int, default=10000,
                        help="the attacked server's file limit (what idle connections exhaust)")
    parser.add_argument("--keepalive", type=float, default=30.0,
                        help="the after server's idle keep-alive (the setting's default)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "attacks.json")
    parser.add_argument("--serve", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.keepalive, args.server_nofile)
        return
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    idle = min(args.idle_connections, hard - 512)
    results = asyncio.run(run(set(args.only.split(",")), idle, args.keepalive, args.server_nofile))
    print(json.dumps(results, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                       "cpus": os.cpu_count(), **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
