"""Help in the lab, measured (run by hand: `python bench/help_bench.py`; part of `make bench`).

Three measures, each against real parts on this machine (a real control plane, Redis, `userland
gateway` and `userland web` processes, loopback):

1. throughput  wrk -t1 -c50 through one gateway process (1 worker) to a student's environment,
               rounds interleaved: the student herself (`owner`), a member of staff let in by a
               live grant (`staff`: the grant read with the origin session in the same Redis
               round trip, checked on every request, the staff identity signed), and the same
               student's requests through the gateway built from `--baseline` (default `main`,
               the code before help grants) as the baseline. Both gateways are built from git
               (HEAD and the baseline) and started the same way; each round starts with the next
               target, and ratios are taken round by round. Goal: with grant checks >= 0.95x of
               without.
2. end         "end access" to the last staff request let in, with two gateway replicas (two
               processes, each its own session cache and subscription): per trial a new grant,
               its staff member's origin session, a client per replica sending requests back to
               back and holding a WebSocket; then the grant is ended as the web UI ends it
               (GrantStore.end). Measured per trial: from the end to the start of the last
               request that got through on either replica, and to both WebSockets closed;
               p50/p99 over the trials. Goal: p99 < 5 s.
3. queue       a course of N students (default 300) who all ask for help within one minute
               (random times, through a gateway and `userland web`, each with their session and
               form token), while a member of staff watches the class dashboard's live stream:
               the POST's latency, the time from each ask to the help card on the stream that
               shows that student, the card's render time, and the web UI's CPU.
Prints a summary and writes bench/results/help.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from bench_processes import Proc, free_port, use_uvloop, wait_http  # bench/ is this script's folder
from echo_upstream import UpstreamServers
from gateway_bench import HOST, PUBLIC_URL, SECRET, cpu_us, make_world
from load_tools import wrk

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
USER = "benchuser"
STAFF = "benchta"
NS = "bench"
ORIGIN = f"http://{USER}.{HOST}"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 3), "p99": round(pct(values, 99), 3),
            "max": round(max(values), 3), "n": len(values)}


# -- processes ---------------------------------------------------------------------------------


def build_site(ref: str, state: Path, name: str) -> Path:
    """The package as it is at `ref`, installed into a folder of its own (no dependencies: the
    venv's are used). Both gateways compared run from such a folder the same way."""
    src, site = state / f"{name}-src", state / f"{name}-site"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(src)], check=True, capture_output=True)
    return site


def start_gateway(name: str, env: dict[str, str], kubeconfig: Path, state: Path,
                  site: Path | None = None) -> tuple[Proc, int, int]:
    """`userland gateway` (1 worker); `site`: run that build of the package (python -S, so the
    venv's editable install of this checkout is not on the path)."""
    port, internal = free_port(), free_port()
    log = state / f"{name}.log"
    args = ["-m", "userland.cli.main", "--log-level", "WARNING", "gateway", "--listen", f"127.0.0.1:{port}",
            "--kubeconfig", str(kubeconfig), "--workers", "1", "--grace", "1"]
    run_env = {**env, "USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{internal}"}
    if site is None:
        cmd = [sys.executable, *args]
    else:
        packages = next(p for p in sys.path if p.endswith("site-packages"))
        cmd = [sys.executable, "-S", *args]
        run_env["PYTHONPATH"] = f"{site}:{packages}"
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=run_env)
    return Proc(name, proc, log), port, internal


