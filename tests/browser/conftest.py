"""Fixtures for the browser tests. What is real: everything but GitHub.

- the browser: Debian's Chromium (`/usr/bin/chromium`), headless, driven by Playwright's
  Python API (its own browser downloads are never used);
- the Kubernetes control plane (`control_plane`, `kube`, `namespace` from tests/conftest.py)
  holds the Templates, Userlands and Services; the test patches each Userland's status Ready
  itself (no operator or kubelet runs here);
- Redis (a database of its own on the session's `redis_url` server, flushed per test) holds
  the OAuth states, login bindings and sessions;
- the gateway is the project's `create_app` served in-process on a loopback port with the
  runner options the real server uses, in upstream mode `local`, auth routes mounted;
- each student's environment is the project's demo environment (`local/demo_env.py`) served on
  127.0.0.1, named in its Service's `userland.dev/upstream` annotation, with three more pages a
  hostile or careless environment could serve (`environment_app`): a service worker with scope
  `/` (and `Service-Worker-Allowed: /`) that rewrites every page it controls, a
  `Cache-Control: public` page, a page that plants them plus localStorage and a cookie, and one
  that keeps planting a platform cookie for the parent domain from script (issue 17); the
  public host's web UI is the project's web UI (`userland.web.app.create_app`) with its own watches;
- GitHub is the fake (tests/fakes/github.py), a real local HTTP server, here with an HTML
  consent page (buttons "Authorize as <login>" and "Cancel") in front of its authorize endpoint.

Names: the platform is `http://userland.localhost:<port>` (Chromium resolves `*.localhost`,
however deep, to loopback). The students' Template is routed by host `ide.localhost`, so alice's
environment is her own origin `http://alice.ide.localhost:<port>` and bob's
`http://bob.ide.localhost:<port>`, each with its own host-only cookie from the handoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, async_playwright

from tests.fakes.github import API_PREFIX, FakeGitHub
from tests.operator.support import template_body, userland_body
from tests.support.real_apps import Local, started_local
from userland.local import demo_env
from userland.local.ports import free_port
from userland.platform.clients.kube import SERVICES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.platform.model.settings import Settings
from userland.proxy.app import RUNNER_KWARGS, create_app
from userland.web.app import create_app as create_web_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
# For pages that frame another site (the LMS's course page framing Userland): every frame in the
# page's own process. With site isolation a frame that navigates from the LMS's site to
# Userland's swaps into a process of its own, and under load Playwright can lose that frame for
# good: traced with DEBUG=pw:protocol, the new process's page loaded and its contexts were
# announced before the old process's "frame detached (swap)", after which Playwright never
# evaluated in the frame again, and `expect(...)` inside it waited until pytest's timeout
# (1 run in 5 to 20 under load; the same race as puppeteer#10715). The browser's rules the tests
# prove do not depend on the process model: third-party cookies stay blocked (the first LTI
# test proves it in this very setup) and postMessage works the same.
FRAMED_SITE_ARGS = [*CHROMIUM_ARGS, "--disable-site-isolation-trials"]
IDENTITY_SECRET = "i" * 40
BROWSER_TEST_DB = 12  # tests/auth use 9, the proxy tests 0
STUDENTS = {"alice": 1001, "bob": 1002}
TEMPLATE = "ide"
TEMPLATE_HOST = "ide.localhost"

# A service worker as an environment could register it: it controls every page of its origin
# and rewrites them (marking them with an element #hijacked); on a shared origin it rewrote
# every student's pages.
SERVICE_WORKER = """
self.addEventListener("install", (event) => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
self.addEventListener("fetch", (event) => {
  if (event.request.mode !== "navigate") return;
  event.respondWith(fetch(event.request).then(async (response) => {
    const type = response.headers.get("Content-Type") || "";
    if (response.type === "opaqueredirect" || !type.includes("text/html")) return response;
    const text = await response.text();
    const mark = `<p id="hijacked">rewritten by OWNER's service worker</p>`;
    return new Response(text.replace("<body>", "<body>" + mark),
                        {status: response.status, headers: response.headers});
  }));
});
"""
PLANT = """<!doctype html><html><head><meta charset="utf-8"><title>planting</title></head><body>
<p id="state">planting</p>
<script>
(async () => {
  localStorage.setItem("secret", "OWNER's token");
  document.cookie = "app_secret=OWNER; path=/";
  await (await caches.open("ide")).put("/cached-by-script", new Response("OWNER's cache"));
  await fetch("/cacheable");
  await navigator.serviceWorker.register("/static/sw.js", {scope: "/"});
  await navigator.serviceWorker.ready;
  document.getElementById("state").textContent = "planted";
})().catch((error) => { document.getElementById("state").textContent = "failed: " + error; });
</script></body></html>"""

# A hostile page (issue 17): it keeps (re)planting a platform cookie for the parent domain, so
# that it is always the newest of its name in the browser; `value` and `domain` in the query.
PLANT_PARENT_COOKIE = """<!doctype html><html><head><meta charset="utf-8"><title>planting</title></head>
<body><p id="state">starting</p>
<script>
const params = new URLSearchParams(location.search);
const name = params.get("name"), value = params.get("value"), domain = params.get("domain");
function plant() {
  document.cookie = `${name}=; Domain=${domain}; Path=/; Max-Age=0`;
  document.cookie = `${name}=${value}; Domain=${domain}; Path=/`;
}
plant();
setInterval(plant, 100);
document.getElementById("state").textContent = "planting";
</script></body></html>"""

_CONSENT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Authorize application - Fake GitHub</title>
<style>
body {{ font-family: system-ui, sans-serif; background: #f6f8fa; color: #1f2328; }}
main {{ max-width: 26rem; margin: 4rem auto; background: #fff; border: 1px solid #d0d7de;
        border-radius: 6px; padding: 1.5rem 2rem; }}
h1 {{ font-size: 1.3rem; }} form {{ display: inline; }}
button {{ margin: .3rem .3rem 0 0; padding: .4rem .9rem; border-radius: 6px; border: 1px solid #d0d7de; }}
button.allow {{ background: #1f883d; color: #fff; }}
</style></head>
<body><main>
<h1>Authorize <code>{client_id}</code></h1>
<p>This application wants to know who you are on the (fake) GitHub.
Scopes: <code>{scope}</code></p>
<p>Redirects to <code>{redirect_uri}</code></p>
{forms}
</main></body></html>
"""


def _with_query(url: str, **params: str) -> str:
    return url + ("&" if "?" in url else "?") + urlencode(params)


class ConsentGitHub(FakeGitHub):
    """The fake GitHub with the page a person sees: choose who you are, authorize or cancel.

    `GET /login/oauth/authorize` with the client's parameters shows the page; its buttons come
    back to the same URL with `decision=allow` and `as=<login>` (that user signs in and the
    fake issues a code as usual) or `decision=cancel` (back to the client with `access_denied`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.consent_pages = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/login/oauth/authorize", self.consent)
        app.router.add_post("/login/oauth/access_token", self.access_token)
        app.router.add_get(API_PREFIX + "/user", self.user)
        app.router.add_get(API_PREFIX + "/user/orgs", self.user_orgs)
        app.router.add_get(API_PREFIX + "/user/teams", self.user_teams)
        return app

    async def consent(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        decision = query.get("decision")
        if decision is None:
            if query.get("client_id") != self.client_id or not query.get("redirect_uri"):
                return web.Response(status=400, text="bad client_id or redirect_uri")
            self.consent_pages += 1
            return web.Response(text=self._page(query), content_type="text/html")
        if decision == "cancel":  # what GitHub answers when the person clicks Cancel
            return web.Response(status=302, headers={"Location": _with_query(
                query.get("redirect_uri", ""), error="access_denied",
                error_description="The user has denied your application access.",
                state=query.get("state", ""))})
        login = query.get("as", "")
        if decision != "allow" or login.lower() not in self.users:
            return web.Response(status=400, text="no such decision or user")
        self.sign_in(login)
        return await self.authorize(request)

    def _page(self, query: Any) -> str:
        esc = html.escape
        hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                         for k, v in query.items() if k not in ("as", "decision"))
        forms = [f'<form method="get" action="/login/oauth/authorize">{hidden}'
                 f'<input type="hidden" name="as" value="{esc(login)}">'
                 '<button class="allow" name="decision" value="allow">'
                 f'Authorize as {esc(login)}</button></form>'
                 for login in self.users]
        forms.append(f'<form method="get" action="/login/oauth/authorize">{hidden}'
                     '<button name="decision" value="cancel">Cancel</button></form>')
        return _CONSENT.format(client_id=esc(query.get("client_id", "")), scope=esc(query.get("scope", "")),
                               redirect_uri=esc(query.get("redirect_uri", "")), forms="<br>".join(forms))


@dataclass
class Platform:
    """The running platform as a student's browser sees it."""

    url: str  # the platform's public URL, http://userland.localhost:<port>
    port: int
    github: ConsentGitHub

    @property
    def template_url(self) -> str:
        """The Template's bare host: it sends each student on to their own origin."""
        return f"http://{TEMPLATE_HOST}:{self.port}/"

    def origin(self, login: str) -> str:
        return f"http://{login}.{TEMPLATE_HOST}:{self.port}"

    @property
    def authorize_url(self) -> str:
        return self.github.url + "/login/oauth/authorize"


@contextlib.asynccontextmanager
async def launched_chromium(args: list[str]) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with launched_chromium(CHROMIUM_ARGS) as chromium:
        yield chromium


@pytest.fixture
async def framing_browser() -> AsyncIterator[Browser]:
    """A browser for a page that frames another site (FRAMED_SITE_ARGS says why)."""
    async with launched_chromium(FRAMED_SITE_ARGS) as chromium:
        yield chromium


@pytest.fixture
async def github() -> AsyncIterator[ConsentGitHub]:
    fake = ConsentGitHub()
    for login, github_id in STUDENTS.items():
        fake.add_user(login, github_id)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def environment_app(user: str) -> web.Application:
    """The demo environment of `user`, plus the pages of the shared-browser attacks."""
    app = web.Application()
    app[demo_env.OWNER] = user
    app[demo_env.TEMPLATE] = TEMPLATE

    async def service_worker(_: web.Request) -> web.Response:
        return web.Response(text=SERVICE_WORKER.replace("OWNER", user), content_type="application/javascript",
                            headers={"Service-Worker-Allowed": "/", "Cache-Control": "no-cache"})

    async def cacheable(_: web.Request) -> web.Response:
        return web.Response(text=f"{user}'s cacheable page",
                            headers={"Cache-Control": "public, max-age=3600"})

    async def plant(_: web.Request) -> web.Response:
        return web.Response(text=PLANT.replace("OWNER", user), content_type="text/html")

    async def plant_parent_cookie(_: web.Request) -> web.Response:
        return web.Response(text=PLANT_PARENT_COOKIE, content_type="text/html")

    app.router.add_get("/static/sw.js", service_worker)
    app.router.add_get("/cacheable", cacheable)
    app.router.add_get("/plant", plant)
    app.router.add_get("/plant-parent-cookie", plant_parent_cookie)
    app.router.add_route("GET", "/{tail:.*}", demo_env.page)
    return app


async def _wait_healthy(url: str, timeout: float = 30.0) -> None:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            assert time.monotonic() < deadline, f"{url} never became healthy"
            await asyncio.sleep(0.05)


async def _serve(app: web.Application, port: int | None = None, **kwargs: Any) -> TestServer:
    server = TestServer(app, host="127.0.0.1", port=port)
    await server.start_server(**kwargs)
    return server


async def _environment(kube: KubeClient, namespace: str, user: str, upstream: str) -> None:
    """A Ready Userland of the `ide` Template for `user`, and its Service pointing at `upstream`."""
    name = naming.userland_name(TEMPLATE, user)
    await kube.create(USERLANDS, namespace, userland_body(user, TEMPLATE, name=name))
    await kube.merge_patch(USERLANDS, namespace, name, {"status": {
        "phase": "Ready", "conditions": [{"type": "Ready", "status": "True", "reason": "Test",
                                          "message": "set by the test",
                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
        subresource="status")
    await kube.create(SERVICES, namespace, {
        "metadata": {"name": naming.service_name(TEMPLATE, user),
                     "annotations": {naming.ANNOTATION_UPSTREAM: upstream},
                     "labels": {naming.LABEL_USER: user, naming.LABEL_TEMPLATE: TEMPLATE}},
        "spec": {"ports": [{"port": 8080, "targetPort": 8080}], "selector": {"app": "x"}}})


@pytest.fixture
async def platform(kube: KubeClient, namespace: str, redis_url: str,
                   github: ConsentGitHub) -> AsyncIterator[Platform]:
    servers: list[TestServer] = []
    db_url = redis_url.rsplit("/", 1)[0] + f"/{BROWSER_TEST_DB}"
    redis_client = redis.asyncio.from_url(db_url)
    await redis_client.flushdb()
    try:
        await kube.create(TEMPLATES, namespace, template_body(
            TEMPLATE, displayName="Python IDE", routing={"host": TEMPLATE_HOST}))
        for user in STUDENTS:
            server = await _serve(environment_app(user))
            servers.append(server)
            await _environment(kube, namespace, user, f"http://127.0.0.1:{server.port}")
        port = free_port()
        public_url = f"http://userland.localhost:{port}"
        web_ui = await _serve(create_web_app(Settings(
            redis_url=db_url, identity_secret=IDENTITY_SECRET, public_url=public_url, cookie_secure=False),
            kube=kube))
        servers.append(web_ui)
        await _wait_healthy(f"http://127.0.0.1:{web_ui.port}/healthz")

        settings = Settings(
            namespaces=(namespace,), redis_url=db_url, identity_secret=IDENTITY_SECRET,
            github_client_id=github.client_id, github_client_secret=github.client_secret,
            github_url=github.url, github_api_url=github.api_url,
            public_url=public_url, web_url=f"http://127.0.0.1:{web_ui.port}",
            upstream_mode="local", cookie_secure=False, session_ttl_seconds=3600)
        # Everything exists before the gateway starts: it serves only after its watches synced.
        gateway = await _serve(create_app(settings, kube=kube), port,
                               **{k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"})
        servers.append(gateway)
        yield Platform(url=public_url, port=port, github=github)
    finally:
        for server in reversed(servers):
            await server.close()
        await redis_client.aclose()


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[Local]:
    """`userland local` with the real apps (tests/support/real_apps.py), alice and bob."""
    async with started_local(tmp_path) as running:
        yield running
