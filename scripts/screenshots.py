"""Screenshots of the web UI's main pages, for the README: `python scripts/screenshots.py [OUT]`
(`--help-only`: only the pages of help in the lab; `--lecture-only`: only the dashboard with a
lecture coming).

Starts the real pieces on loopback (the control plane with the project's CRDs and RBAC, Redis,
the gateway with the development login, the web UI as its own ServiceAccount), makes a demo
course of 30 students in a mix of states (their status written the way the operator writes
it: no operator or kubelet runs), then drives Debian's Chromium through the pages an
instructor, a student and an admin see, and writes PNGs to docs/screenshots/ (or OUT).
Stops everything it started. Needs the cached control plane (`make control-plane`).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the tests' helpers render a course from deploy/course/

from aiohttp.test_utils import TestServer  # noqa: E402
from playwright.async_api import Page, async_playwright  # noqa: E402

from tests.web.course_support import apply_rbac, render_course  # noqa: E402
from userland.local.controlplane import ControlPlane, crd_files, free_port  # noqa: E402
from userland.local.redisserver import redis_server  # noqa: E402
from userland.operator.rules.capacity.images import ImageProgress  # noqa: E402
from userland.operator.rules.capacity.readiness import Room, readiness  # noqa: E402
from userland.operator.rules.capacity.room import Environment, Window  # noqa: E402
from userland.platform.clients.kube import (  # noqa: E402
    EVENTS,
    NAMESPACES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    Resource,
)
from userland.platform.model import naming  # noqa: E402
from userland.platform.model.settings import Settings  # noqa: E402
from userland.proxy.app import RUNNER_KWARGS  # noqa: E402
from userland.proxy.app import create_app as create_gateway  # noqa: E402
from userland.web.app import create_app as create_web  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SECRET = "s" * 40
LECTURE_ZONE = "Europe/Berlin"
COURSE = "databases-101"
OTHER = "web-dev-2026"  # labelled as a course, but without the web UI's RoleBinding
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
FIRST = ["Ada", "Alan", "Barbara", "Claude", "Donald", "Edsger", "Frances", "Grace", "Hedy", "Ivan", "John",
         "Katherine", "Leslie", "Margaret", "Niklaus", "Ole", "Peter", "Radia", "Shafi", "Tim", "Tony",
         "Ursula", "Vint", "Whitfield", "Xavier", "Yukihiro", "Zhang", "Anita", "Bjarne", "Carol"]
LAST = ["Lovelace", "Turing", "Liskov", "Shannon", "Knuth", "Dijkstra", "Allen", "Hopper", "Lamarr",
        "Sutherland", "McCarthy", "Johnson", "Lamport", "Hamilton", "Wirth", "Dahl", "Naur", "Perlman",
        "Goldwasser", "Berners-Lee", "Hoare", "Franklin", "Cerf", "Diffie", "Leroy", "Matsumoto", "Wei",
        "Borg", "Stroustrup", "Shaw"]


def rfc3339(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))


def template(name: str, title: str, description: str, image: str, reclaim: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "displayName": title, "description": description, "routing": {"host": f"{name}.userland.localhost"},
        "port": 8080, "podSpec": {"containers": [{"name": "main", "image": image}]}}
    if reclaim:
        spec["storage"] = {"size": "2Gi", "mountPath": "/home/student", "reclaimPolicy": reclaim}
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
            "spec": spec}


async def status(kube: KubeClient, ns: str, name: str, phase: str, reason: str, message: str,
                 since: float, url: str = "") -> None:
    body: dict[str, Any] = {"phase": phase, "conditions": [{
        "type": "Ready", "status": "True" if phase == "Ready" else "False", "reason": reason,
        "message": message, "lastTransitionTime": rfc3339(since)}]}
    if url:
        body["url"] = url
    await kube.merge_patch(USERLANDS, ns, name, {"status": body}, subresource="status")


async def demo_course(kube: KubeClient) -> None:
    rng = random.Random(7)
    for ns, title, bound in ((COURSE, "Databases 101", True), (OTHER, "Web Development", False)):
        annotations = {naming.ANNOTATION_COURSE_TITLE: title, naming.ANNOTATION_INSTRUCTORS: "teacher",
                       naming.ANNOTATION_ASSISTANTS: "ta-sam,ta-kim"}
        await kube.create(NAMESPACES, None, {"metadata": {
            "name": ns, "labels": {naming.LABEL_COURSE: "true"}, "annotations": annotations}})
        if bound:
            (binding,) = [d for d in render_course(ns) if d["kind"] == "RoleBinding"]
            await kube.create(ROLEBINDINGS, ns, binding)
    await kube.create(TEMPLATES, COURSE, template("vscode", "VS Code",
                                                  "Browser IDE with Python and SQL tools",
                                                  "codercom/code-server:4.96", "Retain"))
    await kube.create(TEMPLATES, COURSE, template("mariadb", "MariaDB + phpMyAdmin",
                                                  "A database of your own with a web console",
                                                  "mariadb:11.4", "Delete"))
    for name, ready, users, reason, message in (
            ("vscode", True, 30, "Valid", "applies cleanly"),
            ("mariadb", False, 30, "InvalidPodSpec",
             'Deployment.apps "mariadb-sample" is invalid: spec.template.spec.containers[1].name: '
             'Duplicate value: "main"')):
        await kube.merge_patch(TEMPLATES, COURSE, name, {"status": {"userlands": users, "conditions": [{
            "type": "Ready", "status": "True" if ready else "False", "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(3600)}]}}, subresource="status")
    await lecture_coming(kube)
    logins = [f"{first.lower()}-{last.lower()}"[:39] for first, last in zip(FIRST, LAST, strict=True)]
    logins[0] = "alice"
    for i, login in enumerate(logins):
        annotations = {naming.ANNOTATION_STUDENT_NAME: f"{FIRST[i]} {LAST[i]}",
                       naming.ANNOTATION_STUDENT_EMAIL: f"{login}@uni.example",
                       naming.ANNOTATION_STUDENT_SECTION: "A" if i % 2 else "B",
                       naming.ANNOTATION_ADDED_BY: "teacher",
                       naming.ANNOTATION_LAST_ACTIVITY: rfc3339(rng.randint(60, 3 * 86400))}
        for tmpl in ("vscode", "mariadb"):
            name = f"{tmpl}-{login}"
            await kube.create(USERLANDS, COURSE, {
                "apiVersion": naming.API_VERSION, "kind": "Userland",
                "metadata": {"name": name, "annotations": annotations,
                             "labels": {naming.LABEL_USER: login, naming.LABEL_TEMPLATE: tmpl}},
                "spec": {"user": login, "template": tmpl, "suspended": i in (7, 19)}})
            url = f"http://{login}.{tmpl}.userland.localhost/"
            if i in (7, 19):
                await status(kube, COURSE, name, "Suspended", "Suspended", "suspended", 7200)
            elif i in (3, 11, 23) and tmpl == "vscode":
                await status(kube, COURSE, name, "Starting", "Starting", "0 of 1 replicas available",
                             rng.randint(20, 400), url)
            elif i in (0, 2, 13, 21, 26) and tmpl == "vscode":
                await status(kube, COURSE, name, "Idle", "Asleep", "asleep after 2h without use", 9000, url)
            elif i in (5, 16) and tmpl == "mariadb":
                await status(kube, COURSE, name, "Failed", "ImagePullBackOff",
                             'Back-off pulling image "mariadb:11.4"', 900, url)
                obj = await kube.get(USERLANDS, COURSE, name)
                await kube.create(EVENTS, COURSE, {
                    "metadata": {"name": f"{name}.failed"}, "type": "Warning", "reason": "Failed",
                    "message": 'Failed to pull image "mariadb:11.4": rpc error: code = NotFound',
                    "involvedObject": {"apiVersion": naming.API_VERSION, "kind": "Userland",
                                       "name": name, "namespace": COURSE, "uid": obj["metadata"]["uid"]},
                    "firstTimestamp": rfc3339(900), "lastTimestamp": rfc3339(60), "count": 14})
            else:
                await status(kube, COURSE, name, "Ready", "Available", "ready", 5000, url)


async def lecture_coming(kube: KubeClient) -> None:
    """The VS Code Template has a lecture in 12 minutes: its schedule, and the LectureReady
    condition the operator would write (worded by its own rules) while room is held for its 28
    expected students and the cluster still lacks room for 4 (docs/capacity.md)."""
    now = datetime.now(UTC)
    start = (now + timedelta(minutes=12)).replace(second=0, microsecond=0)
    local = start.astimezone(ZoneInfo(LECTURE_ZONE))
    await kube.merge_patch(TEMPLATES, COURSE, "vscode", {"spec": {"schedule": {
        "timeZone": LECTURE_ZONE, "wakeBefore": "10m", "lectures": [{
            "days": [local.strftime("%a")], "start": local.strftime("%H:%M"),
            "end": (local + timedelta(minutes=90)).strftime("%H:%M")}]}}})
    # 28 expected (2 of 30 suspended): 20 already on a node, 8 asleep; 4 placeholders run.
    environments = [Environment(has_room=i < 20) for i in range(28)]
    verdict = readiness(environments, ImageProgress("Pulled", "image on 4/4 nodes", 4, 4),
                        Room(True, placeholders=4), Window(start, start - timedelta(minutes=30), True),
                        time_zone=LECTURE_ZONE, now=now)
    assert verdict is not None
    obj = await kube.get(TEMPLATES, COURSE, "vscode")
    conditions = [*(obj.get("status") or {}).get("conditions", []), {
        "type": "LectureReady", "status": verdict.status, "reason": verdict.reason,
        "message": verdict.message, "lastTransitionTime": rfc3339(60)}]
    await kube.merge_patch(TEMPLATES, COURSE, "vscode", {"status": {"conditions": conditions}},
                           subresource="status")


async def drive_lecture(url: str, out: Path) -> None:
    """The course dashboard with a lecture coming (docs/capacity.md), on a desk and a phone."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            teacher = await (await browser.new_context(viewport={"width": 1280, "height": 520})).new_page()
            await sign_in(teacher, url, "teacher", f"/courses/{COURSE}")
            await shoot(teacher, out, "dashboard-lecture", full=False)
            phone = await (await browser.new_context(viewport={"width": 390, "height": 700},
                                                     device_scale_factor=2)).new_page()
            await sign_in(phone, url, "teacher", f"/courses/{COURSE}")
            await shoot(phone, out, "dashboard-lecture-phone", full=False)
        finally:
            await browser.close()