def start_web(kubeconfig: Path, env: dict[str, str], state: Path) -> tuple[Proc, int]:
    port = free_port()
    log = state / "web.log"
    proc = subprocess.Popen([sys.executable, "-m", "userland.cli.main", "--log-level", "WARNING", "web",
                             "--listen", f"127.0.0.1:{port}", "--kubeconfig", str(kubeconfig)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    return Proc("web", proc, log), port


# -- sessions and grants -----------------------------------------------------------------------


async def staff_origin_session(redis_url: str, staff: str, seconds: int = 3600) -> tuple[str, str]:
    """A live grant for `staff` on the bench student, and the staff member's origin session made
    through the handoff's code path; (cookie id, grant id)."""
    import redis.asyncio

    from userland.auth.origin_sessions import OriginSessions
    from userland.platform.clients.grant_store import GrantStore
    from userland.platform.clients.sessions import RedisSessionStore, Session

    client = redis.asyncio.from_url(redis_url)
    try:
        grant, _ = await GrantStore(client).create(course=NS, student=USER, staff=staff, role="assistant",
                                                   basis="request", seconds=seconds)
        platform = await RedisSessionStore(client, 8 * 3600).save(Session(
            login=staff, github_id=2, role="student", csrf="csrf", created=time.time()))
        origins = OriginSessions(client, 8 * 3600)
        code = await origins.issue_code(platform, ORIGIN, "/", grant=grant.id)
        redeemed = await origins.redeem(code, ORIGIN)
        assert redeemed is not None, "the staff handoff was refused"
        return redeemed[0], grant.id
    finally:
        await client.aclose()


def headers_for(cookie: str) -> dict[str, str]:
    return {"Host": f"{USER}.{HOST}", "Cookie": f"userland_origin={cookie}", "Origin": ORIGIN}


# -- 1. throughput -----------------------------------------------------------------------------


async def throughput(args: argparse.Namespace, state: Path, env: dict[str, str], kubeconfig: Path,
                     owner: str, staff: str, procs: list[Proc]) -> dict[str, Any]:
    # The code under test runs as the baseline does: built from git (HEAD: commit first) into a
    # folder of its own and started with `python -S`, so nothing but the code differs.
    site = build_site("HEAD", state, "current") if args.baseline else None
    gateway, port, internal = start_gateway("gw", env, kubeconfig, state, site)
    procs.append(gateway)
    targets: list[tuple[str, Proc, int, dict[str, str]]] = [("owner", gateway, port, headers_for(owner)),
                                                              ("staff", gateway, port, headers_for(staff))]
    if args.baseline:
        base, base_port, base_internal = start_gateway("gw-baseline", env, kubeconfig, state,
                                                       build_site(args.baseline, state, "baseline"))
        procs.append(base)
        await wait_http(f"http://127.0.0.1:{base_internal}/healthz", proc=base)
        targets.insert(0, ("baseline", base, base_port, headers_for(owner)))
    await wait_http(f"http://127.0.0.1:{internal}/healthz", proc=gateway)
    async with aiohttp.ClientSession() as http:
        for name, _proc, target_port, headers in targets:
            async with http.get(f"http://127.0.0.1:{target_port}/whoami", headers=headers) as resp:
                want = STAFF if name == "staff" else USER
                assert (resp.status, await resp.text()) == (200, want), (name, resp.status)
    if args.hold:  # for profiling by hand (py-spy): everything up, then wait
        print(json.dumps({name: {"port": target_port, "pid": proc.proc.pid, "headers": headers}
                          for name, proc, target_port, headers in targets}), flush=True)
        await asyncio.sleep(args.hold)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in targets}
    for _name, _proc, target_port, headers in targets:  # warm-up
        wrk(target_port, 2, args.connections, [f"{k}: {v}" for k, v in headers.items()])
    for round_ in range(args.rounds):
        # Each round starts with the next target: the order within a round does not favour one.
        shift = round_ % len(targets)
        for name, proc, target_port, headers in targets[shift:] + targets[:shift]:
            before = proc.cpu_seconds()
            result, out = wrk(target_port, args.seconds, args.connections,
                              [f"{k}: {v}" for k, v in headers.items()])
            result["cpu_s"], result["seconds"] = proc.cpu_seconds() - before, args.seconds
            if result["non_2xx"] or result["socket_errors"]:
                print(out, flush=True)
            runs[name].append(result)
            print(f"round {round_ + 1} {name:9} {result['rps']:8.0f} req/s  p99 {result['p99_ms']:6.1f} ms  "
                  f"cpu {cpu_us(result):5.0f} us/req", flush=True)
    out: dict[str, Any] = {}
    for name, results in runs.items():
        out[name] = {"rps_median": round(statistics.median(r["rps"] for r in results), 1),
                     "rps_runs": [round(r["rps"], 1) for r in results],
                     "cpu_us_per_request": [round(cpu_us(r), 1) for r in results],
                     "non_2xx": sum(int(r["non_2xx"]) for r in results)}
    ratios: dict[str, Any] = {}
    owner_runs = runs["owner"]
    ratios["staff_vs_owner_rps_by_round"] = [round(s["rps"] / o["rps"], 3)
                                             for s, o in zip(runs["staff"], owner_runs, strict=True)]
    ratios["staff_vs_owner_cpu_by_round"] = [round(cpu_us(s) / cpu_us(o), 3)
                                             for s, o in zip(runs["staff"], owner_runs, strict=True)]
    if "baseline" in runs:
        pairs = list(zip(owner_runs, runs["baseline"], strict=True))
        ratios["owner_vs_baseline_rps_by_round"] = [round(o["rps"] / b["rps"], 3) for o, b in pairs]
        ratios["owner_vs_baseline_cpu_by_round"] = [round(cpu_us(o) / cpu_us(b), 3) for o, b in pairs]
    for key in list(ratios):
        ratios[key.replace("_by_round", "_median")] = round(statistics.median(ratios[key]), 3)
    out["ratios"] = ratios
    gateway.stop()
    return out


# -- 2. end access -> last staff request let in, two replicas ----------------------------------


async def hammer(http: aiohttp.ClientSession, port: int, headers: dict[str, str], stop: asyncio.Event,
                 admitted: list[float]) -> None:
    """Requests back to back; the start time of each one let in (200)."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            async with http.get(f"http://127.0.0.1:{port}/", headers=headers) as resp:
                await resp.read()
                if resp.status == 200:
                    admitted.append(started)
        except aiohttp.ClientError:
            await asyncio.sleep(0.001)


async def end_trials(args: argparse.Namespace, state: Path, env: dict[str, str], kubeconfig: Path,
                     redis_url: str, procs: list[Proc]) -> dict[str, Any]:
    import redis.asyncio

    from userland.platform.clients.grant_store import GrantStore

    replicas = []
    for index in range(2):
        proc, port, internal = start_gateway(f"replica{index + 1}", env, kubeconfig, state)
        procs.append(proc)
        replicas.append((proc, port, internal))
    for proc, _port, internal in replicas:
        await wait_http(f"http://127.0.0.1:{internal}/healthz", proc=proc)
    client = redis.asyncio.from_url(redis_url)
    store = GrantStore(client)
    last_request: list[float] = []
    sockets_closed: list[float] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            for trial in range(args.end_trials):
                cookie, grant_id = await staff_origin_session(redis_url, f"ta{trial}")
                headers = headers_for(cookie)
                for _proc, port, _internal in replicas:  # both replicas let this staff member in
                    await wait_http(f"http://127.0.0.1:{port}/", headers=headers, timeout=30)
                sockets = [await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers=headers)
                           for _proc, port, _internal in replicas]
                stop = asyncio.Event()
                admitted: list[list[float]] = [[] for _ in replicas]
                clients = [asyncio.create_task(hammer(http, port, headers, stop, admitted[i]))
                           for i, (_proc, port, _internal) in enumerate(replicas)]
                await asyncio.sleep(0.5)  # in full swing on both replicas
                ended = time.monotonic()
                assert await store.end(grant_id, by=USER, reason="student") is not None

                async def closed(ws: aiohttp.ClientWebSocketResponse) -> float:
                    await ws.receive(timeout=30)
                    return time.monotonic()
                closes = await asyncio.gather(*(closed(ws) for ws in sockets))
                await asyncio.sleep(args.end_watch)  # anything still let in would show here
                stop.set()
                await asyncio.gather(*clients)
                last = max((t for times in admitted for t in times if t >= ended), default=ended)
                last_request.append(last - ended)
                sockets_closed.append(max(closes) - ended)
                print(f"trial {trial + 1:3}: last staff request let in {1000 * (last - ended):7.1f} ms after "
                      f"the end; both WebSockets closed {1000 * (max(closes) - ended):7.1f} ms after",
                      flush=True)
                for ws in sockets:
                    await ws.close()
    finally:
        await client.aclose()
        for proc, _port, _internal in replicas:
            proc.stop()
    return {"trials": args.end_trials, "last_request_let_in_s": summary(last_request),
            "websockets_closed_s": summary(sockets_closed), "watched_after_s": args.end_watch}


# -- 3. N students asking within a minute ------------------------------------------------------


async def make_course(kubeconfig: Path, students: int) -> None:
    from userland.platform.clients.kube import NAMESPACES, USERLANDS, KubeClient
    from userland.platform.model import naming
    from userland.platform.model.bodies import userland_body

    async with await KubeClient.connect(str(kubeconfig), pool_size=32) as kube:
        await kube.merge_patch(NAMESPACES, None, NS, {"metadata": {
            "labels": {naming.LABEL_COURSE: "true"},
            "annotations": {naming.ANNOTATION_INSTRUCTORS: "teacher", naming.ANNOTATION_ASSISTANTS: STAFF}}})
        sem = asyncio.Semaphore(16)

        async def one(index: int) -> None:
            async with sem:
                await kube.create(USERLANDS, NS, userland_body("vscode", f"s{index:03d}"))
        await asyncio.gather(*(one(i) for i in range(students)))


async def sign_in(redis_url: str, logins: list[str]) -> dict[str, tuple[str, str]]:
    """login -> (platform cookie, the web UI's form token for that session)."""
    import redis.asyncio

    from userland.platform.clients.sessions import RedisSessionStore, Session
    from userland.platform.model import identity
    from userland.web.rules import security

    client = redis.asyncio.from_url(redis_url)
    try:
        store = RedisSessionStore(client, 8 * 3600)
        out = {}
        for login in logins:
            cookie = await store.save(Session(login=login, github_id=3, role="student", csrf="c",
                                              created=time.time()))
            digest = hashlib.sha256(cookie.encode()).hexdigest()
            out[login] = (cookie, security.csrf_token(SECRET, login, identity.session_id(digest, SECRET)))
        return out
    finally:
        await client.aclose()


async def queue_load(args: argparse.Namespace, state: Path, env: dict[str, str], kubeconfig: Path,
                     redis_url: str, procs: list[Proc]) -> dict[str, Any]:
    await make_course(kubeconfig, args.students)
    web, web_port = start_web(kubeconfig, env, state)
    procs.append(web)
    gateway, port, internal = start_gateway("gw-queue", {**env, "USERLAND_WEB_URL": f"http://127.0.0.1:{web_port}"},
                                            kubeconfig, state)
    procs.append(gateway)
    await wait_http(f"http://127.0.0.1:{web_port}/healthz", proc=web, timeout=120)
    await wait_http(f"http://127.0.0.1:{internal}/healthz", proc=gateway)
    students = [f"s{i:03d}" for i in range(args.students)]
    people = await sign_in(redis_url, [*students, STAFF])
    platform_host = PUBLIC_URL.split("//", 1)[1]

    def cookie_headers(login: str) -> dict[str, str]:
        return {"Host": platform_host, "Cookie": f"userland_session={people[login][0]}", "Origin": PUBLIC_URL}

    shown: dict[str, float] = {}
    asked_at: dict[str, float] = {}
    post_ms: list[float] = []
    cards = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        dashboard = f"http://127.0.0.1:{port}/courses/{NS}"
        await wait_http(dashboard, headers=cookie_headers(STAFF), timeout=60)
        render: list[float] = []

        async def watch() -> None:
            nonlocal cards
            async with http.get(f"{dashboard}/stream", headers=cookie_headers(STAFF),
                                timeout=aiohttp.ClientTimeout(total=None, sock_read=120)) as stream:
                event = ""
                async for raw in stream.content:
                    line = raw.decode()
                    if line.startswith("event: "):
                        event = line[7:].strip()
                    elif line.startswith("data: ") and event == "help":
                        cards += 1
                        now = time.monotonic()
                        html = json.loads(line[6:])["html"]
                        for login in students:
                            if login not in shown and f'data-student="{login}"' in html:
                                shown[login] = now
                        if len(shown) == len(students):
                            return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(1)
        cpu_before = web.cpu_seconds()
        rng = random.Random(20)
        schedule = sorted((rng.uniform(0, args.ask_seconds), login) for login in students)
        start = time.monotonic()

        async def ask(at: float, login: str) -> None:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            began = time.monotonic()
            form = {"csrf": people[login][1], "course": NS, "message": f"{login} is stuck"}
            async with http.post(f"http://127.0.0.1:{port}/me/help", headers=cookie_headers(login), data=form,
                                 allow_redirects=False) as resp:
                await resp.read()
                assert resp.status == 303, resp.status
            asked_at[login] = began
            post_ms.append(1000 * (time.monotonic() - began))
        await asyncio.gather(*(ask(at, login) for at, login in schedule))
        await asyncio.wait_for(watcher, 120)
        cpu = web.cpu_seconds() - cpu_before
        for _ in range(args.renders):
            began = time.monotonic()
            async with http.get(dashboard, headers=cookie_headers(STAFF)) as resp:
                body = await resp.text()
                assert resp.status == 200 and all(f'data-student="{s}"' in body for s in students)
            render.append(1000 * (time.monotonic() - began))
    shown_ms = [1000 * (shown[login] - asked_at[login]) for login in students]
    return {"students": args.students, "within_s": args.ask_seconds, "ask_post_ms": summary(post_ms),
            "ask_to_card_on_stream_ms": summary(shown_ms), "help_events_sent": cards,
            "dashboard_with_full_queue_ms": summary(render), "web_cpu_s": round(cpu, 2)}


# -- the run -----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from userland.local.controlplane import ControlPlane, crd_files
    from userland.local.redisserver import redis_server

    state = Path(tempfile.mkdtemp(prefix="userland-helpbench-"))
    upstream = UpstreamServers(2)
    plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
    procs: list[Proc] = []
    results: dict[str, Any] = {}
    try:
        with redis_server(state) as redis_url:
            owner = await make_world(plane.kubeconfig, NS, upstream.url, redis_url)
            staff, _grant = await staff_origin_session(redis_url, STAFF, seconds=8 * 3600)
            env = {**os.environ, "USERLAND_IDENTITY_SECRET": SECRET, "USERLAND_PUBLIC_URL": PUBLIC_URL,
                   "USERLAND_REDIS_URL": redis_url, "USERLAND_NAMESPACES": NS,
                   "USERLAND_UPSTREAM_MODE": "local", "USERLAND_COOKIE_SECURE": "false",
                   "USERLAND_MAX_CONNECTIONS_PER_CLIENT": "5000", "USERLAND_MAX_WEBSOCKETS_PER_USER": "1000"}
            await wait_http(f"{upstream.url}/", timeout=15)
            if "throughput" in args.parts:
                results["throughput"] = await throughput(args, state, env, plane.kubeconfig, owner, staff,
                                                         procs)
            if "end" in args.parts:
                results["end"] = await end_trials(args, state, env, plane.kubeconfig, redis_url, procs)
            if "queue" in args.parts:
                results["queue"] = await queue_load(args, state, env, plane.kubeconfig, redis_url, procs)
    finally:
        for proc in procs:
            proc.stop()
        plane.stop()
        upstream.stop()
        if args.keep_state:
            print(f"state and logs kept in {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="throughput,end,queue")
    parser.add_argument("--seconds", type=float, default=6, help="wrk duration per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--baseline", default="main", help="git ref of the gateway without grants ('' skips)")
    parser.add_argument("--end-trials", type=int, default=40)
    parser.add_argument("--end-watch", type=float, default=1.0,
                        help="seconds watched after both sockets closed")
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--ask-seconds", type=float, default=60)
    parser.add_argument("--renders", type=int, default=20)
    parser.add_argument("--keep-state", action="store_true")
    parser.add_argument("--hold", type=float, default=0,
                        help="throughput: set up, print ports, pids and headers, wait this long (profiling)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "help.json")
    args = parser.parse_args()
    args.parts = set(args.parts.split(","))
    if shutil.which("wrk") is None:
        subprocess.run(["bash", str(HERE / "setup.sh")], check=True)
    use_uvloop()
    # Stopped with SIGTERM (a --hold run, say): leave through the cleanups, which stop the
    # gateways, the web UI, Redis and the control plane it started (else they outlive it).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.time()
    results = asyncio.run(run(args))
    results["setup"] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "cores": os.cpu_count(),
                        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
                        "load_before": os.getloadavg()}
    print(json.dumps(results, indent=2))
    if args.parts == {"throughput", "end", "queue"}:
        args.output.parent.mkdir(exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n")
        print(f"written: {args.output}")


if __name__ == "__main__":
    main()
