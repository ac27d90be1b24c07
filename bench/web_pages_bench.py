"""Roster upload through the web UI's page vs the API server's own create time, on a real control plane.

`.venv/bin/python bench/web_pages_bench.py [--students 500] [--rounds 3]`

Per round, in fresh course namespaces and alternating which goes first:
- direct: the raw KubeClient creates the same N Userlands at concurrency 32 (the API server's time);
- page:   one POST of an N-row CSV to /courses/{ns}/add through the running web UI (multipart
          parse, roster parse, Template list, the creates at concurrency 32, the audit record,
          the results page rendered) over loopback HTTP with the gateway's signed identity;
- again:  the same upload a second time (must write nothing: Userland writes are counted);
- confirm: rendering the "remove the whole course" confirmation page for the N students.
Prints medians and the page/direct ratio (goal: <= 1.2x). Starts and stops its own control
plane and Redis; the web UI's watches run as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from userland.local.controlplane import ControlPlane, crd_files
from userland.local.redisserver import redis_server
from userland.platform.clients.kube import NAMESPACES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import identity, naming
from userland.platform.model.settings import Settings
from userland.web.app import create_app
from userland.web.rules import security

SECRET = "b" * 40
PUBLIC = "http://userland.bench"
TEACHER = "teacher"
SESSION = "be7c" * 8  # the gateway session id the signed identity carries
CONCURRENCY = 32


def userland_writes(kube: KubeClient) -> int:
    return sum(n for (_verb, kind), n in kube.writes.items() if kind == "Userland")


async def course(kube: KubeClient) -> str:
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACES, None, {"metadata": {
        "name": ns, "labels": {naming.LABEL_COURSE: "true"},
        "annotations": {naming.ANNOTATION_INSTRUCTORS: TEACHER}}})
    await kube.create(TEMPLATES, ns, {
        "apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": "vscode"},
        "spec": {"routing": {"host": "vscode.example.edu"}, "port": 8080,
                 "storage": {"size": "1Gi", "mountPath": "/home/coder"},
                 "podSpec": {"containers": [{"name": "ide", "image": "demo:1"}]}}})
    return ns


async def direct(kube: KubeClient, ns: str, logins: list[str]) -> float:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(login: str) -> None:
        async with limit:
            await kube.create(USERLANDS, ns, {
                "apiVersion": naming.API_VERSION, "kind": "Userland",
                "metadata": {"name": f"vscode-{login}", "labels": {naming.LABEL_USER: login,
                                                                    naming.LABEL_TEMPLATE: "vscode"}},
                "spec": {"user": login, "template": "vscode"}})

    started = time.perf_counter()
    await asyncio.gather(*(one(login) for login in logins))
    return time.perf_counter() - started


def headers() -> dict[str, str]:
    ident = identity.for_audience(TEACHER, "web", role="student", session=SESSION)
    result = dict(identity.identity_headers(ident, SECRET))
    result["Origin"] = PUBLIC
    return result


async def upload(session: aiohttp.ClientSession, base: str, ns: str, roster: bytes) -> tuple[float, str]:
    form = aiohttp.FormData()
    form.add_field("csrf", security.csrf_token(SECRET, TEACHER, SESSION))
    form.add_field("template", "vscode")
    form.add_field("file", roster, filename="roster.csv", content_type="text/csv")
    started = time.perf_counter()
    async with session.post(f"{base}/courses/{ns}/add", data=form, headers=headers()) as response:
        text = await response.text()
        if response.status != 200:
            raise RuntimeError(f"upload answered {response.status}")
    return time.perf_counter() - started, text


async def confirm_page(session: aiohttp.ClientSession, base: str, ns: str) -> float:
    form = {"csrf": security.csrf_token(SECRET, TEACHER, SESSION), "action": "remove", "scope": "all"}
    started = time.perf_counter()
    async with session.post(f"{base}/courses/{ns}/actions", data=form, headers=headers()) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"confirmation answered {response.status}")
    return time.perf_counter() - started


async def run(students: int, rounds: int) -> None:
    state = Path(tempfile.mkdtemp(prefix="userland-web-bench-"))
    plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
    try:
        (state / "redis").mkdir()
        with redis_server(state / "redis") as redis_url:
            admin = await KubeClient.connect(str(plane.kubeconfig))
            web_kube = await KubeClient.connect(str(plane.kubeconfig), pool_size=64)
            app = create_app(Settings(identity_secret=SECRET, public_url=PUBLIC, redis_url=redis_url),
                             kube=web_kube)
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            base = f"http://127.0.0.1:{server.port}"
            results: dict[str, list[float]] = {"direct": [], "page": [], "again": [], "confirm": []}
            writes_again: list[int] = []
            try:
                async with aiohttp.ClientSession() as session:
                    for round_ in range(rounds):
                        logins = [f"s{round_}-{i:04d}" for i in range(students)]
                        roster = ("login,name,section\n" + "".join(f"{login},Student {login},A\n"
                                                                   for login in logins)).encode()
                        ns_direct, ns_page = await course(admin), await course(admin)
                        await asyncio.sleep(1.0)  # the web UI's watches pick the new courses up
                        order = ["direct", "page"] if round_ % 2 == 0 else ["page", "direct"]
                        for which in order:
                            if which == "direct":
                                results["direct"].append(await direct(admin, ns_direct, logins))
                            else:
                                took, text = await upload(session, base, ns_page, roster)
                                assert f"{students} created" in text, text[:500]
                                results["page"].append(took)
                        before = userland_writes(web_kube)
                        took, text = await upload(session, base, ns_page, roster)
                        assert f"{students} already there" in text
                        results["again"].append(took)
                        writes_again.append(userland_writes(web_kube) - before)
                        await asyncio.sleep(1.0)  # let the watch cache catch up before the confirmation
                        results["confirm"].append(await confirm_page(session, base, ns_page))
                        for ns in (ns_direct, ns_page):
                            await admin.delete(NAMESPACES, None, ns)
                        print(f"round {round_ + 1}: direct {results['direct'][-1]:.2f} s, "
                              f"page {results['page'][-1]:.2f} s, again {results['again'][-1]:.2f} s "
                              f"({writes_again[-1]} writes), confirm {results['confirm'][-1] * 1000:.0f} ms",
                              flush=True)
            finally:
                await server.close()
                await web_kube.close()
                await admin.close()
    finally:
        plane.stop()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\n{students} students, {rounds} rounds, concurrency {CONCURRENCY} (medians):")
    print(f"  direct creates          {med['direct']:.2f} s")
    print(f"  upload through the page {med['page']:.2f} s  -> {med['page'] / med['direct']:.2f}x direct")
    print(f"  same upload again       {med['again']:.2f} s  ({max(writes_again)} Userland writes at most)")
    print(f"  remove-all confirmation {med['confirm'] * 1000:.0f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.students, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