async def sign_in(page: Page, url: str, login: str, path: str, shot: Path | None = None) -> None:
    await page.goto(f"{url}/auth/dev-login?next={quote(url + path, safe='')}")
    if shot is not None:
        await page.screenshot(path=str(shot))
        print(f"  {shot}")
    await page.fill("#login", login)
    await page.click("button[type=submit]")
    await page.wait_for_load_state("networkidle")


async def shoot(page: Page, out: Path, name: str, *, full: bool = True) -> None:
    await page.wait_for_timeout(300)
    await page.screenshot(path=str(out / f"{name}.png"), full_page=full)
    print(f"  {out / (name + '.png')}")


ROSTER = (b"login,name,email,section\nnew-student,New Student,new@uni.example,A\n"
          b"another-one,Another One,another@uni.example,B\nNot A Login!,Typo,,A\nalice,,,\n"
          b"new-student,Duplicate,,A\n"
          b"https://github.example/this-is-not-a-github-profile-address/at-all,Long,,B\n")


async def drive(url: str, out: Path) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            teacher = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
            await sign_in(teacher, url, "teacher", f"/courses/{COURSE}")
            await teacher.goto(f"{url}/courses/{COURSE}")
            await shoot(teacher, out, "dashboard", full=False)
            await teacher.goto(f"{url}/courses/{COURSE}?phase=failed")
            await shoot(teacher, out, "dashboard-failed", full=False)
            await teacher.goto(f"{url}/courses/{COURSE}?phase=asleep")
            await shoot(teacher, out, "dashboard-asleep", full=False)
            await teacher.goto(f"{url}/courses/{COURSE}")
            await teacher.click("section.course-wide button[value=start]")
            await shoot(teacher, out, "confirm-start-all")
            await teacher.goto(f"{url}/courses/{COURSE}/add")
            await shoot(teacher, out, "add-students")
            await teacher.set_input_files("#file", {"name": "roster.csv", "mimeType": "text/csv",
                                                    "buffer": ROSTER})
            await teacher.uncheck("input[value=mariadb]")
            await teacher.check("input[value=vscode]")
            await teacher.click("button:has-text('Add students')")
            await shoot(teacher, out, "add-results")
            await teacher.goto(f"{url}/courses/{COURSE}")
            await teacher.click("section.course-wide button[value=remove]")
            await shoot(teacher, out, "confirm-remove-all")
            # Restarting two ticked environments asks first, naming both.
            await teacher.goto(f"{url}/courses/{COURSE}?phase=ready")
            boxes = teacher.locator('input[name="names"][form="bulk"]')
            await boxes.nth(0).check()
            await boxes.nth(1).check()
            await teacher.select_option("#bulk-action", "restart")
            await teacher.click("button:has-text('Apply to selected')")
            await shoot(teacher, out, "confirm-restart")
            await teacher.goto(f"{url}/courses/{COURSE}")
            await teacher.locator('tr[data-name="vscode-alan-turing"] button[value=restart]').click()
            # A course-wide run under a filter: the audit log records it.
            await teacher.goto(f"{url}/courses/{COURSE}?phase=asleep")
            await teacher.click("section.course-wide button[value=start]")
            await teacher.click("button:has-text('Start now')")
            await teacher.goto(f"{url}/courses/{COURSE}/audit")
            await shoot(teacher, out, "audit")
            await teacher.goto(f"{url}/no/such/page")
            await shoot(teacher, out, "not-found", full=False)
            # A student's address, followed from the dashboard by the teacher.
            port = url.rsplit(":", 1)[1]
            await teacher.goto(f"http://alan-turing.vscode.userland.localhost:{port}/")
            await shoot(teacher, out, "not-your-environment", full=False)

            student = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
            await sign_in(student, url, "alice", "/me", shot=out / "dev-login.png")
            await shoot(student, out, "my-environments")
            # Her VS Code is asleep: opening it shows the waking page (nothing runs it here).
            port = url.rsplit(":", 1)[1]
            await student.goto(f"http://alice.vscode.userland.localhost:{port}/")
            await shoot(student, out, "waking", full=False)

            admin = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
            await sign_in(admin, url, "admin", "/admin")
            await shoot(admin, out, "admin")
            await admin.goto(f"{url}/admin/templates")
            await shoot(admin, out, "admin-templates")

            phone = await (await browser.new_context(viewport={"width": 390, "height": 844},
                                                     device_scale_factor=2)).new_page()
            await sign_in(phone, url, "teacher", f"/courses/{COURSE}")
            await shoot(phone, out, "dashboard-phone", full=False)
            await phone.goto(f"{url}/courses/{COURSE}?phase=asleep")
            await shoot(phone, out, "dashboard-asleep-phone")
            await phone.click("section.course-wide button[value=start]")
            await shoot(phone, out, "confirm-start-phone")
            phone_student = await (await browser.new_context(viewport={"width": 390, "height": 844},
                                                             device_scale_factor=2)).new_page()
            await sign_in(phone_student, url, "alice", "/me")
            await shoot(phone_student, out, "my-environments-phone")
            await phone_student.goto(f"http://alice.vscode.userland.localhost:{port}/")
            await shoot(phone_student, out, "waking-phone", full=False)
        finally:
            await browser.close()


