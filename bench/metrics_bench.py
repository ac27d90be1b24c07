"""What the metrics cost (by hand; figures go in docs/benchmarks.md):

  .venv/bin/python bench/metrics_bench.py throughput [--rounds 6] [--seconds 5]
  .venv/bin/python bench/metrics_bench.py series [--students 100 1000] [--courses 4] [--templates 2]

throughput: two `userland gateway --workers 1` processes side by side in one run, the same real
control plane, Redis, upstream and a real origin session on every request: `on` counts
everything (and is scraped every 5 s, as a Prometheus would be), `off` runs with `--no-metrics`
(per-request counting a no-op, an empty /metrics). wrk -t1 -c50, rounds interleaved on/off; the
ratio of the medians is the figure (goal >= 0.97x).

series: the number of series each component exports (what Prometheus stores), for a class of
S students in C courses with T Templates each, on one real control plane: the real operator
(every environment started, Ready; every tenth one's image failing), the real gateway (every
student's request met the starting page: a per-course figure), the real web UI (each course's
dashboard opened). Run for several S at the same C and T, and at twice the courses: the count
must follow courses and Templates, never students.
Results: bench/results/metrics.json. Tools: bench/setup.sh (wrk).
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

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_processes import Proc, wait_http  # noqa: E402
from bench.echo_upstream import UpstreamServers  # noqa: E402
from bench.gateway_bench import ORIGIN, PUBLIC_URL, SECRET, STUDENT_HOST, make_world, start_gateway  # noqa: E402
from bench.load_tools import wrk  # noqa: E402
from bench.metrics_series import series, series_of  # noqa: E402

RESULTS = REPO / "bench" / "results" / "metrics.json"


async def scrape_every(port: int, seconds: float, stop: asyncio.Event) -> int:
    scrapes = 0
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                await response.read()
            scrapes += 1
            try:
                await asyncio.wait_for(stop.wait(), seconds)
            except TimeoutError:
                pass
    return scrapes


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    from userland.local.controlplane import ControlPlane, crd_files
    from userland.local.redisserver import redis_server

    state = Path(tempfile.mkdtemp(prefix="userland-metricsbench-"))
    upstream = UpstreamServers(1)
    plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
    procs: list[Proc] = []
    try:
        with redis_server(state) as redis_url:
            session = await make_world(plane.kubeconfig, "bench", upstream.url, redis_url)
            env = {
                **os.environ,
                "USERLAND_IDENTITY_SECRET": SECRET,
                "USERLAND_PUBLIC_URL": PUBLIC_URL,
                "USERLAND_REDIS_URL": redis_url,
                "USERLAND_NAMESPACES": "bench",
                "USERLAND_UPSTREAM_MODE": "local",
                "USERLAND_COOKIE_SECURE": "false",
                "USERLAND_MAX_CONNECTIONS_PER_CLIENT": "0",
            }
            ports: dict[str, tuple[int, int]] = {}
            for name, extra in (("on", ()), ("off", ("--no-metrics",))):
                (state / name).mkdir()
                proc, port, internal = start_gateway(1, env, plane.kubeconfig, state / name, "warning", extra)
                proc.name = f"gw-metrics-{name}"
                procs.append(proc)
                ports[name] = (port, internal)
            headers = [f"Host: {STUDENT_HOST}", f"Cookie: userland_origin={session}", f"Origin: {ORIGIN}"]
            for port, internal in ports.values():
                await wait_http(f"http://127.0.0.1:{internal}/healthz")
                await wait_http(
                    f"http://127.0.0.1:{port}/", timeout=30, headers=dict(h.split(": ", 1) for h in headers)
                )
                wrk(port, 2, args.connections, headers)  # warm-up
            runs: dict[str, list[float]] = {"on": [], "off": []}
            # CPU per request (its process's user + system time over the requests it answered):
            # what the metrics cost in the gateway itself, much less moved by a busy machine
            # than requests/s.
            cpu_us: dict[str, list[float]] = {"on": [], "off": []}
            by_name = {proc.name.removeprefix("gw-metrics-"): proc for proc in procs}
            scrapes = 0
            for round_ in range(args.rounds):
                for name in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                    stop = asyncio.Event()
                    scraper = (
                        asyncio.create_task(scrape_every(ports["on"][1], 5.0, stop)) if name == "on" else None
                    )
                    cpu_before = by_name[name].cpu_seconds()
                    result, out = await asyncio.to_thread(
                        wrk, ports[name][0], args.seconds, args.connections, headers
                    )
                    answered = result["rps"] * args.seconds
                    cpu_us[name].append((by_name[name].cpu_seconds() - cpu_before) / max(answered, 1) * 1e6)
                    stop.set()
                    if scraper is not None:
                        scrapes += await scraper
                    if result["non_2xx"] or result["socket_errors"]:
                        print(out)
                    runs[name].append(result["rps"])
                    print(
                        f"round {round_ + 1} metrics {name:3} {result['rps']:8.0f} req/s "
                        f"{cpu_us[name][-1]:6.1f} us CPU/request",
                        flush=True,
                    )
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{ports['on'][1]}/metrics") as response,
            ):
                on_page = await response.text()
            medians = {k: statistics.median(v) for k, v in runs.items()}
            cpu = {k: statistics.median(v) for k, v in cpu_us.items()}
            return {
                "cpu_us_per_request": cpu_us,
                "median_cpu_us": cpu,
                # Requests one core answers with metrics on, as a share of off: off's CPU / on's.
                "cpu_ratio_on_off": cpu["off"] / cpu["on"],
                "rps": runs,
                "median_rps": medians,
                "ratio_on_off": medians["on"] / medians["off"],
                "ratios_round_by_round": [a / b for a, b in zip(runs["on"], runs["off"], strict=True)],
                "scrapes_during_on": scrapes,
                "gateway_series": sum(series_of(on_page).values()),
                "rounds": args.rounds,
                "seconds": args.seconds,
                "connections": args.connections,
                "load": os.getloadavg(),
            }
    finally:
        for proc in procs:
            proc.stop()
        upstream.stop()
        plane.stop()


# -- series -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("--rounds", type=int, default=6)
    tp.add_argument("--seconds", type=float, default=5)
    tp.add_argument("--connections", type=int, default=50)
    se = sub.add_parser("series")
    se.add_argument("--students", type=int, nargs="+", default=[100, 1000])
    se.add_argument("--courses", type=int, default=4)
    se.add_argument("--templates", type=int, default=2)
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.what == "throughput":
        results["throughput"] = asyncio.run(throughput(args))
        t = results["throughput"]
        print(f"CPU per request off/on: {t['cpu_ratio_on_off']:.3f}x ({t['median_cpu_us']} us)")
        print(
            f"metrics on/off: {t['ratio_on_off']:.3f}x ({t['median_rps']}); round by round "
            f"{min(t['ratios_round_by_round']):.3f}-{max(t['ratios_round_by_round']):.3f}"
        )
    else:
        results["series"] = asyncio.run(series(args))
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
