"""Sleep and wake, measured (by hand; figures go in docs/benchmarks.md):

  .venv/bin/python bench/sleep_bench.py [--students 300] [--wakes 20]

One `userland local` (real control plane, operator, gateway, Redis, the local runner), the
demo environment as a Template with a short idle timeout:

1. wake latency: one sleeping environment at a time is opened (a page request); the time until
   the environment itself answers, p50/p99: the demo environment (it runs inside the runner: no
   program start-up, all of it is ours), and the teacher's real JupyterLab, with the part that
   is ours: that minus JupyterLab's own start-up, measured beside it in the same run (started
   alone and asked until its API answers);
2. a class arrives: N sleeping environments, N students opening them within 10 s, each
   following the waking page (a request a second) until their environment answers: the time
   until all answer, and how many requests failed (anything but 200; goal 0), at the
   operator's default wake rate (5 a second, bursts of 20);
3. activity-tracking writes per active student per hour, two gateway replicas, the real Redis
   and API server: an hour of a student using it every second, on a clock the bench moves;
4. gateway throughput with activity tracking on and off, alternating in one run, as a ratio.
Results: bench/results/sleep.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.make_run_bench import percentile  # noqa: E402
from tests.local.test_make_run import browser, read_until_ready  # noqa: E402
from tests.local.test_sleep_end_to_end import sign_in  # noqa: E402
from userland.local.controlplane import free_port  # noqa: E402
from userland.local.redisserver import redis_server  # noqa: E402
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient  # noqa: E402
from userland.platform.model import naming  # noqa: E402
from userland.platform.model.settings import Settings  # noqa: E402
from userland.proxy.activity import ActivityTracker  # noqa: E402

NS = "classroom"
HTML = {"Accept": "text/html"}
IDLE = "15s"


def origin(login: str, port: int) -> str:
    return f"http://{login}.napper.localhost:{port}"


async def phases(kube: KubeClient) -> dict[str, str]:
    items = (await kube.list(USERLANDS, NS))["items"]
    return {i["spec"]["user"]: str((i.get("status") or {}).get("phase") or "") for i in items
            if i["spec"]["template"] == "napper"}


async def wait_all(kube: KubeClient, logins: list[str], phase: str | tuple[str, ...], timeout: float) -> None:
    wanted = (phase,) if isinstance(phase, str) else phase
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = await phases(kube)
        if all(now.get(login) in wanted for login in logins):
            return
        await asyncio.sleep(1)
    raise SystemExit(f"not all {phase} within {timeout} s: {await phases(kube)}")


async def follow(http: aiohttp.ClientSession, url: str, failures: list[str]) -> float:
    """Open `url` and follow the waking page (a request a second, as its refresh does, faster
    near the end) until the environment answers; seconds taken."""
    started = time.monotonic()
    while True:
        try:
            async with http.get(url, headers=HTML) as response:
                body = await response.text()
                if response.status != 200:
                    failures.append(f"{response.status}")
                elif "Waking up" not in body and "Starting your" not in body:
                    return time.monotonic() - started
        except (aiohttp.ClientError, TimeoutError) as err:
            failures.append(type(err).__name__)
        await asyncio.sleep(0.1 if time.monotonic() - started < 1 else 1.0)


async def jupyter_start_up(samples: int) -> list[float]:
    """JupyterLab alone (the program the Template runs), started and asked until its API
    answers: the part of a JupyterLab wake that is not ours."""
    import shutil

    from userland.local.runner_host import app_bin_dirs

    path = ":".join(str(b) for b in app_bin_dirs(dict(os.environ), REPO))
    binary = shutil.which("jupyter-lab", path=path)
    if binary is None:
        return []
    times = []
    async with aiohttp.ClientSession() as http:
        for _ in range(samples):
            port = free_port()
            root = tempfile.mkdtemp(prefix="userland-bench-jl-")
            started = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                binary, "--no-browser", "--allow-root", f"--ServerApp.port={port}",
                "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", f"--ServerApp.root_dir={root}",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                env={**os.environ, "HOME": root})
            while True:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/api/status") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            times.append(time.monotonic() - started)
            process.terminate()
            await process.wait()
    return times


async def jupyter_wakes(kube: KubeClient, port: int, samples: int) -> dict[str, float] | None:
    """The teacher's real JupyterLab (make run gives the first students the real apps), put to
    sleep and woken `samples` times."""
    try:
        await kube.merge_patch(TEMPLATES, NS, "jupyterlab", {"spec": {"idleTimeout": IDLE}})
    except Exception:
        return None
    url = f"http://teacher.jupyterlab.localhost:{port}/lab"
    latencies: list[float] = []
    failures: list[str] = []
    async with browser() as http:
        await sign_in(http, port, "teacher", url)
        for _ in range(samples):
            await wait_phase(kube, "jupyterlab-teacher", "Idle", 120)
            latencies.append(await follow(http, url, failures))
    alone = await jupyter_start_up(3)
    if not alone:
        return None
    own = statistics.median(alone)
    return {"p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
            "program_start_up_p50_s": own, "ours_p50_s": max(0.0, percentile(latencies, 50) - own),
            "ours_p99_s": max(0.0, percentile(latencies, 99) - own), "failed_requests": len(failures),
            "samples": len(latencies)}


async def wait_phase(kube: KubeClient, name: str, phase: str, timeout: float) -> None:
    """Poll: another process (the operator) moves it, not an event of ours."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ((await kube.get(USERLANDS, NS, name)).get("status") or {}).get("phase") == phase:
            return
        await asyncio.sleep(1)


