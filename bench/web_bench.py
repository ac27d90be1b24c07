"""Web UI benchmark on the real control plane (run by hand: `python bench/web_bench.py`).

One fresh control plane; one course with 500 students x 2 Templates = 1,000 Userlands created
directly (no operator: statuses are written as the operator would, a mix of phases), then the
real `userland web` process (its own watches; a real Redis, empty, for the help card) is
started and measured over HTTP with signed identity headers, as the gateway would call it:
  render      GET /courses/<ns> (page 1 of 10; sorted by login, then by status; a search; a
              Status filter, which picks environments), p50/p99;
              every row comes from the watch cache (no API call per page or row);
  sse         a status patch -> the SSE event carrying that student's row at a client, p50/p99
              (one change at a time, 5 per second);
  rss         the web process's resident memory with 1,000 Userlands loaded.
Prints a summary and writes bench/results/web.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from userland.local.controlplane import ControlPlane, crd_files, free_port
from userland.local.redisserver import redis_server
from userland.platform.clients.kube import NAMESPACES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import identity, naming
from userland.platform.model.bodies import userland_body

HERE = Path(__file__).resolve().parent
SECRET = "b" * 40
PUBLIC = "http://userland.localhost:8000"
NS = "bench-course"
TEMPLATES_USED = ("vscode", "db")
PHASES = ("Ready", "Ready", "Ready", "Starting", "Suspended", "Failed")


def template(name: str) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
            "spec": {"displayName": name.upper(), "routing": {"pathPrefix": f"/{name}/"}, "port": 8080,
                     "podSpec": {"containers": [{"name": "c", "image": "demo:1"}]}}}


def userland(student: int, tpl: str) -> dict[str, Any]:
    login = f"student{student:03d}"
    return userland_body(tpl, login, annotations={naming.ANNOTATION_STUDENT_NAME: f"Student {student}",
                                                  naming.ANNOTATION_STUDENT_SECTION: str(student % 4)})


def status(phase: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {"phase": phase, "url": f"{PUBLIC}/x/", "conditions": [{
        "type": "Ready", "status": "True" if phase == "Ready" else "False", "reason": phase,
        "message": f"bench {phase}", "lastTransitionTime": now}]}}


async def bounded(items: list[Any], concurrency: int, job: Any) -> None:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            await job(queue.get_nowait())
    await asyncio.gather(*(worker() for _ in range(concurrency)))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def signed(login: str, role: str = "student") -> dict[str, str]:
    ident = identity.for_audience(login, "web", role=role, session="be7c" * 8)  # the gateway session's id
    return dict(identity.identity_headers(ident, SECRET))


async def populate(kube: KubeClient, students: int) -> None:
    course = {"name": NS, "labels": {naming.LABEL_COURSE: "true"},
              "annotations": {naming.ANNOTATION_INSTRUCTORS: "teacher"}}
    await kube.create(NAMESPACES, None, {"metadata": course})
    for name in TEMPLATES_USED:
        await kube.create(TEMPLATES, NS, template(name))
    pairs = [(s, t) for s in range(students) for t in TEMPLATES_USED]

    async def create(pair: tuple[int, str]) -> None:
        body = userland(*pair)
        await kube.create(USERLANDS, NS, body)
        phase = PHASES[(pair[0] + TEMPLATES_USED.index(pair[1])) % len(PHASES)]
        await kube.merge_patch(USERLANDS, NS, body["metadata"]["name"], status(phase), subresource="status")
    await bounded(pairs, 32, create)


async def render_times(http: aiohttp.ClientSession, base: str, n: int, query: str) -> list[float]:
    times = []
    headers = signed("teacher")
    for _ in range(n):
        start = time.perf_counter()
        async with http.get(f"{base}/courses/{NS}{query}", headers=headers) as response:
            body = await response.read()
            assert response.status == 200, body[:300]
        times.append((time.perf_counter() - start) * 1000)
    return times


async def sse_latencies(kube: KubeClient, http: aiohttp.ClientSession, base: str, n: int) -> list[float]:
    latencies = []
    async with http.get(f"{base}/courses/{NS}/stream", headers=signed("teacher"),
                        timeout=aiohttp.ClientTimeout(total=None, sock_read=30)) as response:
        assert response.status == 200
        for i in range(n):
            login = f"student{(i * 7) % 50:03d}"  # on the page the viewer has open (page 1)
            phase = ("Starting", "Ready")[i % 2]
            await asyncio.sleep(0.2)
            start = time.perf_counter()
            await kube.merge_patch(USERLANDS, NS, f"vscode-{login}", status(phase), subresource="status")
            while True:
                line = (await asyncio.wait_for(response.content.readline(), 10)).decode()
                if line.startswith("data: ") and f'"{login}"' in line:
                    break
            latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def start_web(plane: ControlPlane, port: int, log: Path, redis_url: str) -> subprocess.Popen[bytes]:
    """The real `userland web` process (its RSS is what is measured). The dashboard reads its
    help card (requests for help, grants) from Redis: a real one, empty."""
    env = {**os.environ, "USERLAND_IDENTITY_SECRET": SECRET, "USERLAND_PUBLIC_URL": PUBLIC,
           "USERLAND_REDIS_URL": redis_url, "USERLAND_INTERNAL_LISTEN": "127.0.0.1:0"}
    with log.open("wb") as stderr:
        return subprocess.Popen([sys.executable, "-m", "userland.cli.main", "web", "--listen",
                                 f"127.0.0.1:{port}", "--kubeconfig", str(plane.kubeconfig)],
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="userland-webbench-"))
    plane = ControlPlane(state_dir=state).start(crd_files())
    results: dict[str, Any] = {"students": args.students, "userlands": args.students * len(TEMPLATES_USED)}
    web: subprocess.Popen[bytes] | None = None
    stack = contextlib.ExitStack()
    try:
        async with await KubeClient.connect(str(plane.kubeconfig), pool_size=64) as kube:
            start = time.perf_counter()
            await populate(kube, args.students)
            took = time.perf_counter() - start
            print(f"created {results['userlands']} Userlands with status in {took:.1f} s", flush=True)
            port = free_port()
            (state / "redis").mkdir()
            redis_url = stack.enter_context(redis_server(state / "redis"))
            web = start_web(plane, port, state / "web.log", redis_url)
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as http:
                start = time.perf_counter()
                while True:
                    try:
                        async with http.get(f"{base}/healthz") as response:
                            if response.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.05)
                results["ready_s"] = time.perf_counter() - start
                print(f"web UI ready (watches synced) in {results['ready_s']:.2f} s", flush=True)
                first = await render_times(http, base, 1, "")
                results["first_render_ms"] = first[0]
                for label, query in (("login", ""), ("phase", "?sort=phase"), ("search", "?q=student4"),
                                     ("status", f"?phase={args.status_filter}")):
                    times = await render_times(http, base, args.renders, query)
                    results[f"render_{label}_ms_p50"] = statistics.median(times)
                    results[f"render_{label}_ms_p99"] = pct(times, 99)
                    print(f"dashboard render ({label}): p50 {statistics.median(times):.1f} ms, "
                          f"p99 {pct(times, 99):.1f} ms over {args.renders}", flush=True)
                results["rss_mib"] = rss_mib(web.pid)
                print(f"web UI RSS {results['rss_mib']:.1f} MiB with {results['userlands']} Userlands",
                      flush=True)
                latencies = await sse_latencies(kube, http, base, args.sse)
                results["sse_ms_p50"] = statistics.median(latencies)
                results["sse_ms_p99"] = pct(latencies, 99)
                print(f"status change -> SSE event at the client: p50 {results['sse_ms_p50']:.0f} ms, "
                      f"p99 {results['sse_ms_p99']:.0f} ms over {args.sse} (notifier tick 250 ms)",
                      flush=True)
                results["rss_mib_after"] = rss_mib(web.pid)
    finally:
        if web is not None:
            web.terminate()
            try:
                web.wait(15)
            except subprocess.TimeoutExpired:
                web.kill()
        stack.close()
        plane.stop()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--renders", type=int, default=200)
    parser.add_argument("--sse", type=int, default=100)
    # A Status filter value the dashboard offers (before issue 16 Idle was "idle", now "asleep";
    # "ready" is the same key in both).
    parser.add_argument("--status-filter", default="ready")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "web.json")
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments))
    arguments.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(f"wrote {arguments.out}")
