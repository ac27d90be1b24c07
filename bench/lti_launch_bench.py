"""LTI launch benchmark (run by hand; figures go in docs/benchmarks.md):

  .venv/bin/python bench/lti_launch_bench.py [--warm 20] [--asleep 5]

One `userland local` (real control plane, operator, web UI, gateway, Redis, the local runner)
with its example LMS (local/example_lms.py: lti1p3platform on loopback) and GitHub sign-in
against the tests' fake GitHub (tests/fakes/github.py, an HTTP server in this process), so both
doors are measured in the same run, on the same machine, alternating:

  lti     a click on the LMS course's link: the platform's login initiation, the gateway's
          /lti/login, the platform's authorization endpoint, its form posted to /lti/launch,
          /lti/continue, until the student's own environment answers;
  github  opening the environment's address signed out: the handoff, /auth/login, GitHub's
          authorization (the user is signed in to GitHub and has approved the app), the
          callback, the handoff back, until the environment answers.

Each sample is a fresh browser (no cookies): a student arriving. Warm: the environment runs.
Asleep: it has gone to sleep (the demo Template's idle timeout, IDLE), and the time runs until
the environment itself answers (the waking page followed). Reported: p50/p99 per door and the
LTI/GitHub ratios, in all and for Userland's part (the time the browser waited on the LMS or on
GitHub taken out: a real LMS's signing is not ours). Results: bench/results/lti_launch.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.make_run_bench import percentile  # noqa: E402
from tests.fakes.github import FakeGitHub  # noqa: E402
from tests.support.make_run import HTML, lms_browser, lms_launch, read_until_ready  # noqa: E402
from userland.local.controlplane import free_port  # noqa: E402
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient  # noqa: E402

NS = "classroom"
IDLE = "15s"
LTI_STUDENT, GITHUB_STUDENT = "alice", "bob"  # make run's students: alice in the LMS, bob on GitHub
WAKING = ("Waking up", "Starting your")


def env_url(login: str, port: int) -> str:
    return f"http://{login}.demo.localhost:{port}/"


async def answered(http: aiohttp.ClientSession, response: aiohttp.ClientResponse, login: str,
                   port: int) -> None:
    """Wait for `login`'s environment to answer, from where a door left the browser: the waking
    page (followed as its refresh does, faster at first) or the environment itself."""
    started = time.monotonic()
    async with response:
        body = await response.text()
        status, host = response.status, response.url.host
    while True:
        if status == 200 and host == f"{login}.demo.localhost" and not any(w in body for w in WAKING):
            if f'<code id="owner">{login}</code>' not in body:
                raise SystemExit(f"{login} landed somewhere else: {host} {body[:300]}")
            return
        if status >= 400 and status not in (502, 503):
            raise SystemExit(f"{login}: HTTP {status} at {host}: {body[:300]}")
        await asyncio.sleep(0.1 if time.monotonic() - started < 1 else 0.5)
        async with http.get(env_url(login, port), headers=HTML) as again:
            body, status, host = await again.text(), again.status, again.url.host


class Outside:
    """Time the browser spent waiting on one outside site (the LMS, GitHub): a real LMS's own
    time is not Userland's, and this one (lti1p3platform loads its RSA key from PEM for every
    id_token it signs) is slow on a loaded machine."""

    def __init__(self, origin: str) -> None:
        self.origin = origin.rstrip("/")
        self.seconds = 0.0
        self.trace = aiohttp.TraceConfig()
        self.trace.on_request_start.append(self._start)
        self.trace.on_request_redirect.append(self._hop)
        self.trace.on_request_end.append(self._hop)

    async def _start(self, _: Any, ctx: Any, __: Any) -> None:
        ctx.since = time.perf_counter()

    async def _hop(self, _: Any, ctx: Any, params: Any) -> None:
        now = time.perf_counter()
        if str(params.url.origin()) == self.origin:
            self.seconds += now - ctx.since
        ctx.since = now


Sample = tuple[float, float]  # (seconds in all, seconds of them waiting on the outside site)


async def by_lti(port: int, lms: str) -> Sample:
    outside = Outside(lms)
    started = time.perf_counter()
    async with lms_browser(port, outside.trace) as http:
        await answered(http, await lms_launch(http, port, lms, "student"), LTI_STUDENT, port)
    return time.perf_counter() - started, outside.seconds


async def by_github(port: int, github: FakeGitHub) -> Sample:
    github.sign_in(GITHUB_STUDENT)
    outside = Outside(github.url)
    started = time.perf_counter()
    async with lms_browser(port, outside.trace) as http:
        opened = await http.get(env_url(GITHUB_STUDENT, port), headers=HTML)
        await answered(http, opened, GITHUB_STUDENT, port)
    return time.perf_counter() - started, outside.seconds


async def phase_of(kube: KubeClient, login: str) -> str:
    obj = await kube.get(USERLANDS, NS, f"demo-{login}")
    return str((obj.get("status") or {}).get("phase") or "")


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"not {what} within {timeout} s")
        await asyncio.sleep(1)


def figures(samples: list[Sample]) -> dict[str, Any]:
    total = [t for t, _ in samples]
    ours = [t - outside for t, outside in samples]  # Userland's part: the outside site's time taken out
    return {"n": len(samples),
            "p50_s": round(percentile(total, 50), 4), "p99_s": round(percentile(total, 99), 4),
            "ours_p50_s": round(percentile(ours, 50), 4), "ours_p99_s": round(percentile(ours, 99), 4),
            "outside_p50_s": round(percentile([o for _, o in samples], 50), 4)}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    github = FakeGitHub()
    github.add_user(GITHUB_STUDENT, 4242)
    await github.start()
    port = free_port()
    state = Path(tempfile.mkdtemp(prefix="userland-bench-lti-"))
    os.chmod(state, 0o755)
    env = {**os.environ, "USERLAND_LOGIN_RATE_PER_MINUTE": "100000",
           "USERLAND_GITHUB_CLIENT_ID": github.client_id,
           "USERLAND_GITHUB_CLIENT_SECRET": github.client_secret,
           "USERLAND_GITHUB_URL": github.url, "USERLAND_GITHUB_API_URL": github.api_url}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port), "--state-dir",
        str(state / "s"), "--students", f"{LTI_STUDENT},{GITHUB_STUDENT}", "--idle", IDLE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=env)
    lines: list[str] = []
    result: dict[str, Any] = {"idle_timeout": IDLE, "machine_load_1m": os.getloadavg()[0]}
    try:
        await asyncio.wait_for(read_until_ready(process, lines), 240)
        lms = next(line.split()[1].rstrip("/") for line in lines if line.strip().startswith("LMS "))
        doors: dict[str, Callable[[], Awaitable[Sample]]] = {
            "lti": lambda: by_lti(port, lms), "github": lambda: by_github(port, github)}
        async with await KubeClient.connect(str(state / "s" / "kubeconfig")) as kube:
            assert (await kube.get(TEMPLATES, NS, "demo"))["spec"].get("idleTimeout") == IDLE
            for door in doors.values():  # first sign-ins (bindings made), not measured
                await door()
            warm: dict[str, list[Sample]] = {"lti": [], "github": []}
            for n in range(args.warm):
                for name in (("lti", "github") if n % 2 == 0 else ("github", "lti")):
                    warm[name].append(await doors[name]())
            asleep: dict[str, list[Sample]] = {"lti": [], "github": []}
            for n in range(args.asleep):
                async def both_asleep() -> bool:
                    return {await phase_of(kube, s) for s in (LTI_STUDENT, GITHUB_STUDENT)} == {"Idle"}
                await until("asleep", both_asleep)
                for name in (("lti", "github") if n % 2 == 0 else ("github", "lti")):
                    asleep[name].append(await doors[name]())
                print(f"asleep round {n + 1}: lti {asleep['lti'][-1][0]:.2f} s, "
                      f"github {asleep['github'][-1][0]:.2f} s", flush=True)
        for label, samples in (("warm", warm), ("asleep", asleep)):
            result[label] = {name: figures(values) for name, values in samples.items()}
            result[label]["ratio_lti_to_github"] = {
                p: round(result[label]["lti"][f"{p}_s"] / result[label]["github"][f"{p}_s"], 2)
                for p in ("p50", "p99", "ours_p50", "ours_p99")}
            print(f"{label}: {json.dumps(result[label])}", flush=True)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), 90)
        await github.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=int, default=20, help="samples per door, environment running")
    parser.add_argument("--asleep", type=int, default=5, help="samples per door, environment asleep")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "lti_launch.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    result["command"] = "python bench/lti_launch_bench.py " + " ".join(sys.argv[1:])
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
