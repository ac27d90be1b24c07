"""Autograding at the scale of a big course, measured (by hand; figures go in docs/benchmarks.md):

  .venv/bin/python bench/grading_bench.py [--students 500] [--cpu 2.0] [--second 100] [--concurrency 20]

Real: kube-apiserver, etcd and the controllers; the operator (`Controller`), the local runner
(every grading Pod's three steps local processes, as under `make run`), the assignment store and
a git server, in this process (one event loop, as the operator tests run them); two courses
(namespaces). The grader (bench/grading_bench.py's `BURN`) spins on the CPU until its own process
has used `--cpu` seconds, then writes a one-test results.json and notes its CPU time. Students are
suspended (no environment runs), so the machine's cores go to the grading.

1. direct: the same grader run N times straight from this process, 20 at a time (the
   platform's concurrency), no platform: the machine's own limit measured in this run, beside
   the ideal N x cpu / cores;
2. one course, N students, due now: the deadline -> every score in, as a ratio of both limits;
   the CPU the platform spent per copy (everything this process and its children used minus the
   graders' own); API writes per student (operator and runner, each with its own client);
3. the same copies regraded with a grader that does nothing (tests changed to 0 s): the time
   per copy of the scheduling alone;
4. two courses due at the same moment (N and `--second` students, another assignment):
   when each course's first, median and last score arrive (neither waits for the other).
Results: bench/results/grading.json (with the load average sampled during each part).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.coursework import STORE_SECRET, GitServer, git_server, store_server  # noqa: E402
from userland.local.controlplane import ControlPlane, crd_files  # noqa: E402
from userland.local.runner import LocalRunner  # noqa: E402
from userland.local.users import environment_user  # noqa: E402
from userland.operator.controller import Controller  # noqa: E402
from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, TEMPLATES, USERLANDS, KubeClient  # noqa: E402
from userland.platform.model import naming  # noqa: E402
from userland.platform.model.objects import rfc3339  # noqa: E402
from userland.platform.model.settings import Settings  # noqa: E402

JSON = dict[str, Any]
COURSES = ("gbench-a", "gbench-b")
LEAD = 5.0  # collection Pods are made this long before a deadline
CORES = os.cpu_count() or 1

# The grader: spins until this process has used the seconds in cpu.txt (beside it), then writes
# results.json where Gradescope's layout has it (the folders side by side under the local runner)
# and appends "<cpu seconds> <end time>" to $BENCH_LOG.
BURN = '''import json, os, resource, sys, time
from pathlib import Path
here = Path(__file__).resolve().parent
seconds = float((here / "cpu.txt").read_text())
x = 0
while time.process_time() < seconds:
    for i in range(10000):
        x += i
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime
results = here.parent / "results"
results.mkdir(parents=True, exist_ok=True)
(results / "results.json").write_text(json.dumps({"score": 1, "tests": [
    {"name": "burn", "score": 1, "max_score": 1, "output": f"cpu {cpu:.2f} s"}]}))
with open(os.environ["BENCH_LOG"], "a") as log:
    log.write(f"{cpu:.4f} {time.time():.3f}\\n")
'''
RUN = '#!/bin/sh\nexec python3 "$(dirname "$0")/burn.py"\n'


def tests_files(cpu: float) -> dict[str, bytes | str | None]:
    return {"week1/README.md": "Write your answer here.\n", "grading/run_autograder": RUN,
            "grading/burn.py": BURN, "grading/cpu.txt": f"{cpu}\n"}


def template() -> JSON:
    spec: JSON = {
        "displayName": "Lab", "routing": {"host": "lab.localhost"}, "port": 8080,
        "storage": {"size": "1Gi", "mountPath": "/home/student"},
        "podSpec": {"containers": [{"name": "ide", "image": "lab:1", "command": ["/usr/bin/python3"],
                                    "args": ["-m", "http.server", "8080"]}]}}
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": "lab"}, "spec": spec}


def tree_cpu() -> float:
    """CPU seconds used by this process and every process below it (the control plane, the
    grading Pods' processes), the reaped ones included (their parents' cutime/cstime)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
            times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / tick
    mine = {os.getpid()}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine} - mine
        grew = bool(found)
        mine |= found
    return sum(times.get(pid, 0.0) for pid in mine)


