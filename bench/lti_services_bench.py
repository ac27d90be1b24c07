"""LTI Advantage services benchmark against the real test platform (run by hand: this file).

The LMS is tests/support/lti_services_platform.py (lti1p3platform over aiohttp, real RS256
keys, on loopback, in this process's event loop: its time is in the figures, as an LMS's would
be). Measured:
  roster    reading a 1,000-member course in 10 pages (NRPS, `Link: rel="next"`) and planning
            the sync from nothing, then again with nothing changed: seconds, HTTP requests,
            token requests, and the course writes the plan asks for (0 when nothing changed);
  passback  grades of 500 students to one line item (AGS): the first round (every grade new),
            a second round with nothing changed, and a round after 50 grades changed:
            seconds, score posts and all requests per student.
  apply     (`--cluster`) on a fresh real control plane, as the web UI's ServiceAccount: the
            1,000-member roster synced into a course from nothing (read, plan, web/lti_roster.py's
            apply_plan), then again with nothing changed (API writes: 0), against creating the
            same 1,000 Userlands directly with the raw client at the same concurrency.
Prints a table and writes bench/results/lti_services.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.support, as the other benchmarks import it
sys.path.insert(0, str(HERE))  # web_roster_bench's course recipe (--cluster)

from tests.support.lti_services_platform import LtiServicesPlatform, new_tool_key  # noqa: E402
from userland.platform.clients.lti_services_grades import LineItems, pass_back  # noqa: E402
from userland.platform.clients.lti_services_roster import read_roster  # noqa: E402
from userland.platform.clients.lti_services_token import TokenClient  # noqa: E402
from userland.platform.model.lti_services_grades import Grade, LineItemSpec  # noqa: E402
from userland.platform.model.lti_services_roster import LIS  # noqa: E402
from userland.platform.model.lti_services_roster_diff import Course, Policy, Student, plan_sync  # noqa: E402
from userland.platform.model.lti_services_token import ServiceCredentials  # noqa: E402


def course_after(plan_add: Any, issuer: str) -> Course:
    students = {s.login: Student(s.login, person=s.person) for s in plan_add}
    return Course(students=students, bindings={s.person: s.login for s in plan_add})


async def roster_round(members: int, pages: int) -> dict[str, Any]:
    key = new_tool_key()
    async with (
        LtiServicesPlatform(key, page_size=members // pages) as lms,
        aiohttp.ClientSession() as session,
    ):
        lms.rosters["c1"] = [
            {
                "user_id": f"u{i}",
                "roles": [f"{LIS}#Learner"],
                "name": f"Student {i}",
                "email": f"s{i}@uni.edu",
            }
            for i in range(members)
        ]
        tokens = TokenClient(session)
        creds = ServiceCredentials(client_id=lms.client_id, token_url=lms.token_url, key=key)
        out: dict[str, Any] = {}
        course = Course()
        for label in ("from_nothing", "no_change"):
            before = len(lms.service_requests), tokens.token_requests
            started = time.perf_counter()
            roster = await read_roster(
                tokens, creds, lms.memberships_url("c1"), issuer=lms.issuer, context="c1"
            )
            read_s = time.perf_counter() - started
            plan = plan_sync([roster.members], course, Policy())
            total_s = time.perf_counter() - started
            out[label] = {
                "seconds": round(total_s, 3),
                "read_seconds": round(read_s, 3),
                "plan_seconds": round(total_s - read_s, 4),
                "pages": roster.pages,
                "http_requests": len(lms.service_requests) - before[0],
                "token_requests": tokens.token_requests - before[1],
                "course_writes": plan.writes,
            }
            course = course_after(plan.add, lms.issuer)
        return out


async def passback_round(students: int, changed: int) -> dict[str, Any]:
    key = new_tool_key()
    async with LtiServicesPlatform(key) as lms, aiohttp.ClientSession() as session:
        tokens = TokenClient(session)
        creds = ServiceCredentials(client_id=lms.client_id, token_url=lms.token_url, key=key)
        started = time.perf_counter()
        item = await LineItems(tokens).ensure(
            creds, lms.lineitems_url("c1"), LineItemSpec("bench/lab1", "Lab 1", 10)
        )
        line_item_s = time.perf_counter() - started
        grades = {f"u{i}": Grade(i % 11, 10) for i in range(students)}
        out: dict[str, Any] = {"line_item_seconds": round(line_item_s, 3)}
        states: dict[str, Any] = {}
        for label, these in (
            ("first", grades),
            ("unchanged", grades),
            ("changed", {**grades, **{f"u{i}": Grade(10, 10, "regraded") for i in range(changed)}}),
        ):
            before = len(lms.service_requests), tokens.token_requests
            started = time.perf_counter()
            result = await pass_back(tokens, creds, item.id, these, states)
            seconds = time.perf_counter() - started
            states = result.states
            requests = len(lms.service_requests) - before[0]
            out[label] = {
                "seconds": round(seconds, 3),
                "score_posts": result.posted,
                "sent": result.sent,
                "http_requests": requests,
                "token_requests": tokens.token_requests - before[1],
                "requests_per_student": round(requests / students, 3),
            }
        return out


async def apply_rounds(members: int, pages: int, rounds: int, concurrency: int = 32) -> list[dict[str, Any]]:
    """The sync applied on a real control plane, against direct creates of the same Userlands."""
    import tempfile

    import web_roster_bench as wrb  # its course recipe and control plane users

    from userland.local.controlplane import ControlPlane, crd_files
    from userland.platform.clients.kube import USERLANDS, KubeClient
    from userland.platform.clients.lti_services_sync import LinkedContext, plan_course_sync
    from userland.platform.model.bodies import userland_body
    from userland.web.lti_roster import apply_plan, read_course

    key = new_tool_key()
    state = Path(tempfile.mkdtemp(prefix="userland-ltibench-"))
    plane = ControlPlane(state_dir=state, users=dict(wrb.USERS)).start(crd_files())
    out: list[dict[str, Any]] = []
    try:
        wrb.kubectl(plane, "apply", "-f", str(wrb.REPO / "deploy" / "namespace.yaml"))
        wrb.kubectl(plane, "apply", "-k", str(wrb.REPO / "deploy" / "rbac"))
        path = plane.write_kubeconfig(state / "web.kubeconfig", wrb.WEB_TOKEN)
        async with (
            await KubeClient.connect(str(path)) as kube,
            LtiServicesPlatform(key, page_size=members // pages) as lms,
            aiohttp.ClientSession() as session,
        ):
            lms.rosters["c1"] = [
                {
                    "user_id": f"u{i}",
                    "roles": [f"{LIS}#Learner"],
                    "name": f"Student {i}",
                    "email": f"s{i}@uni.edu",
                }
                for i in range(members)
            ]
            tokens = TokenClient(session)
            creds = ServiceCredentials(client_id=lms.client_id, token_url=lms.token_url, key=key)
            link = LinkedContext(creds, lms.issuer, "c1", lms.memberships_url("c1"))

            async def synced(namespace: str) -> tuple[float, int, int]:
                before = sum(kube.writes.values())
                started = time.perf_counter()
                course = await read_course(kube, namespace, "vscode")
                planned = await plan_course_sync(tokens, [link], course, Policy())
                results = await apply_plan(kube, namespace, "vscode", planned.plan, concurrency=concurrency)
                return time.perf_counter() - started, sum(kube.writes.values()) - before, len(results)

            async def direct(namespace: str) -> float:
                sem = asyncio.Semaphore(concurrency)

                async def one(i: int) -> None:
                    async with sem:
                        await kube.create(USERLANDS, namespace, userland_body("vscode", f"s{i}"))

                started = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(members)))
                return time.perf_counter() - started

            wrb.make_course(plane, "warmup")
            await direct("warmup")
            for n in range(rounds):
                for name in (f"direct-{n}", f"lti-{n}"):
                    wrb.make_course(plane, name)
                await asyncio.sleep(2)
                if n % 2 == 0:
                    t_direct = await direct(f"direct-{n}")
                    t_sync, writes, changed = await synced(f"lti-{n}")
                else:
                    t_sync, writes, changed = await synced(f"lti-{n}")
                    t_direct = await direct(f"direct-{n}")
                t_again, again_writes, _ = await synced(f"lti-{n}")
                row = {
                    "direct_s": round(t_direct, 3),
                    "sync_s": round(t_sync, 3),
                    "ratio": round(t_sync / t_direct, 3),
                    "sync_writes": writes,
                    "changed": changed,
                    "again_s": round(t_again, 3),
                    "again_writes": again_writes,
                }
                print(f"apply round {n + 1}: {row}", flush=True)
                out.append(row)
    finally:
        plane.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--changed", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cluster", action="store_true", help="also apply the sync on a real control plane")
    args = parser.parse_args()
    applied = await apply_rounds(args.members, args.pages, args.rounds) if args.cluster else []
    rosters = [await roster_round(args.members, args.pages) for _ in range(args.rounds)]
    passbacks = [await passback_round(args.students, args.changed) for _ in range(args.rounds)]

    def med(runs: list[dict[str, Any]], *path: str) -> float:
        values = []
        for run in runs:
            value: Any = run
            for part in path:
                value = value[part]
            values.append(float(value))
        return statistics.median(values)

    print(f"roster sync, {args.members} members in {args.pages} pages (median of {args.rounds}):")
    for label in ("from_nothing", "no_change"):
        r = rosters[0][label]
        print(
            f"  {label:13} {med(rosters, label, 'seconds'):7.3f} s "
            f"(read {med(rosters, label, 'read_seconds'):.3f}, "
            f"plan {med(rosters, label, 'plan_seconds'):.4f})  http {r['http_requests']}  "
            f"tokens {r['token_requests']}  course writes {r['course_writes']}"
        )
    print(f"grade passback, {args.students} students (median of {args.rounds}):")
    for label in ("first", "unchanged", "changed"):
        p = passbacks[0][label]
        print(
            f"  {label:13} {med(passbacks, label, 'seconds'):7.3f} s  posts {p['score_posts']}  "
            f"http {p['http_requests']}  tokens {p['token_requests']}  "
            f"per student {p['requests_per_student']}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "lti_services.json").write_text(
        json.dumps({"args": vars(args), "roster": rosters, "passback": passbacks, "apply": applied}, indent=2)
        + "\n"
    )
    if applied:
        print(f"roster sync applied to a course, {args.members} members (median of {len(applied)}):")
        for label in ("direct_s", "sync_s", "ratio", "again_s"):
            print(f"  {label:13} {statistics.median(r[label] for r in applied):7.3f}")
        print(f"  writes: sync {applied[0]['sync_writes']}, again {applied[0]['again_writes']}")


if __name__ == "__main__":
    asyncio.run(main())
