"""Assignments at the scale of a big course, measured (by hand; figures go in docs/benchmarks.md):

  .venv/bin/python bench/assignment_bench.py [--students 500] [--running 50] [--source-mb 50] [--folder-mb 10]

One `userland local` (real control plane, operator, assignment store, git server, the local
runner playing the kubelet for environments and worker Pods alike); a Template with storage whose
environment is the runner's built-in demo (no program to start, so the machine's two cores go to
the work measured); N students, the first `--running` of them running, the rest suspended (their
volumes written while scaled to zero, as a sleeping class's are).

1. hand out a source of `--source-mb` (incompressible files) from the git server: the time from
   creating the Assignment until every student has it (goal: under 5 minutes), the part of it
   spent fetching (once per assignment, not per student), API writes per student, the
   operator's memory;
2. collection of `--folder-mb` in every student's folder: the time from the deadline until every
   copy is taken (goal: under 2 minutes), the copies' lateness, API writes, memory.
Results: bench/results/assignments.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.make_run import read_until_ready  # noqa: E402
from userland.local.gitserver import make_repository  # noqa: E402
from userland.platform.clients.kube import ASSIGNMENTS, PVCS, TEMPLATES, USERLANDS, KubeClient  # noqa: E402
from userland.platform.model import naming  # noqa: E402
from userland.platform.model.objects import rfc3339  # noqa: E402

NS = "classroom"
MIB = 1024 * 1024


def metric_totals(text: str, name: str) -> dict[str, float]:
    """Samples of one metric by their label text ("" for none)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name):
            labels, _, value = line[len(name):].rpartition(" ")
            found[labels] = float(value)
    return found


class Process:
    """A process's resident memory, sampled: the peak since `peak` was last reset."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0

    def rss_mib(self) -> float:
        text = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024  # type: ignore[union-attr]

    async def sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.peak = max(self.peak, int(self.rss_mib()))
            await asyncio.sleep(0.5)


class Operator(Process):
    def __init__(self, pid: int, metrics_url: str) -> None:
        super().__init__(pid)
        self.metrics_url = metrics_url

    async def writes(self) -> dict[str, float]:
        async with aiohttp.ClientSession() as http, http.get(self.metrics_url) as response:
            return metric_totals(await response.text(), "userland_operator_api_writes_total")

    async def metric(self, name: str) -> dict[str, float]:
        async with aiohttp.ClientSession() as http, http.get(self.metrics_url) as response:
            return metric_totals(await response.text(), name)


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def assignment_writes(writes: dict[str, float]) -> float:
    """The writes the assignment made (Pods, its status and NetworkPolicy, Events), not the
    operator's background ones (the leader's Lease, environments' own status)."""
    return sum(v for k, v in writes.items() if 'kind="Lease"' not in k and 'kind="Userland' not in k)


async def status(kube: KubeClient) -> dict[str, Any]:
    return (await kube.get(ASSIGNMENTS, NS, "bench")).get("status") or {}