async def drive_help(url: str, out: Path, redis_url: str) -> None:
    """Help in the lab: a student asks on "my environments", the help queue on the class dashboard
    (two more students waiting), an assistant's helping page, the student seeing who has access
    and ending it, and what the assistant's tab of her environment says then."""
    import redis.asyncio

    from userland.web.help_queue import HelpQueue

    client = redis.asyncio.from_url(redis_url)
    queue = HelpQueue(client)
    now = time.time()
    await queue.ask(COURSE, "grace-hopper", "SELECT returns nothing, but the table has rows", now=now - 420)
    await queue.ask(COURSE, "alan-turing", "permission denied when I run make", now=now - 150)
    port = url.rsplit(":", 1)[1]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            alice = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
            await sign_in(alice, url, "alice", "/me")
            card = alice.locator("section.card", has=alice.locator(f"#help-{COURSE}"))
            await card.screenshot(path=str(out / "help-ask.png"))
            print(f"  {out / 'help-ask.png'}")
            await alice.fill(f"#message-{COURSE}", "My script cannot connect to the database")
            await alice.click("button:has-text('Ask for help')")
            await card.screenshot(path=str(out / "help-asked.png"))
            print(f"  {out / 'help-asked.png'}")

            sam = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
            await sign_in(sam, url, "ta-sam", f"/courses/{COURSE}")
            await sam.goto(f"{url}/courses/{COURSE}")
            await shoot(sam, out, "help-queue", full=False)
            await sam.locator('#help li[data-student="alice"] button', has_text="Join").click()
            await sam.wait_for_url("**/help/alice")
            await shoot(sam, out, "helping", full=False)
            # The assistant opens her VS Code (asleep here: the waking page, at her address).
            env = await sam.context.new_page()
            await env.goto(f"http://alice.vscode.userland.localhost:{port}/")
            await sam.goto(f"{url}/courses/{COURSE}")
            await sam.locator("#help").screenshot(path=str(out / "help-being-helped.png"))
            print(f"  {out / 'help-being-helped.png'}")

            await alice.goto(f"{url}/me")
            await card.screenshot(path=str(out / "help-access-now.png"))
            print(f"  {out / 'help-access-now.png'}")
            await alice.click("button:has-text('End ta-sam')")
            await alice.wait_for_url("**/me#help-*")
            await card.screenshot(path=str(out / "help-history.png"))
            print(f"  {out / 'help-history.png'}")
            await env.reload()
            await shoot(env, out, "help-ended", full=False)

            phone = await (await browser.new_context(viewport={"width": 390, "height": 844},
                                                     device_scale_factor=2)).new_page()
            await sign_in(phone, url, "ta-kim", f"/courses/{COURSE}")
            await phone.goto(f"{url}/courses/{COURSE}#help")
            await phone.locator("#help").screenshot(path=str(out / "help-queue-phone.png"))
            print(f"  {out / 'help-queue-phone.png'}")
        finally:
            await browser.close()
            await client.aclose()


