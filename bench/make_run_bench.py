"""`make run` with the real apps, measured (run by hand after `make local-apps`):
`.venv/bin/python bench/make_run_bench.py [--students 20]`.

1. Start-up: `userland local` with everything cached (control plane binaries, apps) and a
   fresh state dir, from the command to its "Ready." line, and to the first page a signed-in
   student gets from their environment (the demo, through the gateway at alice's origin).
2. Adding a student: one after another, N students are added (a Userland for JupyterLab and one
   for VS Code, as the web UI or kubectl adds them); for each, the time from the create to the
   app answering through the gateway at the student's own origin with the student's session
   (JupyterLab's /api/status, code-server's /healthz: what their readiness probes ask), as
   p50/p99. Measured one student at a time: the latency a teacher sees, not a burst.
3. Memory per student of each real app under the runner: the RSS (and PSS) of every process of
   each of the student's Pods, summed, after the apps answered and sat idle for a moment.

Prints a table and writes bench/results/make_run.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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

from tests.local.test_make_run import browser, read_until_ready  # noqa: E402
from userland.local.controlplane import free_port  # noqa: E402
from userland.platform.clients.kube import USERLANDS, KubeClient  # noqa: E402
from userland.platform.model import naming  # noqa: E402

HTML = {"Accept": "text/html"}
APPS = {"jupyterlab": "/api/status", "vscode": "/healthz"}


async def sign_in(http: aiohttp.ClientSession, port: int, template: str, login: str) -> None:
    """The development login, reached the way a browser reaches it from a Template's address."""
    async with http.get(f"http://{template}.localhost:{port}/", headers=HTML) as form_page:
        form = await form_page.text()
    state = re.search(r'name="state" value="([^"]+)"', form)
    assert state, form[:500]
    async with http.post(f"http://localhost:{port}/auth/dev-login", headers=HTML,
                         data={"state": state.group(1), "login": login}) as done:
        await done.read()


async def status_of(http: aiohttp.ClientSession, url: str) -> int:
    """The status `url` answers with, redirects not followed; 0 when it does not answer."""
    try:
        async with http.get(url, allow_redirects=False, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def answers(http: aiohttp.ClientSession, url: str) -> bool:
    return await status_of(http, url) == 200


async def until(check: Any) -> None:
    """Poll: what is awaited is another process answering over HTTP, not an event of ours."""
    while not await check():  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def pod_memory(volume_root: Path) -> dict[str, dict[str, float]]:
    """MiB of RSS and PSS per Pod folder (its volume), from every process whose working folder
    or HOME lies in it: the runner starts each container there."""
    found: dict[str, dict[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            rollup = Path(f"/proc/{entry}/smaps_rollup").read_text()
        except OSError:
            continue
        if not cwd.startswith(str(volume_root)):
            continue
        pod = Path(cwd).relative_to(volume_root).parts[0]
        fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup.splitlines()[1:] if ":" in line}
        totals = found.setdefault(pod, {"rss": 0.0, "pss": 0.0})
        totals["rss"] += fields.get("Rss", 0) / 1024
        totals["pss"] += fields.get("Pss", 0) / 1024
    return found


async def run(students: int) -> dict[str, Any]:
    port = free_port()
    state = Path(tempfile.mkdtemp(prefix="userland-bench-run-"))
    os.chmod(state, 0o755)
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state / "s"), "--students", "alice",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    lines: list[str] = []
    result: dict[str, Any] = {}
    try:
        await asyncio.wait_for(read_until_ready(process, lines), 180)
        result["ready_s"] = time.monotonic() - started
        async with browser() as http:
            await sign_in(http, port, "demo", "alice")
            await until(lambda: answers(http, f"http://alice.demo.localhost:{port}/"))
        result["first_page_s"] = time.monotonic() - started
        print(f"start-up: Ready. after {result['ready_s']:.1f} s, "
              f"first page after {result['first_page_s']:.1f} s")

        latencies: dict[str, list[float]] = {app: [] for app in APPS}
        async with await KubeClient.connect(str(state / "s" / "kubeconfig")) as kube:
            for n in range(students):
                login = f"student{n:02d}"
                async with browser() as http:
                    await sign_in(http, port, "demo", login)  # a session (no environment yet)
                    for app, path in APPS.items():
                        begun = time.monotonic()
                        await kube.create(USERLANDS, "classroom", {
                            "apiVersion": naming.API_VERSION, "kind": "Userland",
                            "metadata": {"name": f"{app}-{login}"}, "spec": {"user": login, "template": app}})
                        url = f"http://{login}.{app}.localhost:{port}{path}"
                        # The first visit to a new origin goes through the handoff (401 to a
                        # request that is not a page's, while the origin has no cookie; a session
                        # is given 30 handoff codes a minute); then it answers.
                        while (status := await status_of(http, url)) != 200:
                            if status == 401:
                                async with http.get(f"http://{app}.localhost:{port}/", headers=HTML) as r:
                                    await r.read()
                            await asyncio.sleep(0.05)
                        latencies[app].append(time.monotonic() - begun)
                print(f"  {login}: " + ", ".join(f"{a} {v[-1]:.2f} s" for a, v in latencies.items()))
        result["add_to_answering_s"] = {app: {"p50": statistics.median(v), "p99": percentile(v, 99),
                                              "max": max(v), "n": len(v)} for app, v in latencies.items()}
        await asyncio.sleep(5)
        memory = pod_memory(state / "s" / "environments" / "volumes" / "classroom")
        per_app: dict[str, dict[str, float]] = {}
        for app in ("vscode", "jupyterlab", "mariadb"):
            pods = [m for name, m in memory.items() if name.startswith(f"{app}-")]
            if pods:
                per_app[app] = {"pods": len(pods), "rss_mib": statistics.median(p["rss"] for p in pods),
                                "pss_mib": statistics.median(p["pss"] for p in pods)}
        result["memory_per_student_idle"] = per_app
        result["load_avg"] = os.getloadavg()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), 90)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(run(args.students))
    print(json.dumps(result, indent=2))
    out = REPO / "bench" / "results" / "make_run.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
