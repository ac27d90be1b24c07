"""Gateway throughput with activity tracking on and off (by hand; figures go in docs/benchmarks.md):

  .venv/bin/python bench/activity_bench.py [--rounds 5] [--seconds 5]

Two `userland gateway --workers 1` processes, side by side in one run, the same upstream, real
control plane and Redis, a real origin session on every request: `off` routes a Template
without idleTimeout (nothing is tracked), `on` one with `idleTimeout: 2h` (every request counts
as use: a timestamp per request, the flusher writing Redis and the API server). wrk -t1 -c50
rounds interleaved on/off; the ratio of the medians is the figure (goal >= 0.95).

WebSockets: a third gateway routes a Template with `activity.webSocketProtocol: vscode`. K
connections each send a real VS Code frame (an idle tab's `$onFileEvent` file-watch echo,
tests/proxy/golden/vscode_frames.json: read to its end, and it does not count) and await its
echo; round trips/s on `off` (nothing read), `on` (size rule: a timestamp) and `vscode` (the
frame decoded), interleaved; the ratios of the medians are the figures.
Results: bench/results/activity.json. Tools: bench/setup.sh (wrk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.gateway_bench import (  # noqa: E402
    ORIGIN,
    PUBLIC_URL,
    SECRET,
    STUDENT_HOST,
    UpstreamServers,
    make_world,
    start_gateway,
    wait_http,
    wrk,
    ws_throughput,
)

IDLE_TAB_FRAME = next(bytes.fromhex(f["hex"]) for f in json.loads(
    (REPO / "tests" / "proxy" / "golden" / "vscode_frames.json").read_text()) if f["what"] == "$onFileEvent")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from userland.local.controlplane import ControlPlane, crd_files
    from userland.local.redisserver import redis_server

    state = Path(tempfile.mkdtemp(prefix="userland-activitybench-"))
    upstream = UpstreamServers(1)
    plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
    procs = []
    try:
        with redis_server(state) as redis_url:
            sessions = {"off": await make_world(plane.kubeconfig, "off", upstream.url, redis_url),
                        "on": await make_world(plane.kubeconfig, "on", upstream.url, redis_url, "2h"),
                        "vscode": await make_world(plane.kubeconfig, "vscode", upstream.url, redis_url, "2h",
                                                   {"quietFrameBytes": 26, "webSocketProtocol": "vscode"})}
            ports = {}
            for name in sessions:
                env = {**os.environ, "USERLAND_IDENTITY_SECRET": SECRET, "USERLAND_PUBLIC_URL": PUBLIC_URL,
                       "USERLAND_REDIS_URL": redis_url, "USERLAND_NAMESPACES": name,
                       "USERLAND_UPSTREAM_MODE": "local", "USERLAND_COOKIE_SECURE": "false",
                       "USERLAND_MAX_CONNECTIONS_PER_CLIENT": "0"}
                (state / name).mkdir(exist_ok=True)
                proc, port = start_gateway(1, env, plane.kubeconfig, state / name, "warning")
                proc.name = f"gw-{name}"
                procs.append(proc)
                ports[name] = port
            headers = {name: [f"Host: {STUDENT_HOST}", f"Cookie: userland_origin={sessions[name]}",
                              f"Origin: {ORIGIN}"] for name in ports}
            for name, port in ports.items():
                await wait_http(f"http://127.0.0.1:{port}/healthz")
                await wait_http(f"http://127.0.0.1:{port}/", timeout=30,
                                headers=dict(h.split(": ", 1) for h in headers[name]))
                wrk(port, 2, args.connections, headers[name])  # warm-up
            runs: dict[str, list[float]] = {"off": [], "on": []}
            for round_ in range(args.rounds):
                for name in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                    result, out = wrk(ports[name], args.seconds, args.connections, headers[name])
                    if result["non_2xx"] or result["socket_errors"]:
                        print(out)
                    runs[name].append(result["rps"])
                    print(f"round {round_ + 1} tracking {name:3} {result['rps']:8.0f} req/s", flush=True)
            ws_runs: dict[str, list[float]] = {name: [] for name in sessions}
            for round_ in range(args.rounds):
                order = list(sessions) if round_ % 2 == 0 else list(reversed(sessions))
                for name in order:
                    rate = await ws_throughput(ports[name], dict(h.split(": ", 1) for h in headers[name]),
                                               args.ws_connections, args.seconds, IDLE_TAB_FRAME)
                    ws_runs[name].append(rate)
                    print(f"round {round_ + 1} websocket {name:6} {rate:8.0f} round trips/s", flush=True)
            ws_median = {k: statistics.median(v) for k, v in ws_runs.items()}
            return {"rps": runs, "median_rps": {k: statistics.median(v) for k, v in runs.items()},
                    "ratio_on_off": statistics.median(runs["on"]) / statistics.median(runs["off"]),
                    "ws_round_trips": ws_runs, "ws_median": ws_median,
                    "ws_ratio_vscode_off": ws_median["vscode"] / ws_median["off"],
                    "ws_ratio_vscode_on": ws_median["vscode"] / ws_median["on"],
                    "rounds": args.rounds, "seconds": args.seconds, "connections": args.connections,
                    "ws_connections": args.ws_connections}
    finally:
        for proc in procs:
            proc.stop()
        upstream.stop()
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--ws-connections", type=int, default=20)
    args = parser.parse_args()
    results = asyncio.run(run(args))
    out = REPO / "bench" / "results" / "activity.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"tracking on/off: {results['ratio_on_off']:.3f}x  ({results['median_rps']})")
    print(f"websocket, VS Code frames read / not tracked: {results['ws_ratio_vscode_off']:.3f}x, "
          f"read / size rule: {results['ws_ratio_vscode_on']:.3f}x  ({results['ws_median']})")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