async def writes_per_hour(kube: KubeClient, logins: list[str], state: Path, scale: float = 100.0
                          ) -> dict[str, float]:
    """An hour of each student using their environment every second, through two gateway
    replicas (each request lands on either), real Redis (its lease expiries included) and the
    API server, run `scale` times faster: the intervals are 60 s / scale and 300 s / scale, the
    hour 3600 s / scale of real time."""
    import redis.asyncio as aioredis

    with redis_server(state) as redis_url:
        client = aioredis.from_url(redis_url)
        settings = Settings(namespaces=(NS,), redis_url=redis_url, activity_redis_seconds=60 / scale,
                            activity_api_seconds=300 / scale)
        replicas = [ActivityTracker(settings, kube, client) for _ in range(2)]
        try:
            started = time.monotonic()
            second = 0
            while time.monotonic() - started < 3600 / scale:
                for n, login in enumerate(logins):
                    replicas[(n + second) % 2].touch(NS, f"napper-{login}", 7200)
                for replica in replicas:
                    await replica.flush()
                second += 1
                await asyncio.sleep(max(0.0, started + second / scale - time.monotonic()))
        finally:
            await client.aclose()
    return {"redis_per_student_hour": sum(r.redis_writes for r in replicas) / len(logins),
            "api_per_student_hour": sum(r.api_writes for r in replicas) / len(logins),
            "replicas": 2, "time_scale": scale}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    state = Path(tempfile.mkdtemp(prefix="userland-bench-sleep-"))
    os.chmod(state, 0o755)
    env = {**os.environ, "USERLAND_LOGIN_RATE_PER_MINUTE": "100000"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port), "--state-dir",
        str(state / "s"), "--students", "teacher", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=env)
    lines: list[str] = []
    result: dict[str, Any] = {"students": args.students, "idle_timeout": IDLE}
    try:
        await asyncio.wait_for(read_until_ready(process, lines), 180)
        async with await KubeClient.connect(str(state / "s" / "kubeconfig")) as kube:
            demo = await kube.get(TEMPLATES, NS, "demo")
            await kube.create(TEMPLATES, NS, {"apiVersion": naming.API_VERSION, "kind": "Template",
                                              "metadata": {"name": "napper"}, "spec": {
                                                  **demo["spec"], "routing": {"host": "napper.localhost"},
                                                  "displayName": "Napper", "idleTimeout": IDLE}})
            logins = [f"s{n:03d}" for n in range(args.students)]
            for login in logins:
                await kube.create(USERLANDS, NS, {"apiVersion": naming.API_VERSION, "kind": "Userland",
                                                  "metadata": {"name": f"napper-{login}"},
                                                  "spec": {"user": login, "template": "napper"}})
            # Started once (the first ones may be asleep again before the last is up).
            await wait_all(kube, logins, ("Ready", "Idle"), 600)
            sessions = {login: browser() for login in logins}
            try:
                for login in logins:
                    await sign_in(sessions[login], port, login, origin(login, port) + "/")
                print(f"{len(logins)} students signed in; waiting for their environments to sleep")
                await wait_all(kube, logins, "Idle", 300)

                # 1. one at a time
                singles = logins[: args.wakes]
                latencies = []
                failures: list[str] = []
                for login in singles:
                    latencies.append(await follow(sessions[login], origin(login, port) + "/", failures))
                # The demo program runs inside the runner (no process to start): all of it is ours.
                result["wake_demo"] = {"p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
                                       "failed_requests": len(failures)}
                print(f"wake latency (demo): {result['wake_demo']}")

                # 2. the class arrives (the single ones are asleep again first)
                await wait_all(kube, logins, "Idle", 300)
                failures = []
                started = time.monotonic()

                async def arrive(n: int, login: str) -> float:
                    await asyncio.sleep(10.0 * n / len(logins))  # all within 10 s
                    return await follow(sessions[login], origin(login, port) + "/", failures)

                waits = await asyncio.gather(*(arrive(n, login) for n, login in enumerate(logins)))
                result["class_arrives"] = {
                    "all_answer_s": time.monotonic() - started, "wait_p50_s": percentile(list(waits), 50),
                    "wait_p99_s": percentile(list(waits), 99), "failed_requests": len(failures),
                    "failure_kinds": sorted(set(failures))}
                print(f"class arrives: {result['class_arrives']}")
            finally:
                for http in sessions.values():
                    await http.close()
            result["writes"] = await writes_per_hour(kube, logins[:20], state)
            print(f"writes: {result['writes']}")
            if args.jupyter_wakes:
                result["jupyterlab_wake"] = await jupyter_wakes(kube, port, args.jupyter_wakes)
                print(f"JupyterLab wake: {result['jupyterlab_wake']}")
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), 60)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--wakes", type=int, default=20)
    parser.add_argument("--jupyter-wakes", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    out = REPO / "bench" / "results" / "sleep.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
