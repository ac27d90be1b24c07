"""Gateway benchmark (run by hand: `make bench` or `python bench/gateway_bench.py`).

Side by side in one run, on this machine, all on loopback:
  direct   wrk straight to the upstream (its ceiling);
  chp      configurable-http-proxy 5 (JupyterHub's proxy, one node process) in front of it;
  gw1/gw2  `userland gateway --workers 1` and `--workers 2`, for real: a real control plane
           (Template + Userland + Service with the `userland.dev/upstream` annotation, the
           Userland patched Ready), real Redis, a real session cookie on every request.
Measures: wrk -t1 -c50 requests/s with p50/p99 latency (rounds interleaved, to see the noise),
WebSocket echo messages/s over K connections, and the RSS of the 1-worker gateway holding
1,000 idle WebSockets. Prints a table and writes bench/results/gateway.json.

The upstream is a tiny HTTP/1.1 + WebSocket echo server on asyncio protocols (uvloop), in two
processes sharing one port: a few microseconds per request, so it is not the bottleneck.
Tools: bench/setup.sh (wrk from Debian, configurable-http-proxy from npm into bench/.node).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
CHP = HERE / ".node" / "node_modules" / ".bin" / "configurable-http-proxy"
HOST = "ide.bench.test"
PUBLIC_URL = "http://userland.bench.test"
SECRET = "b" * 40
USER = "benchuser"
STUDENT_HOST = f"{USER}.{HOST}"  # the student's own origin (per-student origins)
ORIGIN = f"http://{STUDENT_HOST}"
BODY = b"hello from the upstream\n"
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def use_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# -- the upstream: HTTP/1.1 keep-alive with a fixed body, and a WebSocket echo -----------------


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


# -- processes under test -------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def pids(self) -> list[int]:
        """The process and its children (a multi-worker gateway's workers)."""
        found = [self.proc.pid]
        for pid in list(found):
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                found.extend(int(c) for c in children)
        return found

    def rss_mib(self) -> float:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024

    def cpu_seconds(self) -> float:
        ticks = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_http(url: str, timeout: float = 90, headers: dict[str, str] | None = None,
                    proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            if proc is not None and proc.proc.poll() is not None:
                raise RuntimeError(f"{proc.name} exited:\n{proc.log.read_text()[-3000:]}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url, headers=headers) as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not ready in {timeout}s")
            await asyncio.sleep(0.2)


def start_chp(upstream: str, state: Path) -> tuple[Proc, int]:
    port, api = free_port(), free_port()
    log = state / "chp.log"
    proc = subprocess.Popen(
        [str(CHP), "--ip", "127.0.0.1", "--port", str(port), "--api-ip", "127.0.0.1",
         "--api-port", str(api), "--default-target", upstream, "--log-level", "warn"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": "bench-token"})
    return Proc("chp", proc, log), port


def start_gateway(workers: int, env: dict[str, str], kubeconfig: Path, state: Path,
                  log_level: str, extra: tuple[str, ...] = ()) -> tuple[Proc, int, int]:
    """The gateway, its public port and its internal one (/healthz, /metrics); `extra`: more of
    its command line (`--no-metrics`)."""
    port, internal = free_port(), free_port()
    log = state / f"gateway-{workers}{'-'.join(('', *extra)).replace('--', '')}.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "userland"), "--log-level", log_level, "gateway",
         "--listen", f"127.0.0.1:{port}", "--kubeconfig", str(kubeconfig),
         "--workers", str(workers), "--grace", "2", *extra],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**env, "USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{internal}"})
    return Proc(f"gw{workers}", proc, log), port, internal


# -- the world the gateway routes with -----------------------------------------------------


async def make_world(kubeconfig: Path, namespace: str, upstream: str, redis_url: str,
                     idle_timeout: str | None = None, activity: dict[str, Any] | None = None) -> str:
    """Template + Userland (Ready) + Service annotated with the upstream; returns the cookie id
    of the student's origin session (`userland_origin` on `<user>.<HOST>`), made through the
    real handoff's code path: a platform session, a single-use code, redeemed for the origin."""
    import redis.asyncio

    from userland.auth.origin_sessions import OriginSessions
    from userland.platform import naming
    from userland.platform.kube import NAMESPACES, SERVICES, TEMPLATES, USERLANDS, KubeClient
    from userland.platform.sessions import RedisSessionStore, Session

    async with await KubeClient.connect(str(kubeconfig)) as kube:
        await kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
        await kube.create(TEMPLATES, namespace, {
            "apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": "vscode"},
            "spec": {"displayName": "VS Code", "routing": {"host": HOST}, "port": 8080,
                     "podSpec": {"containers": [{"name": "main", "image": "example/ide:1"}]},
                     **({"idleTimeout": idle_timeout} if idle_timeout else {}),
                     **({"activity": activity} if activity else {})}})
        await kube.create(USERLANDS, namespace, {
            "apiVersion": naming.API_VERSION, "kind": "Userland",
            "metadata": {"name": naming.userland_name("vscode", USER)},
            "spec": {"user": USER, "template": "vscode"}})
        await kube.merge_patch(USERLANDS, namespace, naming.userland_name("vscode", USER), {
            "status": {"phase": "Ready", "conditions": [{
                "type": "Ready", "status": "True", "reason": "Bench", "message": "set by the bench",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
        await kube.create(SERVICES, namespace, {
            "metadata": {"name": naming.service_name("vscode", USER),
                         "annotations": {naming.ANNOTATION_UPSTREAM: upstream},
                         "labels": {naming.LABEL_USER: USER, naming.LABEL_TEMPLATE: "vscode"}},
            "spec": {"ports": [{"port": 8080, "targetPort": 8080}], "selector": {"app": "x"}}})
    client = redis.asyncio.from_url(redis_url)
    try:
        store = RedisSessionStore(client, 8 * 3600)
        platform_cookie = await store.save(Session(login=USER, github_id=1, role="student", csrf="csrf",
                                                   created=time.time()))
        origins = OriginSessions(client, 8 * 3600)
        code = await origins.issue_code(platform_cookie, ORIGIN, "/")
        redeemed = await origins.redeem(code, ORIGIN)
        assert redeemed is not None, "the handoff code was not redeemed"
        return redeemed[0]
    finally:
        await client.aclose()


# -- load: wrk for HTTP, an aiohttp client for WebSockets --------------------------------------

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


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    port: int
    proc: Proc | None = None
    runs: list[dict[str, float]] = field(default_factory=list)
    ws_rates: list[float] = field(default_factory=list)


def cpu_us(run: dict[str, float]) -> float:
    """CPU time of the proxy's processes per request (steadier than req/s on a shared machine)."""
    return run["cpu_s"] / max(1.0, run["rps"] * run["seconds"]) * 1e6


def summary(target: Target) -> dict[str, Any]:
    rps = [r["rps"] for r in target.runs]
    return {
        "rps_median": round(statistics.median(rps), 1),
        "rps_runs": [round(x, 1) for x in rps],
        "p50_ms_median": round(statistics.median(r["p50_ms"] for r in target.runs), 2),
        "p99_ms_median": round(statistics.median(r["p99_ms"] for r in target.runs), 2),
        "p99_ms_runs": [round(r["p99_ms"], 2) for r in target.runs],
        "non_2xx": sum(int(r["non_2xx"]) for r in target.runs),
        "cpu_us_per_request": [round(cpu_us(r)) for r in target.runs if "cpu_s" in r],
        "ws_msgs_per_s": round(statistics.median(target.ws_rates), 1) if target.ws_rates else None,
        "ws_runs": [round(x, 1) for x in target.ws_rates],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from userland.local.controlplane import ControlPlane, crd_files
    from userland.local.redisserver import redis_server

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 16384)), hard))
    state = Path(tempfile.mkdtemp(prefix="userland-gwbench-"))
    upstream = UpstreamServers(args.upstream_processes)
    plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
    procs: list[Proc] = []
    results: dict[str, Any] = {}
    try:
        with redis_server(state) as redis_url:
            session_id = await make_world(plane.kubeconfig, "bench", upstream.url, redis_url)
            env = {**os.environ, "USERLAND_IDENTITY_SECRET": SECRET, "USERLAND_PUBLIC_URL": PUBLIC_URL,
                   "USERLAND_REDIS_URL": redis_url, "USERLAND_NAMESPACES": "bench",
                   "USERLAND_UPSTREAM_MODE": "local", "USERLAND_COOKIE_SECURE": "false",
                   # Every defence on. The load is one user from 127.0.0.1: the per-address
                   # connection cap (default 1,000) and the per-user WebSocket cap (64) are raised
                   # just above what the idle-WebSocket test holds (1,000), not turned off.
                   "USERLAND_MAX_CONNECTIONS_PER_CLIENT": str(max(1000, args.idle_ws + 100)),
                   "USERLAND_MAX_WEBSOCKETS_PER_USER": str(max(64, args.idle_ws + 100))}
            chp, chp_port = start_chp(upstream.url, state)
            gw1, gw1_port, gw1_internal = start_gateway(1, env, plane.kubeconfig, state, args.log_level)
            gw2, gw2_port, gw2_internal = start_gateway(2, env, plane.kubeconfig, state, args.log_level)
            procs += [chp, gw1, gw2]
            headers = {"Host": STUDENT_HOST, "Cookie": f"userland_origin={session_id}; app=1",
                       "Origin": ORIGIN}
            wrk_headers = [f"{k}: {v}" for k, v in headers.items()]
            await wait_http(f"{upstream.url}/", timeout=15)
            await wait_http(f"http://127.0.0.1:{chp_port}/", proc=chp)
            for gw, port, internal in ((gw1, gw1_port, gw1_internal), (gw2, gw2_port, gw2_internal)):
                await wait_http(f"http://127.0.0.1:{internal}/healthz", proc=gw)
                # the session works and the upstream sees the signed-in user (not a 401/302 page)
                await wait_http(f"http://127.0.0.1:{port}/", headers=headers, proc=gw, timeout=30)
                async with aiohttp.ClientSession() as http, http.get(
                        f"http://127.0.0.1:{port}/whoami", headers=headers) as resp:
                    assert (resp.status, await resp.text()) == (200, USER), "gateway did not sign in"
            targets = [Target("direct", upstream.port), Target("chp", chp_port, chp),
                       Target("gw1", gw1_port, gw1), Target("gw2", gw2_port, gw2)]
            if args.hold:  # for profiling by hand: everything up, then wait
                print(json.dumps({t.name: {"port": t.port, "pids": t.proc.pids() if t.proc else []}
                                  for t in targets}), flush=True)
                print(" ".join(f"-H '{h}'" for h in wrk_headers), flush=True)
                await asyncio.sleep(args.hold)
                return results
            if args.only:
                targets = [t for t in targets if t.name in args.only.split(",")]
            for target in targets:  # warm-up: connections pooled, code paths hot
                wrk(target.port, 2, args.connections, wrk_headers)
            for round_ in range(args.rounds):
                for target in targets:
                    cpu = target.proc.cpu_seconds() if target.proc else 0.0
                    result, out = wrk(target.port, args.seconds, args.connections, wrk_headers)
                    if target.proc:
                        result["cpu_s"] = target.proc.cpu_seconds() - cpu
                    result["seconds"] = args.seconds
                    if result["non_2xx"] or result["socket_errors"]:
                        print(out, flush=True)
                    target.runs.append(result)
                    print(f"round {round_ + 1} {target.name:6} {result['rps']:9.0f} req/s  "
                          f"p50 {result['p50_ms']:7.2f} ms  p99 {result['p99_ms']:7.2f} ms"
                          + (f"  cpu {cpu_us(result):6.0f} us/req" if "cpu_s" in result else "")
                          + (f"  non-2xx {result['non_2xx']:.0f}" if result["non_2xx"] else ""),
                          flush=True)
            if args.ws_seconds > 0:
                for round_ in range(args.rounds):
                    for target in targets:
                        rate = ws_throughput_in_process(target.port, headers, args.ws_connections,
                                                        args.ws_seconds)
                        target.ws_rates.append(rate)
                        print(f"round {round_ + 1} {target.name:6} {rate:9.0f} WebSocket msgs/s "
                              f"({args.ws_connections} connections)", flush=True)
            for target in targets:
                results[target.name] = summary(target)
            if args.idle_ws > 0 and (not args.only or "gw1" in args.only):
                idle = await idle_websockets(gw1, gw1_port, headers, args.idle_ws, args.idle_hold)
                results["idle_websockets_gw1"] = idle
                print(f"gw1 holding {idle['n']} idle WebSockets: RSS {idle['rss_mib_held']} MiB "
                      f"(was {idle['rss_mib_before']} MiB)", flush=True)
    finally:
        for proc in procs:
            proc.stop()
        plane.stop()
        upstream.stop()
        if not args.keep_state:
            shutil.rmtree(state, ignore_errors=True)
        else:
            print(f"state and logs kept in {state}")
    return results


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    chp = results.get("chp")
    if not chp:
        return out
    for name in ("gw1", "gw2"):
        gw = results.get(name)
        if not gw:
            continue
        out[f"{name}_rps_vs_chp"] = round(gw["rps_median"] / chp["rps_median"], 2)
        out[f"{name}_p99_vs_chp"] = round(gw["p99_ms_median"] / chp["p99_ms_median"], 2)
        # Round by round (each gateway round ran right after CHP's): the spread shows the noise
        # of a shared machine, which the medians of each target alone hide.
        per_round = [round(g / c, 2) for g, c in zip(gw["rps_runs"], chp["rps_runs"], strict=True)]
        p99_rounds = [round(g / c, 2) for g, c in zip(gw["p99_ms_runs"], chp["p99_ms_runs"], strict=True)]
        out[f"{name}_rps_vs_chp_by_round"] = per_round
        out[f"{name}_rps_vs_chp_round_median"] = round(statistics.median(per_round), 2)
        out[f"{name}_p99_vs_chp_by_round"] = p99_rounds
        out[f"{name}_p99_vs_chp_round_median"] = round(statistics.median(p99_rounds), 2)
        if gw["cpu_us_per_request"] and chp["cpu_us_per_request"]:
            out[f"{name}_cpu_us_vs_chp"] = round(statistics.median(gw["cpu_us_per_request"])
                                                 / statistics.median(chp["cpu_us_per_request"]), 2)
        if gw.get("ws_msgs_per_s") and chp.get("ws_msgs_per_s"):
            out[f"{name}_ws_vs_chp"] = round(gw["ws_msgs_per_s"] / chp["ws_msgs_per_s"], 2)
    return out


def table(results: dict[str, Any]) -> str:
    lines = [f"{'target':8} {'req/s':>9} {'runs':>24} {'p50 ms':>8} {'p99 ms':>8} {'ws msg/s':>9}"]
    for name in ("direct", "chp", "gw1", "gw2"):
        r = results.get(name)
        if not r:
            continue
        runs = "/".join(f"{x:.0f}" for x in r["rps_runs"])
        ws = f"{r['ws_msgs_per_s']:.0f}" if r.get("ws_msgs_per_s") else "-"
        lines.append(f"{name:8} {r['rps_median']:9.0f} {runs:>24} {r['p50_ms_median']:8.2f} "
                     f"{r['p99_ms_median']:8.2f} {ws:>9}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10, help="wrk duration per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over all targets")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--ws-connections", type=int, default=10)
    parser.add_argument("--ws-seconds", type=float, default=5, help="0 skips the WebSocket test")
    parser.add_argument("--idle-ws", type=int, default=1000, help="0 skips the idle WebSocket test")
    parser.add_argument("--idle-hold", type=float, default=5)
    parser.add_argument("--upstream-processes", type=int, default=2)
    parser.add_argument("--log-level", default="INFO", help="the gateway's (INFO: access log on)")
    parser.add_argument("--only", default="", help="comma-separated targets: direct,chp,gw1,gw2")
    parser.add_argument("--hold", type=float, default=0,
                        help="set everything up, print ports and headers, wait this long (profiling)")
    parser.add_argument("--keep-state", action="store_true", help="keep logs in the temp folder")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "gateway.json")
    args = parser.parse_args()
    if not CHP.exists() or shutil.which("wrk") is None:
        subprocess.run(["bash", str(HERE / "setup.sh")], check=True)
    use_uvloop()
    started = time.time()
    results = asyncio.run(run(args))
    results["ratios"] = ratios(results)
    results["setup"] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "wrk": f"wrk -t1 -c{args.connections} -d{args.seconds:g}s --latency",
        "rounds": args.rounds, "gateway_log_level": args.log_level,
        "ws": f"{args.ws_connections} connections, {args.ws_seconds:g} s, 64-byte text echo round trips",
        "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
        "upstream": f"asyncio protocol server, {args.upstream_processes} processes",
    }
    print()
    print(table(results))
    print(json.dumps(results["ratios"], indent=2))
    if not args.only and not args.hold:
        args.output.parent.mkdir(exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n")
        print(f"written: {args.output}")


if __name__ == "__main__":
    main()