async def main(out: Path, only_help: bool = False, only_lecture: bool = False) -> None:
    state = Path(tempfile.mkdtemp(prefix="userland-screens-"))
    users = {"web-token": ("system:serviceaccount:userland-system:userland-web",
                           ("system:serviceaccounts", "system:authenticated"))}
    plane = ControlPlane(state_dir=state / "k8s", users=users).start(crd_files())
    servers: list[TestServer] = []
    try:
        (state / "redis").mkdir()
        with redis_server(state / "redis") as redis_url:
            apply_rbac(plane)
            port = free_port()
            public_url = f"http://userland.localhost:{port}"
            admin_kube = await KubeClient.connect(str(plane.kubeconfig))
            web_config = plane.write_kubeconfig(state / "web.kubeconfig", "web-token")
            web_kube = await KubeClient.connect(str(web_config))
            try:
                await demo_course(admin_kube)
                settings = Settings(
                    namespaces=(COURSE,), redis_url=redis_url, identity_secret=SECRET, public_url=public_url,
                    admins=("admin",), dev_login=True, upstream_mode="local", cookie_secure=False)
                web_ui = TestServer(create_web(settings, kube=web_kube), host="127.0.0.1")
                await web_ui.start_server()
                servers.append(web_ui)
                gateway_settings = replace(settings, web_url=f"http://127.0.0.1:{web_ui.port}")
                gateway = TestServer(create_gateway(gateway_settings, kube=admin_kube), host="127.0.0.1",
                                     port=port)
                await gateway.start_server(**{k: v for k, v in RUNNER_KWARGS.items()
                                              if k != "handler_cancellation"})
                servers.append(gateway)
                print(f"platform at {public_url}; writing screenshots to {out}")
                if only_lecture:
                    await drive_lecture(public_url, out)
                    return
                if not only_help:
                    await drive(public_url, out)
                    await drive_lecture(public_url, out)
                await drive_help(public_url, out, redis_url)
            finally:
                for server in reversed(servers):
                    await server.close()
                await web_kube.close()
                await admin_kube.close()
    finally:
        plane.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is needed (apt-get install chromium)")
    args = [a for a in sys.argv[1:] if a not in ("--help-only", "--lecture-only")]
    target = Path(args[0]) if args else REPO / "docs" / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target, only_help="--help-only" in sys.argv, only_lecture="--lecture-only" in sys.argv))
