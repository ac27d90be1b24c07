"""The `series` run of bench/metrics_bench.py: how many series each component exports for a class
of S students in C courses with T Templates each, on a control plane and Redis of its own
(the real operator, gateway and web UI): the count must follow courses and Templates, never
students."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_processes import wait_http  # noqa: E402
from bench.gateway_bench import PUBLIC_URL, SECRET  # noqa: E402


def series_of(text: str) -> dict[str, int]:
    """Series per metric family name in a /metrics page (what Prometheus stores)."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            for suffix in ("_bucket", "_sum", "_count", "_total"):
                if name.endswith(suffix):
                    name = name[: -len(suffix)]
                    break
            counts[name] = counts.get(name, 0) + 1
    return counts


# -- throughput ---------------------------------------------------------------------------------


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "userland"), "--log-level", "warning", *args],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


async def _bounded(jobs: list[Any], concurrency: int = 32) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Any) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def one_class(
    plane: Any, redis_url: str, state: Path, students: int, courses: int, templates: int
) -> dict[str, Any]:
    """One class on fresh namespaces: the series each real component exports."""
    import redis.asyncio

    from userland.auth.origin_sessions import OriginSessions
    from userland.local import examples
    from userland.platform.clients.kube import NAMESPACES, PODS, TEMPLATES, USERLANDS, KubeClient
    from userland.platform.clients.sessions import RedisSessionStore, Session
    from userland.platform.model import identity, naming

    tag = f"s{students}c{courses}t{templates}"
    namespaces = [f"{tag}-course{c}" for c in range(courses)]
    names = [f"tpl{t}" for t in range(templates)]
    procs: list[subprocess.Popen[bytes]] = []
    async with await KubeClient.connect(str(plane.kubeconfig)) as kube:
        demo = examples.demo_template()["spec"]
        for ns in namespaces:
            await kube.create(
                NAMESPACES,
                None,
                {
                    "metadata": {
                        "name": ns,
                        "labels": {naming.LABEL_COURSE: "true"},
                        "annotations": {naming.ANNOTATION_INSTRUCTORS: "teacher"},
                    }
                },
            )
            for t in names:
                await kube.create(
                    TEMPLATES,
                    ns,
                    {
                        "apiVersion": naming.API_VERSION,
                        "kind": "Template",
                        "metadata": {"name": t},
                        "spec": {**demo, "routing": {"host": f"{t}.{ns}.bench.test"}},
                    },
                )
        pairs = [
            (namespaces[i % courses], names[(i // courses) % templates], f"student{i}")
            for i in range(students)
        ]
        await _bounded(
            [
                lambda p=p: kube.create(
                    USERLANDS,
                    p[0],
                    {
                        "apiVersion": naming.API_VERSION,
                        "kind": "Userland",
                        "metadata": {"name": f"{p[1]}-{p[2]}"},
                        "spec": {"user": p[2], "template": p[1]},
                    },
                )
                for p in pairs
            ]
        )
        ports = {
            "operator": free(),
            "gateway": free(),
            "gateway_internal": free(),
            "web": free(),
            "web_internal": free(),
        }
        env = {
            **os.environ,
            "USERLAND_NAMESPACES": ",".join(namespaces),
            "USERLAND_PUBLIC_URL": PUBLIC_URL,
            "USERLAND_IDENTITY_SECRET": SECRET,
            "USERLAND_REDIS_URL": redis_url,
            "USERLAND_COOKIE_SECURE": "false",
            "USERLAND_UPSTREAM_MODE": "local",
            "USERLAND_LEASE_NAMESPACE": namespaces[0],
            "USERLAND_MAX_CONNECTIONS_PER_CLIENT": "0",
            "USERLAND_WEB_URL": f"http://127.0.0.1:{ports['web']}",
        }
        kubeconfig = str(plane.kubeconfig)
        try:
            procs.append(
                _spawn(
                    [
                        "operator",
                        "--kubeconfig",
                        kubeconfig,
                        "--no-leader-election",
                        "--listen",
                        f"127.0.0.1:{ports['operator']}",
                    ],
                    env,
                    state / f"{tag}-operator.log",
                )
            )
            procs.append(
                _spawn(
                    ["web", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{ports['web']}"],
                    {**env, "USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{ports['web_internal']}"},
                    state / f"{tag}-web.log",
                )
            )
            procs.append(
                _spawn(
                    ["gateway", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{ports['gateway']}"],
                    {**env, "USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{ports['gateway_internal']}"},
                    state / f"{tag}-gateway.log",
                )
            )
            # Every Pod made Ready, as a kubelet would; every tenth one's image cannot be pulled.
            selector = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
            started = time.monotonic()
            patched: set[tuple[str, str]] = set()
            while len(patched) < students and time.monotonic() - started < 600:
                jobs = []
                for ns in namespaces:
                    for pod in (await kube.list(PODS, ns, label_selector=selector))["items"]:
                        key = (ns, pod["metadata"]["name"])
                        if key in patched:
                            continue
                        patched.add(key)
                        failing = (
                            int(pod["metadata"]["labels"][naming.LABEL_USER].removeprefix("student")) % 10
                            == 0
                        )
                        jobs.append(
                            lambda ns=ns, pod=pod, failing=failing: kube.merge_patch(
                                PODS,
                                ns,
                                pod["metadata"]["name"],
                                {"status": _pod_status(failing)},
                                subresource="status",
                            )
                        )
                await _bounded(jobs)
                await asyncio.sleep(1)
            await _until_counted(kube, namespaces, students)
            # Every student asks for their environment at the gateway (a per-course figure, the
            # starting page: no upstream address here), with a real origin session each.
            client = redis.asyncio.from_url(redis_url)
            store, origins = RedisSessionStore(client, 3600), OriginSessions(client, 3600)
            async with aiohttp.ClientSession() as http:
                await wait_http(f"http://127.0.0.1:{ports['gateway_internal']}/healthz", timeout=120)
                await wait_http(f"http://127.0.0.1:{ports['web_internal']}/healthz", timeout=120)

                async def visit(ns: str, template: str, login: str) -> None:
                    cookie = await store.save(
                        Session(login=login, github_id=1, role="student", csrf="c", created=time.time())
                    )
                    host = f"{login}.{template}.{ns}.bench.test"
                    code = await origins.issue_code(cookie, f"http://{host}", "/")
                    redeemed = await origins.redeem(code, f"http://{host}")
                    assert redeemed is not None
                    async with http.get(
                        f"http://127.0.0.1:{ports['gateway']}/",
                        headers={
                            "Host": host,
                            "Cookie": f"userland_origin={redeemed[0]}",
                            "Accept": "text/html",
                        },
                    ) as r:
                        await r.read()

                await _bounded([lambda p=p: visit(*p) for p in pairs], 16)
                teacher = dict(
                    identity.identity_headers(
                        identity.for_audience("teacher", "web", role="instructor", session="bench"), SECRET
                    )
                )
                for ns in namespaces:
                    async with http.get(
                        f"http://127.0.0.1:{ports['web']}/courses/{ns}", headers=teacher
                    ) as r:
                        await r.read()
                pages = {}
                for name, port in (
                    ("operator", ports["operator"]),
                    ("gateway", ports["gateway_internal"]),
                    ("web", ports["web_internal"]),
                ):
                    async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                        pages[name] = series_of(await r.text())
            await client.aclose()
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
        totals = {name: sum(counts.values()) for name, counts in pages.items()}
        return {
            "students": students,
            "courses": courses,
            "templates": templates,
            "series": totals,
            "total": sum(totals.values()),
            # Every family's series, largest first: what grows with what.
            "families": {
                name: dict(sorted(counts.items(), key=lambda kv: -kv[1])) for name, counts in pages.items()
            },
        }


def free() -> int:
    from userland.local.controlplane import free_port

    return free_port()


def _pod_status(failing: bool) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if failing:
        waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
        return {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "ide",
                    "image": "x",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": waiting},
                }
            ],
        }
    return {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
        ],
    }


async def _until_counted(kube: Any, namespaces: list[str], students: int) -> None:
    """Until every Userland's status is Ready or Failed (the operator has seen its Pod)."""
    from userland.platform.clients.kube import USERLANDS

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        done = 0
        for ns in namespaces:
            done += sum(
                1
                for u in (await kube.list(USERLANDS, ns))["items"]
                if (u.get("status") or {}).get("phase") in ("Ready", "Failed")
            )
        if done >= students:
            return
        await asyncio.sleep(1)
    raise TimeoutError("the operator did not report every environment")


async def series(args: argparse.Namespace) -> dict[str, Any]:
    """Each class on a control plane and Redis of its own: nothing of one (its courses, whose
    namespaces the web UI would watch; its Pods' load on the API server) reaches the next."""
    from userland.local.controlplane import ControlPlane, crd_files
    from userland.local.redisserver import redis_server

    results = []
    shapes = [(s, args.courses, args.templates) for s in args.students]
    shapes.append((max(args.students), args.courses * 2, args.templates))
    for students, courses, templates in shapes:
        state = Path(tempfile.mkdtemp(prefix="userland-seriesbench-"))
        plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
        try:
            with redis_server(state) as redis_url:
                result = await one_class(plane, redis_url, state, students, courses, templates)
        finally:
            plane.stop()
        results.append(result)
        print(
            f"{students:5} students, {courses} courses x {templates} Templates: "
            f"{result['series']} = {result['total']} series",
            flush=True,
        )
    return {"classes": results, "load": os.getloadavg()}
