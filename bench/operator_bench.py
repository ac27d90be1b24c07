"""Operator benchmark on the real control plane (run by hand: `make bench` or this file).

Side by side, in one run on one fresh control plane:
  limit       the API server's own rate: 1,000 Deployment+Service pairs created directly
              at 20 concurrent requests (what no operator can beat);
  converge    cold start: 1,000 Userlands exist, then the operator starts; time until every
              Deployment and Service exists and every Userland has a status;
  writes      API writes per new Userland (Events counted apart);
  steady      writes during 60 s of steady state, resyncs included (target 0);
  latency     a Userland's creation -> its Deployment's ADDED event (p50/p99), at 10/s;
  rss         the operator's resident memory at 1,000 and 5,000 Userlands.
Prints a table and writes bench/results/operator.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from userland.local.controlplane import ControlPlane, crd_files, free_port
from userland.operator.rules import builders
from userland.platform.clients.kube import (
    DEPLOYMENTS,
    NAMESPACES,
    SERVICES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    NotFound,
)
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland

HERE = Path(__file__).resolve().parent


def deployment_pair(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The very Deployment and Service the operator makes for student i (minus the owner,
    which does not exist here), so the controller-manager does the same work after both."""
    template = Template.from_object({**TEMPLATE, "metadata": {"name": "vscode", "namespace": "direct"}})
    body = userland(i)
    body["metadata"] = {**body["metadata"], "namespace": "direct", "uid": "none"}
    children = builders.desired_children(Userland.from_object(body), template)
    for child in (children.deployment, children.service):
        child["metadata"].pop("ownerReferences")
    return children.deployment, children.service


async def bounded(n: int, concurrency: int, job: Any) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await job(i)

    await asyncio.gather(*(one(i) for i in range(n)))


async def api_limit(kube: KubeClient, n: int) -> float:
    """Seconds to create the n pairs at 20 concurrent requests (then removes them, waiting)."""
    await kube.create(NAMESPACES, None, {"metadata": {"name": "direct"}})

    async def pair(i: int) -> None:
        deployment, service = deployment_pair(i)
        await kube.create(DEPLOYMENTS, "direct", deployment)
        await kube.create(SERVICES, "direct", service)

    start = time.perf_counter()
    await bounded(n, 20, pair)
    elapsed = time.perf_counter() - start
    await kube.delete(NAMESPACES, None, "direct")
    # Let the controllers finish deleting it all, so none of that overlaps the next part.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            await kube.get(NAMESPACES, None, "direct")
        except NotFound:
            break
        await asyncio.sleep(1)
    return elapsed


TEMPLATE = {
    "apiVersion": naming.API_VERSION,
    "kind": "Template",
    "metadata": {"name": "vscode"},
    "spec": {
        "routing": {"host": "ide.example.edu"},
        "port": 8080,
        "podSpec": {
            "containers": [
                {
                    "name": "ide",
                    "image": "codercom/code-server:4",
                    "args": ["--auth", "none"],
                    "env": [{"name": "STUDENT", "value": "${USER}"}],
                }
            ]
        },
    },
}


def userland(i: int) -> dict[str, Any]:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "Userland",
        "metadata": {"name": f"vscode-student{i}"},
        "spec": {"user": f"student{i}", "template": "vscode"},
    }


class Operator:
    def __init__(self, kubeconfig: Path, namespace: str, log: Path, workers: int, resync: float) -> None:
        self.port = free_port()
        env = {**os.environ, "USERLAND_NAMESPACES": namespace, "USERLAND_LEASE_NAMESPACE": namespace}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "userland.cli.main",
                "--log-level",
                "WARNING",
                "operator",
                "--kubeconfig",
                str(kubeconfig),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(workers),
                "--resync",
                str(resync),
            ],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    async def metrics(self) -> dict[str, float]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}/metrics") as resp,
        ):
            text = await resp.text()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("userland_operator_") and " " in line:
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    async def wait_metrics(self) -> dict[str, float]:
        while True:
            try:
                return await self.metrics()
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)

    def writes(self, metrics: dict[str, float], *, events: bool = False) -> float:
        return sum(
            v
            for k, v in metrics.items()
            if k.startswith("userland_operator_api_writes_total") and ('kind="Event"' in k) == events
        )

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def count(metrics: dict[str, float], verb: str, kind: str) -> float:
    return metrics.get(f'userland_operator_api_writes_total{{kind="{kind}",verb="{verb}"}}', 0.0)


async def wait_converged(op: Operator, total: int, start: float) -> float:
    while True:
        m = await op.metrics()
        if (
            count(m, "create", "Deployment") >= total
            and count(m, "create", "Service") >= total
            and count(m, "patch", "Userland/status") >= total
            and m.get("userland_operator_queue_depth", 1) == 0
        ):
            return time.perf_counter() - start
        await asyncio.sleep(0.05)


