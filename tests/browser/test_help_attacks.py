"""A student's pages in the browser of the member of staff who helps them: what they can do with
it, in Chromium.

tina (assistant) helps alice and bob. alice controls everything her environment serves; while
tina is on alice's origin, alice's page runs in tina's browser, next to tina's platform session
and her access to bob's environment. The page tries, with tina's browser:
- to act on the platform host as tina: read a page with her cookies (fetch with credentials),
  post the course's "remove" form and the sign-out form (fetch and a form into a hidden frame),
  with a made-up token (it cannot read hers);
- to reach bob's origin, where tina also has access: read it, send it requests, open a WebSocket,
  frame it;
- to keep a foothold after her grant ends: a service worker, the Cache API, localStorage.
Nothing of it works. The test runs in the two deployments the README describes: the platform
and the environments under one registrable domain ("same site", where browsers send the
platform's SameSite=Lax cookie along with such requests and the Origin and token checks must
refuse them), and the recommended one with the environments under a domain of their own
("cross site", where the cookie is not even sent).

What is real: Chromium (Playwright, /usr/bin/chromium, host names mapped to loopback with its
own resolver rules), the gateway and web UI in-process on loopback ports, Redis, the control
plane. The environments are small aiohttp apps playing alice's and bob's (alice's hostile).
Sessions are made in Redis the way a login makes them and given to the browsers as cookies.
Everything is served over TLS (a certificate made for the test, which this Chromium is told to
trust by its key): browsers send the fetch metadata the gateway judges staff requests by
(Sec-Fetch-Site/-Mode/-Dest) only to https origins, as every deployment is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, PLANT, SERVICE_WORKER, _serve, _wait_healthy
from tests.operator.support import template_body, userland_body
from tests.support import eventually, free_port
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import NAMESPACES, SERVICES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.platform.model import naming
from userland.platform.model.keyspace import HANDOFF_COUNT_PREFIX, pattern
from userland.platform.model.settings import Settings
from userland.proxy.accesslog import ACCESS_LOGGER
from userland.proxy.app import RUNNER_KWARGS, create_app
from userland.web.app import create_app as create_web_app
from userland.web.help_queue import HelpQueue

SECRET = "h" * 40
DB = 13
# (platform host, Template host) of each deployment.
DEPLOYMENTS = {
    "same-site": ("userland.example.edu", "ide.example.edu"),
    "cross-site": ("userland.example.edu", "ide.example-lab.net"),
}
RESOLVER = "--host-resolver-rules=MAP *.example.edu 127.0.0.1, MAP *.example-lab.net 127.0.0.1"
NAMES = "DNS:*.example.edu,DNS:*.ide.example.edu,DNS:*.example-lab.net,DNS:*.ide.example-lab.net"


@dataclass(frozen=True)
class Certificate:
    context: ssl.SSLContext
    spki: str  # what Chromium's --ignore-certificate-errors-spki-list takes


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=userland-test", "-addext",
                    f"subjectAltName={NAMES}"], check=True, capture_output=True)
    spki = subprocess.run(
        f"openssl x509 -in {cert} -pubkey -noout | openssl pkey -pubin -outform der "
        "| openssl dgst -sha256 -binary | base64", shell=True, check=True, capture_output=True, text=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return Certificate(context, spki.stdout.strip())

ATTACK = """<!doctype html><html><head><meta charset="utf-8"><title>alice's page</title></head><body>
<p id="state">attacking</p><pre id="results"></pre>
<iframe name="sink" id="sink" hidden></iframe>
<script>
const q = new URLSearchParams(location.search);
const platform = q.get("platform"), ns = q.get("ns"), bob = q.get("bob");
const results = {};
async function attempt(name, fn) {
  try { results[name] = await fn(); } catch (e) { results[name] = "blocked: " + e.name; }
}
function post(action, fields) {
  const form = document.createElement("form");
  form.method = "post"; form.action = action; form.target = "sink";
  for (const [k, v] of Object.entries(fields)) {
    const input = document.createElement("input"); input.name = k; input.value = v; form.appendChild(input);
  }
  document.body.appendChild(form); form.submit();
}
(async () => {
  await attempt("read_platform", async () => {
    const r = await fetch(platform + "/courses/" + ns, {credentials: "include"});
    return "read " + r.status + " " + (await r.text()).slice(0, 80);
  });
  await attempt("probe_platform", async () => {
    await fetch(platform + "/courses/" + ns + "/audit", {credentials: "include", mode: "no-cors"});
    return "sent";
  });
  await attempt("post_platform", async () => {
    const body = new URLSearchParams({action: "remove", names: "ide-bob", csrf: "made-up"});
    await fetch(platform + "/courses/" + ns + "/actions",
                {method: "POST", credentials: "include", mode: "no-cors", body});
    return "sent";
  });
  post(platform + "/courses/" + ns + "/actions", {action: "remove", names: "ide-bob", csrf: "made-up"});
  post(platform + "/auth/logout", {csrf: "made-up"});
  await attempt("read_bob", async () => {
    const r = await fetch(bob + "/secret", {credentials: "include"});
    return "read " + r.status + " " + await r.text();
  });
  await attempt("probe_bob", async () => {
    await fetch(bob + "/secret?from=alice", {credentials: "include", mode: "no-cors"});
    return "sent";
  });
  await attempt("ws_bob", () => new Promise((resolve) => {
    const ws = new WebSocket(bob.replace("http", "ws") + "/ws");
    ws.onopen = () => resolve("open"); ws.onerror = () => resolve("blocked");
  }));
  await attempt("frame_bob", () => new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.src = bob + "/secret?framed=1";
    frame.onload = () => resolve("loaded"); frame.onerror = () => resolve("blocked");
    document.body.appendChild(frame);
  }));
  await new Promise((resolve) => setTimeout(resolve, 500));  // the forms' posts leave
  document.getElementById("results").textContent = JSON.stringify(results);
  document.getElementById("state").textContent = "done";
})();
</script></body></html>"""

# alice's page adds images pointing at the platform's handoff for her own origin (where tina has
# access): each image a request with tina's platform cookie, where the two share a site.
FLOOD = """<!doctype html><html><head><meta charset="utf-8"><title>alice's images</title></head><body>
<p id="state">loading</p>
<script>
const q = new URLSearchParams(location.search);
const target = q.get("platform") + "/auth/handoff?origin=" + encodeURIComponent(q.get("origin")) + "&next=/";
Promise.all(Array.from({length: 40}, (_, i) => new Promise((resolve) => {
  const image = new Image();
  image.onload = image.onerror = resolve;
  image.src = target + i;
}))).then(() => { document.getElementById("state").textContent = "done"; });
</script></body></html>"""


@dataclass
class Environment:
    """A student's environment: its pages, and every request it received (path, X-User)."""

    owner: str
    seen: list[tuple[str, str]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.seen.append((request.path_qs, request.headers.get("X-User", "")))
            response: web.StreamResponse = await handler(request)
            return response

        app.middlewares.append(record)

        async def page(request: web.Request) -> web.Response:
            return web.Response(text=f"<!doctype html><title>{self.owner}</title><body><p id=who>"
                                     f"{request.headers.get('X-User')}</p></body>", content_type="text/html")

        async def secret(_: web.Request) -> web.Response:
            return web.Response(text=f"{self.owner}'s secret")

        async def attack(_: web.Request) -> web.Response:
            return web.Response(text=ATTACK, content_type="text/html")

        async def flood(_: web.Request) -> web.Response:
            return web.Response(text=FLOOD, content_type="text/html")

        async def plant(_: web.Request) -> web.Response:
            return web.Response(text=PLANT.replace("OWNER", self.owner), content_type="text/html")

        async def worker(_: web.Request) -> web.Response:
            return web.Response(text=SERVICE_WORKER.replace("OWNER", self.owner),
                                content_type="application/javascript",
                                headers={"Service-Worker-Allowed": "/", "Cache-Control": "no-cache"})

        async def cacheable(_: web.Request) -> web.Response:
            return web.Response(text=f"{self.owner}'s cacheable page",
                                headers={"Cache-Control": "public, max-age=3600"})

        async def websocket(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for _ in ws:
                pass
            return ws

        app.router.add_get("/secret", secret)
        app.router.add_get("/attack", attack)
        app.router.add_get("/plant", plant)
        app.router.add_get("/flood", flood)
        app.router.add_get("/static/sw.js", worker)
        app.router.add_get("/cacheable", cacheable)
        app.router.add_get("/ws", websocket)
        app.router.add_get("/{tail:.*}", page)
        return app

    def from_staff(self) -> list[str]:
        return [path for path, user in self.seen if user == "tina"]


@dataclass
class Lab:
    platform: str
    template_host: str
    port: int
    namespace: str
    redis: redis.asyncio.Redis
    envs: dict[str, Environment]
    access: list[logging.LogRecord]

    def origin(self, student: str) -> str:
        return f"https://{student}.{self.template_host}:{self.port}"

    async def session(self, context: BrowserContext, login: str) -> None:
        cookie = await RedisSessionStore(self.redis, 3600).save(Session(
            login=login, github_id=abs(hash(login)) % 10**8, role="student", csrf=secrets.token_urlsafe(32),
            created=time.time()))
        await context.add_cookies([{"name": "__Host-userland_session", "value": cookie,
                                    "url": self.platform + "/", "secure": True, "httpOnly": True,
                                    "sameSite": "Lax"}])

    def logins_at(self, path: str) -> list[str | None]:
        return [getattr(r, "user", None) for r in self.access if getattr(r, "path", "") == path]


class _Records(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@pytest.fixture(params=sorted(DEPLOYMENTS))
async def lab(request: pytest.FixtureRequest, kube: KubeClient, namespace: str, redis_url: str,
              certificate: Certificate) -> AsyncIterator[Lab]:
    platform_host, template_host = DEPLOYMENTS[request.param]
    db_url = redis_url.rsplit("/", 1)[0] + f"/{DB}"
    client = redis.asyncio.from_url(db_url)
    await client.flushdb()
    servers: list[TestServer] = []
    records: list[logging.LogRecord] = []
    handler = _Records(records)
    access = logging.getLogger(ACCESS_LOGGER)
    access.addHandler(handler)
    level = access.level
    access.setLevel(logging.INFO)
    try:
        await kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
            "labels": {"userland.dev/course": "true"},
            "annotations": {"userland.dev/instructors": "teacher", "userland.dev/assistants": "tina"}}})
        await kube.create(TEMPLATES, namespace, template_body("ide", displayName="Python IDE",
                                                              routing={"host": template_host}))
        port = free_port()
        envs = {}
        for student in ("alice", "bob"):
            envs[student] = Environment(student)
            server = await _serve(envs[student].app())
            servers.append(server)
            name = naming.userland_name("ide", student)
            await kube.create(USERLANDS, namespace, userland_body(student, "ide", name=name))
            await kube.merge_patch(USERLANDS, namespace, name, {"status": {
                "phase": "Ready", "url": f"https://{student}.{template_host}:{port}/",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Test", "message": "test",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
            await kube.create(SERVICES, namespace, {
                "metadata": {"name": naming.service_name("ide", student),
                             "annotations": {naming.ANNOTATION_UPSTREAM: f"http://127.0.0.1:{server.port}"},
                             "labels": {naming.LABEL_USER: student, naming.LABEL_TEMPLATE: "ide"}},
                "spec": {"ports": [{"port": 8080, "targetPort": 8080}], "selector": {"app": "x"}}})
        public_url = f"https://{platform_host}:{port}"
        web_ui = await _serve(create_web_app(Settings(redis_url=db_url, identity_secret=SECRET,
                                                      public_url=public_url), kube=kube))
        servers.append(web_ui)
        await _wait_healthy(f"http://127.0.0.1:{web_ui.port}/healthz")
        settings = Settings(namespaces=(namespace,), redis_url=db_url, identity_secret=SECRET,
                            public_url=public_url, web_url=f"http://127.0.0.1:{web_ui.port}",
                            upstream_mode="local", session_ttl_seconds=3600)
        gateway = await _serve(create_app(settings, kube=kube), port, ssl=certificate.context,
                               **{k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"})
        servers.append(gateway)
        yield Lab(platform=public_url, template_host=template_host, port=port, namespace=namespace,
                  redis=client, envs=envs, access=records)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
        for server in reversed(servers):
            await server.close()
        await client.aclose()


@pytest.fixture
async def browser(certificate: Certificate) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=[
            *CHROMIUM_ARGS, RESOLVER, f"--ignore-certificate-errors-spki-list={certificate.spki}"])
        try:
            yield chromium
        finally:
            await chromium.close()


async def join_and_open(lab: Lab, context: BrowserContext, student: str) -> Page:
    """tina presses Join for `student` on the class dashboard, then opens their environment."""
    page = await context.new_page()
    await page.goto(f"{lab.platform}/courses/{lab.namespace}")
    await page.locator(f'#help li[data-student="{student}"] button', has_text="Join").click()
    await page.wait_for_url(f"**/help/{student}")
    async with context.expect_page() as opened:
        await page.get_by_role("link", name=f"Open {student}'s Python IDE").click()
    env = await opened.value
    await env.wait_for_url(f"{lab.origin(student)}/**")
    await env.locator("#who").wait_for()
    assert await env.locator("#who").inner_text() == "tina"
    await page.close()
    return env


async def test_a_students_page_in_the_helpers_browser_gets_nothing_of_theirs(lab: Lab, browser: Browser,
                                                                            kube: KubeClient) -> None:
    queue = HelpQueue(lab.redis)
    await queue.ask(lab.namespace, "alice", "my page is broken")
    await queue.ask(lab.namespace, "bob", "me too")
    tina = await browser.new_context()
    try:
        await lab.session(tina, "tina")
        on_bob = await join_and_open(lab, tina, "bob")  # tina holds bob's origin too
        await on_bob.close()
        on_alice = await join_and_open(lab, tina, "alice")
        bob_seen = len(lab.envs["bob"].seen)

        await on_alice.goto(f"{lab.origin('alice')}/attack?platform={lab.platform}&ns={lab.namespace}"
                            f"&bob={lab.origin('bob')}")
        await on_alice.locator("#state", has_text="done").wait_for(timeout=30_000)
        results = json.loads(await on_alice.locator("#results").inner_text())

        # The platform: nothing readable, nothing done, tina still signed in.
        assert results["read_platform"].startswith("blocked"), results
        assert (await kube.get(USERLANDS, lab.namespace, "ide-bob"))["metadata"]["name"] == "ide-bob"
        dashboard = await tina.new_page()
        response = await dashboard.goto(f"{lab.platform}/courses/{lab.namespace}")
        assert response is not None and response.status == 200
        # Bob's origin: no read, no request reached his environment, no socket, no frame.
        assert results["read_bob"].startswith("blocked"), results
        assert results["ws_bob"] == "blocked", results
        assert lab.envs["bob"].seen[bob_seen:] == [], lab.envs["bob"].seen[bob_seen:]
        # SameSite: the platform's cookie went along only where both share a site; the gateway
        # refused what came with it all the same (Origin, token).
        logins = lab.logins_at(f"/courses/{lab.namespace}/audit")
        assert logins, "the probe never reached the gateway"
        if lab.template_host.endswith(".example.edu"):
            assert logins == ["tina"]
        else:
            assert logins == [None]

        # A foothold for later: a service worker, caches, storage, planted in tina's browser.
        await on_alice.goto(f"{lab.origin('alice')}/plant")
        await on_alice.locator("#state", has_text="planted").wait_for(timeout=30_000)
        [grant] = [g for g in await GrantStore(lab.redis).live_in(lab.namespace) if g.student == "alice"]
        await GrantStore(lab.redis).end(grant.id, by="alice", reason="student")

        # The planted worker still runs in tina's tab, but what it fetches is refused now.
        fetched = await on_alice.evaluate("fetch('/secret').then(async r => [r.status, await r.text()])")
        assert fetched[0] == 401 and "secret" not in fetched[1], fetched
        # Her next visit gets the ended page, which clears what the origin kept in her browser.
        response = await on_alice.goto(f"{lab.origin('alice')}/")
        assert response is not None and response.status == 403
        assert "has ended" in await on_alice.content()

        async def cleared() -> bool:
            # A page of alice's origin that never redirects (the gateway's own prefix).
            await on_alice.goto(f"{lab.origin('alice')}/__userland/look")
            with contextlib.suppress(Exception):  # the page may be reloading (executionContexts)
                state = await on_alice.evaluate("""async () => [
                    localStorage.getItem("secret"), (await caches.keys()).length,
                    (await navigator.serviceWorker.getRegistrations()).length]""")
                return state == [None, 0, 0]
            return False
        await eventually(cleared, timeout=20)
        after = len(lab.envs["alice"].from_staff())
        await on_alice.goto(f"{lab.origin('alice')}/secret")
        assert len(lab.envs["alice"].from_staff()) == after  # nothing of tina's reaches alice any more
    finally:
        await tina.close()


async def test_alices_open_page_follows_tina_and_tinas_tab_says_who_ended_it(lab: Lab,
                                                                           browser: Browser) -> None:
    """alice's "My environments" is open when tina joins: it shows tina's access and the button
    to end it without a reload (its live stream), and goes back when tina leaves. alice ends the
    next one; tina's tab of alice's environment then says who ended it and when."""
    queue = HelpQueue(lab.redis)
    await queue.ask(lab.namespace, "alice", "")
    tina, alice = await browser.new_context(), await browser.new_context()
    try:
        await lab.session(tina, "tina")
        await lab.session(alice, "alice")
        me = await alice.new_page()
        await me.goto(f"{lab.platform}/me")
        await me.locator("#live").wait_for(state="visible", timeout=15_000)  # the stream is open
        # This test's course: the courses of earlier tests may still be on her page while their
        # namespaces are being deleted, each with its own "Ask for help".
        course = me.locator(f'[data-live="course-{lab.namespace}"]')
        assert await course.locator(".help-now").count() == 0
        on_alice = await join_and_open(lab, tina, "alice")
        # No reload: the open page shows tina and the button, and no form to ask any more.
        end = course.get_by_role("button", name="End tina's access now")
        await end.wait_for(timeout=15_000)
        assert "tina" in await course.locator(".help-now").inner_text()
        assert await course.get_by_role("button", name="Ask for help").count() == 0
        # tina leaves (Done, on her helping page): alice's page goes back by itself.
        helping = await tina.new_page()
        await helping.goto(f"{lab.platform}/courses/{lab.namespace}/help/alice")
        await helping.get_by_role("button", name="Done: end my access").click()
        await course.get_by_role("button", name="Ask for help").wait_for(timeout=15_000)
        assert await course.locator(".help-now").count() == 0
        assert "tina, assistant" in await course.locator(".help-past").inner_text()

        # Again, and this time alice ends it.
        await queue.ask(lab.namespace, "alice", "one more")
        on_alice = await join_and_open(lab, tina, "alice")
        await end.wait_for(timeout=15_000)
        await end.click()
        await me.wait_for_url("**/me#help-*")
        assert "Who had access" in await me.content()
        # The range says its day once ("Fri, Nov 27, 2026, 09:58 PM-09:59 PM"), not on both ends.
        span = course.locator(".help-past .clock-range").first
        start, end = (await span.inner_text()).split("\N{EN DASH}")
        ends = [await span.locator("time").nth(i).get_attribute("datetime") or "" for i in (0, 1)]
        show_day = ("d => new Date(d).toLocaleDateString([], {weekday: 'short', day: 'numeric', "
                    "month: 'short', year: 'numeric'})")
        day, end_day = [await me.evaluate(show_day, e) for e in ends]
        assert start.startswith(day + ", ") and day[-4:].isdigit(), (start, day)
        assert end.startswith(end_day + ", ") if end_day != day else day not in end, (start, end)
        response = await on_alice.reload()
        assert response is not None and response.status == 403
        text = (await on_alice.content()).replace("&#39;", "'")
        assert "access to alice's environment has ended" in text
        assert re.search(r"alice ended your access at \d\d:\d\d UTC", text), text
    finally:
        await asyncio.gather(tina.close(), alice.close())


async def test_a_students_page_cannot_use_up_the_helpers_handoffs(lab: Lab, browser: Browser) -> None:
    """alice's page, in tina's browser, loads 40 images from the platform's handoff to alice's
    origin. Where the two share a site each one carried tina's platform cookie and was a code
    issued to her: past 30 a minute, tina could open no environment for a minute ("Too many
    sign-ins"), bob's (who is waiting for her) included. Now the handoff issues codes to page
    loads only."""
    queue = HelpQueue(lab.redis)
    await queue.ask(lab.namespace, "alice", "look at this")
    await queue.ask(lab.namespace, "bob", "me next")
    tina = await browser.new_context()
    try:
        await lab.session(tina, "tina")
        on_alice = await join_and_open(lab, tina, "alice")
        alice = lab.origin("alice")
        await on_alice.goto(f"{alice}/flood?platform={lab.platform}&origin={alice}")
        await on_alice.locator("#state", has_text="done").wait_for(timeout=30_000)
        # No code was issued for them (the images would redeem them, following the redirect):
        # the one code of tina's session this minute is her own page load of alice's origin.
        counts = await lab.redis.mget(await lab.redis.keys(pattern(HANDOFF_COUNT_PREFIX)))
        assert counts == [b"1"], counts
        assert len(lab.logins_at("/auth/handoff")) >= 40, "the images never reached the gateway"
        on_bob = await join_and_open(lab, tina, "bob")  # tina still opens bob's, at once
        await on_bob.close()
    finally:
        await tina.close()
