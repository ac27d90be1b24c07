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
processes sharing one port: a few microseconds per request, so it is not the bottleneck
(bench/echo_upstream.py; the load: bench/load_tools.py; the processes: bench/bench_processes.py).
Tools: bench/setup.sh (wrk from Debian, configurable-http-proxy from npm into bench/.node).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from bench_processes import Proc, free_port, use_uvloop, wait_http  # bench/ is this script's folder
from echo_upstream import UpstreamServers
from load_tools import idle_websockets, wrk, ws_throughput_in_process

HERE = Path(__file__).resolve().parent
CHP = HERE / ".node" / "node_modules" / ".bin" / "configurable-http-proxy"
HOST = "ide.bench.test"
PUBLIC_URL = "http://userland.bench.test"
SECRET = "b" * 40
USER = "benchuser"
STUDENT_HOST = f"{USER}.{HOST}"  # the student's own origin (per-student origins)
ORIGIN = f"http://{STUDENT_HOST}"


# -- processes under test -------------------------------------------------------------------


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
    from userland.platform.clients.kube import NAMESPACES, SERVICES, TEMPLATES, USERLANDS, KubeClient
    from userland.platform.clients.sessions import RedisSessionStore, Session
    from userland.platform.model import naming

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