async def creation_latency(kube: KubeClient, ns: str, first: int, n: int, rate: float) -> list[float]:
    created: dict[str, float] = {}
    seen: dict[str, float] = {}
    # Only a resourceVersion to watch from: one page of one item carries it (walking every
    # page of 1,000 Deployments one at a time outlived its continue token here).
    page = await kube.request("GET", DEPLOYMENTS.path(ns), query={"limit": "1"})
    version = page["metadata"]["resourceVersion"]

    async def watch() -> None:
        nonlocal version
        while len(seen) < n:
            async for event in kube.watch(DEPLOYMENTS, ns, version, timeout_seconds=60):
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] == "ADDED":
                    seen.setdefault(obj["metadata"]["name"], time.perf_counter())
                if len(seen) >= n:
                    return

    watcher = asyncio.create_task(watch())
    for i in range(first, first + n):
        body = userland(i)
        created[f"vscode-student{i}"] = time.perf_counter()
        await kube.create(USERLANDS, ns, body)
        await asyncio.sleep(1 / rate)
    await asyncio.wait_for(watcher, 120)
    return sorted((seen[name] - t) * 1000 for name, t in created.items())


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="userland-bench-"))
    plane = ControlPlane(state_dir=state).start(crd_files())
    results: dict[str, Any] = {"userlands": args.n, "workers": args.workers}
    op: Operator | None = None
    try:
        async with await KubeClient.connect(str(plane.kubeconfig), pool_size=64) as kube:
            results["api_limit_s"] = await api_limit(kube, args.n)
            print(
                f"API server limit: {args.n} Deployment+Service pairs directly in "
                f"{results['api_limit_s']:.2f} s",
                flush=True,
            )
            ns = "bench"
            await kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
            await kube.create(TEMPLATES, ns, TEMPLATE)
            await bounded(args.n, 20, lambda i: kube.create(USERLANDS, ns, userland(i)))
            op = Operator(plane.kubeconfig, ns, state / "operator.log", args.workers, args.resync)
            start = time.perf_counter()
            await op.wait_metrics()
            results["converge_s"] = await wait_converged(op, args.n, start)
            results["converge_operator_cpu_s"] = op.cpu_seconds()
            m = await op.metrics()
            results["writes_per_userland"] = op.writes(m) / args.n
            results["events_per_userland"] = op.writes(m, events=True) / args.n
            deployments = len((await kube.list(DEPLOYMENTS, ns))["items"])
            services = len((await kube.list(SERVICES, ns))["items"])
            assert deployments == services == args.n, (deployments, services)
            # The machine is shared: measure the limit again right after (the operator
            # paused), and compare with the mean of both.
            op.proc.send_signal(signal.SIGSTOP)
            results["api_limit_after_s"] = await api_limit(kube, args.n)
            op.proc.send_signal(signal.SIGCONT)
            limit = (results["api_limit_s"] + results["api_limit_after_s"]) / 2
            results["converge_ratio"] = results["converge_s"] / limit
            print(f"API server limit again: {results['api_limit_after_s']:.2f} s", flush=True)
            print(
                f"converged: {results['converge_s']:.2f} s "
                f"(operator CPU {results['converge_operator_cpu_s']:.1f} s; "
                f"{results['converge_ratio']:.2f}x the mean API limit), "
                f"{results['writes_per_userland']:.2f} writes + {results['events_per_userland']:.2f} "
                "events per Userland",
                flush=True,
            )
            await asyncio.sleep(3)  # let the controller-manager's status updates pass by
            before_m = await op.metrics()
            before = op.writes(before_m)
            reconciles_before = sum(
                v
                for k, v in (await op.metrics()).items()
                if k.startswith("userland_operator_reconciles_total")
            )
            await asyncio.sleep(args.steady)
            m = await op.metrics()
            results["steady_writes"] = op.writes(m) - before
            results["steady_writes_by_kind"] = {
                k.split("{", 1)[1].rstrip("}"): v - before_m.get(k, 0) for k, v in m.items()
                if k.startswith("userland_operator_api_writes_total") and v != before_m.get(k, 0)}
            # The leader's Lease heartbeat (one renewal per 2 s) is leader election, not work.
            results["steady_lease_renewals"] = sum(
                v for k, v in results["steady_writes_by_kind"].items() if 'kind="Lease"' in k)
            results["steady_object_writes"] = results["steady_writes"] - results["steady_lease_renewals"]
            results["steady_reconciles"] = (
                sum(v for k, v in m.items() if k.startswith("userland_operator_reconciles_total"))
                - reconciles_before
            )
            results["rss_mib_at_n"] = op.rss_mib()
            print(
                f"steady state {args.steady:.0f} s: {results['steady_object_writes']:.0f} object writes "
                f"+ {results['steady_lease_renewals']:.0f} Lease renewals "
                f"({results['steady_reconciles']:.0f} reconciles, resync every {args.resync:.0f} s); "
                f"RSS {results['rss_mib_at_n']:.1f} MiB at {args.n}",
                flush=True,
            )
            latencies = await creation_latency(kube, ns, args.n, args.latency_n, args.latency_rate)
            results["latency_ms_p50"] = statistics.median(latencies)
            results["latency_ms_p99"] = pct(latencies, 99)
            print(
                f"creation -> Deployment: p50 {results['latency_ms_p50']:.1f} ms, "
                f"p99 {results['latency_ms_p99']:.1f} ms ({args.latency_n} at {args.latency_rate}/s)",
                flush=True,
            )
            if args.big > args.n:
                first = args.n + args.latency_n
                extra = args.big - first
                start = time.perf_counter()
                await bounded(extra, 20, lambda i: kube.create(USERLANDS, ns, userland(first + i)))
                await wait_converged(op, args.big, start)
                await asyncio.sleep(5)
                results["rss_mib_at_big"] = op.rss_mib()
                results["big"] = args.big
                print(f"RSS {results['rss_mib_at_big']:.1f} MiB at {args.big} Userlands", flush=True)
    finally:
        if op is not None:
            op.stop()
        plane.stop()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--big", type=int, default=5000, help="Userlands for the second RSS reading")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--steady", type=float, default=60.0)
    parser.add_argument("--resync", type=float, default=20.0)
    parser.add_argument("--latency-n", type=int, default=200)
    parser.add_argument("--latency-rate", type=float, default=10.0)
    args = parser.parse_args()
    results = asyncio.run(main(args))
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "operator.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