class Load:
    """/proc/loadavg's 1-minute figure, sampled every 5 s during a part."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    @contextlib.asynccontextmanager
    async def during(self) -> AsyncIterator[None]:
        async def sample() -> None:
            while True:
                self.samples.append(os.getloadavg()[0])
                await asyncio.sleep(5)
        task = asyncio.create_task(sample())
        try:
            yield
        finally:
            task.cancel()

    def summary(self) -> JSON:
        found = self.samples or [0.0]
        return {"min": min(found), "median": statistics.median(found), "max": max(found)}


def log_lines(path: Path) -> list[tuple[float, float]]:
    if not path.exists():
        return []
    return [(float(a), float(b)) for a, b in (line.split() for line in path.read_text().splitlines() if line)]


async def direct(n: int, cpu: float, work: Path, concurrency: int) -> float:
    """The grader run n times from here, `concurrency` at a time: seconds."""
    source = work / "source"
    source.mkdir(parents=True)
    (source / "burn.py").write_text(BURN)
    (source / "cpu.txt").write_text(f"{cpu}\n")
    sem = asyncio.Semaphore(concurrency)
    env = {**os.environ, "BENCH_LOG": str(work / "direct.log")}

    processes: list[asyncio.subprocess.Process] = []

    async def one() -> None:
        async with sem:
            # python3 from PATH, as the local runner's grading Pods find it
            process = await asyncio.create_subprocess_exec("python3", str(source / "burn.py"), env=env)
            processes.append(process)
            await process.wait()
    started = time.monotonic()
    try:
        await asyncio.gather(*(one() for _ in range(n)))
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
    return time.monotonic() - started


class Bench:
    def __init__(self, kube: KubeClient, git: GitServer, args: argparse.Namespace, log: Path) -> None:
        self.kube, self.git, self.args, self.log = kube, git, args, log
        self.collected: dict[tuple[str, str], float] = {}

    async def students(self, ns: str, name: str) -> list[JSON]:
        status = (await self.kube.get(ASSIGNMENTS, ns, name)).get("status") or {}
        found = list(status.get("students") or [])
        if status.get("collected") == f"{len(found)}/{len(found)}":
            self.collected.setdefault((ns, name), time.monotonic())  # every copy taken: first seen
        return found

    async def assignment(self, ns: str, name: str, repo: str) -> None:
        await self.kube.create(ASSIGNMENTS, ns, {
            "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": name},
            "spec": {"title": name, "templates": ["lab"], "path": "week1", "due": "2099-01-01T00:00:00Z",
                     "source": {"url": self.git.url_of(repo), "subPath": "week1"},
                     "grader": {"image": "bench/grader:1", "tests": {"path": "grading"}, "maxScore": 1,
                                "timeLimit": "600s",
                                "env": [{"name": "BENCH_LOG", "value": str(self.log)}]}}})

    async def until(self, check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
        started = time.monotonic()
        while not await check():
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{what}: not within {timeout} s")
            await asyncio.sleep(1)

    async def handed_out(self, ns: str, name: str, n: int) -> None:
        async def check() -> bool:
            found = await self.students(ns, name)
            return len(found) == n and all(s.get("state") == "HandedOut" for s in found)
        await self.until(check, 1800, f"{ns}/{name} handed out")

    async def graded(self, wanted: dict[tuple[str, str], int],
                     since: dict[tuple[str, str], str] | None = None) -> dict[tuple[str, str], list[float]]:
        """Poll until every student of each (course, assignment) is Graded (with an `at` after
        `since`, for a regrade): for each, the monotonic times at which its scores were seen."""
        seen: dict[tuple[str, str], dict[str, float]] = {key: {} for key in wanted}
        while any(len(seen[key]) < n for key, n in wanted.items()):
            for (ns, name), n in wanted.items():
                if len(seen[(ns, name)]) >= n:
                    continue
                now = time.monotonic()
                for entry in await self.students(ns, name):
                    grading = entry.get("grading") or {}
                    if grading.get("state") == "Failed":
                        raise SystemExit(f"{ns}/{name} {entry['user']}: {grading}")
                    fresh = since is None or str(grading.get("at", "")) > since[(ns, name)]
                    if grading.get("state") == "Graded" and fresh:
                        seen[(ns, name)].setdefault(entry["user"], now)
            await asyncio.sleep(0.5)
        return {key: sorted(found.values()) for key, found in seen.items()}

    async def due_now(self, targets: list[tuple[str, str]]) -> float:
        """Sets every target's deadline to the same moment a little ahead; sleeps until it: the
        monotonic time of the deadline."""
        due = (datetime.now(UTC) + timedelta(seconds=LEAD + 5)).replace(microsecond=0)
        for ns, name in targets:
            await self.kube.merge_patch(ASSIGNMENTS, ns, name, {"spec": {"due": rfc3339(due)}})
        wait = (due - datetime.now(UTC)).total_seconds()
        await asyncio.sleep(wait)
        return time.monotonic()


def writes_of(*clients: KubeClient) -> dict[str, int]:
    total: dict[str, int] = {}
    for client in clients:
        for (verb, kind), count in client.writes.items():
            total[f"{verb} {kind}"] = total.get(f"{verb} {kind}", 0) + count
    return total


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def object_writes(writes: dict[str, int]) -> int:
    """Writes of the grading (Pods, their status, the Assignment's status, Events), not leader
    election's Lease renewals."""
    return sum(v for k, v in writes.items() if not k.endswith("Lease"))


def arrivals(times: list[float], zero: float) -> JSON:
    rel = [t - zero for t in times]
    return {"first_s": round(rel[0], 1), "median_s": round(statistics.median(rel), 1),
            "last_s": round(rel[-1], 1), "scores": len(rel)}


async def main_async(args: argparse.Namespace) -> JSON:
    # Not under /tmp: the local runner maps a grading Pod's own /tmp volume over paths there.
    state = Path(tempfile.mkdtemp(prefix="userland-gbench-", dir="/var/tmp"))
    print(f"state: {state}", flush=True)
    os.chmod(state, 0o755)
    n, second, cpu = args.students, args.second, args.cpu
    log = state / "graders.log"
    log.touch(mode=0o666)  # the graders run as the environments' user
    log.chmod(0o666)
    result: JSON = {"students": n, "second_course_students": second, "grader_cpu_s": cpu, "cores": CORES,
                    "concurrency": args.concurrency, "started": rfc3339()}
    ideal = n * cpu / CORES
    result["ideal_limit_s"] = round(ideal, 1)

    load = Load()
    async with load.during():
        result["direct_s"] = round(await direct(n, cpu, state / "direct", args.concurrency), 1)
    result["direct_load"] = load.summary()
    print(f"direct: {n} x {cpu} s CPU in {result['direct_s']} s (ideal {ideal:.1f} s on {CORES} cores), "
          f"load {result['direct_load']}", flush=True)

    plane = ControlPlane(state_dir=state / "plane").start(crd_files())
    try:
        kube = await KubeClient.connect(str(plane.kubeconfig))
        runner_kube = await KubeClient.connect(str(plane.kubeconfig))
        operator_kube = await KubeClient.connect(str(plane.kubeconfig))
        async with contextlib.AsyncExitStack() as stack:
            for client in (kube, runner_kube, operator_kube):
                stack.push_async_callback(client.close)
            for ns in COURSES:
                await kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
            git = await stack.enter_async_context(git_server(state / "git"))
            store_url = await stack.enter_async_context(
                store_server(state / "store", git_urls=(git.url + "/",)))
            (state / "run").mkdir()
            os.chmod(state / "run", 0o755)
            runner = LocalRunner(runner_kube, list(COURSES), state_dir=state / "run", user=environment_user(),
                                 backoff=0.2, max_backoff=1.0)
            runner_task = asyncio.create_task(runner.run())
            settings = Settings(namespaces=COURSES, public_url="https://userland.example.edu",
                                image_pull_wait_seconds=0, store_url=store_url, store_secret=STORE_SECRET,
                                collect_lead_seconds=LEAD, grading_concurrency=args.concurrency)
            controller = Controller(operator_kube, settings, workers=4)
            tasks = [asyncio.create_task(controller.run_informers()), asyncio.create_task(controller.lead())]

            async def stop() -> None:
                for task in (*tasks, runner_task):
                    task.cancel()
                await asyncio.gather(*tasks, runner_task, return_exceptions=True)
                await controller.events.close()
                await controller.close()
                controller.queue.close()
            stack.push_async_callback(stop)
            await asyncio.wait_for(runner.wait_synced(), 60)
            await asyncio.wait_for(controller.wait_synced(), 60)
            bench = Bench(kube, git, args, log)

            sizes = {COURSES[0]: n, COURSES[1]: second}
            for ns, size in sizes.items():
                await kube.create(TEMPLATES, ns, template())
                for i in range(size):
                    login = f"s{i:03d}"
                    await kube.create(USERLANDS, ns, {
                        "apiVersion": naming.API_VERSION, "kind": "Userland",
                        "metadata": {"name": naming.userland_name("lab", login)},
                        "spec": {"user": login, "template": "lab", "suspended": True}})
            git.repo("one", tests_files(cpu))
            git.repo("fair", tests_files(cpu))
            # Every assignment handed out ahead (due far away), so the parts measure grading only.
            await bench.assignment(COURSES[0], "one", "one")
            await bench.assignment(COURSES[0], "fair", "fair")
            await bench.assignment(COURSES[1], "fair", "fair")
            for ns, name in ((COURSES[0], "one"), (COURSES[0], "fair"), (COURSES[1], "fair")):
                await bench.handed_out(ns, name, sizes[ns])
            print(f"handed out: {n} + {second} students", flush=True)

            # 2. one course due now
            load = Load()
            writes_before, cpu_before = writes_of(runner_kube, operator_kube), tree_cpu()
            operator_before = writes_of(operator_kube)
            graders_before = len(log_lines(log))
            async with load.during():
                deadline = await bench.due_now([(COURSES[0], "one")])
                seen = await bench.graded({(COURSES[0], "one"): n})
            done = seen[(COURSES[0], "one")]
            elapsed = done[-1] - deadline
            await asyncio.sleep(3)  # the last Pods' removals
            spent = tree_cpu() - cpu_before
            graders = log_lines(log)[graders_before:]
            grader_cpu = sum(c for c, _ in graders)
            writes = difference(writes_of(runner_kube, operator_kube), writes_before)
            operator_writes = difference(writes_of(operator_kube), operator_before)
            result["one_course"] = {
                "deadline_to_every_score_s": round(elapsed, 1),
                "ratio_to_ideal": round(elapsed / ideal, 2),
                "ratio_to_direct": round(elapsed / result["direct_s"], 2),
                "scores": arrivals(done, deadline),
                "every_copy_taken_s": round(bench.collected[(COURSES[0], "one")] - deadline, 1),
                "graders": len(graders), "grader_cpu_s": round(grader_cpu, 1),
                "all_cpu_s": round(spent, 1),
                "platform_cpu_per_copy_s": round((spent - grader_cpu) / n, 3),
                "wall_beyond_ideal_per_copy_s": round((elapsed - ideal) / n, 3),
                "api_writes": writes, "api_writes_per_student": round(object_writes(writes) / n, 2),
                "operator_writes_per_student": round(object_writes(operator_writes) / n, 2),
                "load": load.summary()}
            print(f"one course: {result['one_course']}", flush=True)

            # 3. the same copies regraded with a grader of ~0 s: the platform alone
            before = {(COURSES[0], "one"): max(str((s.get("grading") or {}).get("at", ""))
                                               for s in await bench.students(COURSES[0], "one"))}
            git.repo("one", {"grading/cpu.txt": "0\n"})
            load = Load()
            cpu_before = tree_cpu()
            async with load.during():
                started = time.monotonic()
                await kube.merge_patch(ASSIGNMENTS, COURSES[0], "one", {"metadata": {"annotations": {
                    naming.ANNOTATION_REGRADE: rfc3339()}}})
                seen = await bench.graded({(COURSES[0], "one"): n}, since=before)
            done = seen[(COURSES[0], "one")]
            await asyncio.sleep(3)
            result["zero_grader"] = {
                "regrade_to_every_score_s": round(done[-1] - started, 1),
                "per_copy_s": round((done[-1] - started) / n, 3),
                "scores": arrivals(done, started),
                "all_cpu_per_copy_s": round((tree_cpu() - cpu_before) / n, 3),
                "load": load.summary()}
            print(f"zero grader: {result['zero_grader']}", flush=True)

            # 4. two courses due at once
            load = Load()
            targets = [(COURSES[0], "fair"), (COURSES[1], "fair")]
            async with load.during():
                deadline = await bench.due_now(targets)
                seen = await bench.graded({t: sizes[t[0]] for t in targets})
            result["two_courses"] = {
                "ideal_both_s": round((n + second) * cpu / CORES, 1),
                "big": {"course": COURSES[0], "students": n, **arrivals(seen[targets[0]], deadline)},
                "small": {"course": COURSES[1], "students": second, **arrivals(seen[targets[1]], deadline)},
                "every_copy_taken_s": {ns: round(bench.collected[(ns, "fair")] - deadline, 1)
                                       for ns in COURSES},
                "small_alone_ideal_s": round(second * cpu / CORES, 1),
                "load": load.summary()}
            print(f"two courses: {result['two_courses']}", flush=True)
    finally:
        plane.stop()
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--second", type=int, default=0, help="the second course's students (default: N / 5)")
    parser.add_argument("--cpu", type=float, default=2.0, help="CPU seconds the grader takes per copy")
    parser.add_argument("--concurrency", type=int, default=20, help="USERLAND_GRADING_CONCURRENCY")
    parser.add_argument("--keep", action="store_true", help="leave the state folder (logs) behind")
    args = parser.parse_args()
    args.second = args.second or max(1, args.students // 5)
    started = time.time()
    result = asyncio.run(main_async(args))
    result["wall_s"] = round(time.time() - started, 1)
    result["load_average_after"] = os.getloadavg()
    out = REPO / "bench" / "results" / "grading.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