async def until(check: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    raise SystemExit(f"{what}: not within {timeout} s")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="userland-bench-asg-"))
    os.chmod(state, 0o755)
    # The lead a deployment has by default (make run's own is 10 s, for a newcomer's "collect now").
    env = {**os.environ, "USERLAND_ASSIGNMENT_BATCH": str(args.batch),
           "USERLAND_COLLECT_LEAD_SECONDS": str(args.lead),
           # 500 students' copies are more than the default quotas (5,000 / 10,000 MB): a class
           # this large gets quotas of its size (docs/assignments.md, "Quotas and retention").
           "USERLAND_STORE_ASSIGNMENT_QUOTA_MB": "0", "USERLAND_STORE_COURSE_QUOTA_MB": "0"}
    port = 8000 + random.randint(500, 900)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state / "s"), "--students", "teacher", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=env)
    lines: list[str] = []
    result: dict[str, Any] = {"students": args.students, "running": args.running, "source_mb": args.source_mb,
                              "folder_mb": args.folder_mb, "batch": args.batch}
    stop = asyncio.Event()
    try:
        await asyncio.wait_for(read_until_ready(process, lines), 180)
        banner = "".join(lines)
        operator = Operator(int(re.search(r"operator (\d+)", banner).group(1)),  # type: ignore[union-attr]
                            re.search(r"Operator\s+(http://\S+/)healthz", banner).group(1) + "metrics")  # type: ignore[union-attr]
        store = Process(int(re.search(r"store (\d+)", banner).group(1)))  # type: ignore[union-attr]
        sampler = asyncio.gather(operator.sample(stop), store.sample(stop))
        result["operator_pid"] = operator.pid
        async with await KubeClient.connect(str(state / "s" / "kubeconfig")) as kube:
            demo = await kube.get(TEMPLATES, NS, "demo")
            await kube.create(TEMPLATES, NS, {"apiVersion": naming.API_VERSION, "kind": "Template",
                                              "metadata": {"name": "lab"}, "spec": {
                                                  **demo["spec"], "routing": {"host": "lab.localhost"},
                                                  "displayName": "Lab",
                                                  "storage": {"size": "1Gi", "mountPath": "/home/student"}}})
            logins = [f"s{n:03d}" for n in range(args.students)]
            for n, login in enumerate(logins):
                await kube.create(USERLANDS, NS, {"apiVersion": naming.API_VERSION, "kind": "Userland",
                                                  "metadata": {"name": f"lab-{login}"},
                                                  "spec": {"user": login, "template": "lab",
                                                           "suspended": n >= args.running}})

            async def volumes() -> bool:
                items = (await kube.list(PVCS, NS, label_selector=f"{naming.LABEL_TEMPLATE}=lab"))["items"]
                return len(items) == len(logins)
            await until(volumes, 600, "every student's volume")
            print(f"{len(logins)} students, {args.running} running")

            # 1. hand out
            files = {f"data/part{i:03d}.bin": random.Random(i).randbytes(args.source_mb * MIB // 100)
                     for i in range(100)}
            files["README.md"] = "Benchmark source\n"
            make_repository(state / "s" / "git", "bench", files)
            welcome = await kube.get(ASSIGNMENTS, NS, "welcome")
            url = welcome["spec"]["source"]["url"].replace("/starter.git", "/bench.git")
            writes_before = await operator.writes()
            fetch_metric = "userland_operator_assignment_fetch_seconds_sum"
            fetch_before = sum((await operator.metric(fetch_metric)).values())
            operator.peak = store.peak = 0
            await kube.create(ASSIGNMENTS, NS, {"apiVersion": naming.API_VERSION, "kind": "Assignment",
                                                "metadata": {"name": "bench"},
                                                "spec": {"title": "Bench", "templates": ["lab"],
                                                         "path": "bench",
                                                         "source": {"url": url}}})

            async def handed() -> bool:
                return (await status(kube)).get("handedOut") == f"{len(logins)}/{len(logins)}"
            elapsed = await until(handed, 1800, "every student has the source")
            fetch = sum((await operator.metric(fetch_metric)).values())
            await asyncio.sleep(5)  # the last Pods' removals and Events
            writes = difference(await operator.writes(), writes_before)
            result["handout"] = {
                "every_student_has_it_s": round(elapsed, 1), "fetch_s": round(fetch - fetch_before, 2),
                "fetch_share": round((fetch - fetch_before) / elapsed, 3),
                "api_writes": writes,
                "assignment_writes_per_student": round(assignment_writes(writes) / len(logins), 3),
                "operator_rss_peak_mib": operator.peak, "store_rss_peak_mib": store.peak}
            print(f"hand-out: {result['handout']}")

            # 2. collect: another assignment (a small source), each folder `--folder-mb` of work
            make_repository(state / "s" / "git", "small", {"README.md": "Write your work here.\n"})
            await kube.create(ASSIGNMENTS, NS, {"apiVersion": naming.API_VERSION, "kind": "Assignment",
                                                "metadata": {"name": "work"},
                                                "spec": {"title": "Work", "templates": ["lab"],
                                                         "path": "work",
                                                         "source": {"url": url.replace("/bench.git",
                                                                                       "/small.git")}}})

            async def handed_small() -> bool:
                obj = (await kube.get(ASSIGNMENTS, NS, "work")).get("status") or {}
                return obj.get("handedOut") == f"{len(logins)}/{len(logins)}"
            await until(handed_small, 1800, "every student has the second assignment")
            volume_root = state / "s" / "environments" / "volumes" / NS
            block = random.Random(7).randbytes(args.folder_mb * MIB)
            for login in logins:
                folder = volume_root / naming.pvc_name("lab", login) / "work"
                (folder / "work.bin").write_bytes(block[:-8] + login.encode().ljust(8))
            due = (datetime.now(UTC) + timedelta(seconds=args.lead + 30)).replace(microsecond=0)
            writes_before = await operator.writes()
            operator.peak = store.peak = 0
            await kube.merge_patch(ASSIGNMENTS, NS, "work", {"spec": {"due": rfc3339(due)}})
            await asyncio.sleep((due - datetime.now(UTC)).total_seconds())

            async def collected() -> bool:
                obj = (await kube.get(ASSIGNMENTS, NS, "work")).get("status") or {}
                return obj.get("collected") == f"{len(logins)}/{len(logins)}"
            elapsed = await until(collected, 1800, "every copy taken")
            final = (await kube.get(ASSIGNMENTS, NS, "work")).get("status") or {}
            taken = [datetime.fromisoformat(s["collected"]["takenAt"].replace("Z", "+00:00"))
                     for s in final["students"] if s.get("collected")]
            await asyncio.sleep(5)
            writes = difference(await operator.writes(), writes_before)
            result["collect"] = {
                "every_copy_taken_s": round(elapsed, 1),
                "last_copy_taken_after_deadline_s": round((max(taken) - due).total_seconds(), 1),
                "copies_late": sum(1 for s in final["students"] if (s.get("collected") or {}).get("late")),
                "copy_bytes": sum((s.get("collected") or {}).get("bytes", 0) for s in final["students"]),
                "store_rss_peak_mib": store.peak,
                "api_writes": writes,
                "assignment_writes_per_student": round(assignment_writes(writes) / len(logins), 3),
                "operator_rss_peak_mib": operator.peak}
            print(f"collect: {result['collect']}")
    finally:
        stop.set()
        if "sampler" in locals():
            await sampler
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), 120)
        shutil.rmtree(state, ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--running", type=int, default=50)
    parser.add_argument("--source-mb", type=int, default=50)
    parser.add_argument("--folder-mb", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--lead", type=int, default=60, help="seconds collection Pods are made ahead")
    args = parser.parse_args()
    started = time.time()
    result = asyncio.run(main_async(args))
    result["load_average_after"] = os.getloadavg()
    result["wall_s"] = round(time.time() - started, 1)
    out = REPO / "bench" / "results" / "assignments.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
