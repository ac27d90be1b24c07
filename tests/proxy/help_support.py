"""A lab for the help tests: one course, its staff, two students, the real web UI and gateway.

What is real: the control plane (the course namespace, its Template and Userlands, read by the
web UI's and the gateway's watches), Redis (sessions, the help queue, grants), the web UI
(`userland.web.app.create_app`, in-process on a loopback port) and the gateway
(`userland.proxy.app.create_app` through `gateway_factory`), echo upstreams that report what they
received. People are platform sessions made the way a login makes them; every page and form goes
through the gateway as a browser's would (Host, cookies, Origin, the form's CSRF token).
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import redis.asyncio
from aiohttp.test_utils import TestClient, TestServer

from tests.support import eventually
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import NAMESPACES, USERLANDS, KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.platform.model import identity
from userland.platform.model.settings import Settings
from userland.web.app import create_app as create_web_app
from userland.web.app import create_internal_app
from userland.web.rules import security

from .conftest import (
    IDE_HOST,
    PUBLIC_HOST,
    PUBLIC_URL,
    SECRET,
    Echo,
    EchoFactory,
    GatewayFactory,
    World,
)

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
HTML = {"Accept": "text/html"}
ORIGIN_COOKIE = "userland_origin"


def origin_url(student: str, host: str = IDE_HOST) -> str:
    return f"http://{student}.{host}"


async def make_course(kube: KubeClient, namespace: str, *, instructors: str = "teacher",
                      assistants: str = "tina", **extra: str) -> None:
    annotations = {"userland.dev/instructors": instructors, "userland.dev/assistants": assistants,
                   "userland.dev/title": f"Course {namespace}", **extra}
    await kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
        "labels": {"userland.dev/course": "true"}, "annotations": annotations}})


@dataclass
class Lab:
    gw: TestClient[Any, Any]
    web_url: str
    web_internal_url: str  # the web UI's /metrics (its internal listener)
    namespace: str
    redis_url: str
    kube: KubeClient
    echoes: dict[str, Echo]
    cookies: dict[str, str] = field(default_factory=dict)

    async def sign_in(self, login: str, role: str = "student") -> str:
        client = redis.asyncio.from_url(self.redis_url)
        try:
            cookie = await RedisSessionStore(client, 3600).save(Session(
                login=login, github_id=abs(hash(login)) % 10**8, role=role,  # type: ignore[arg-type]
                csrf=secrets.token_urlsafe(32), created=time.time()))
        finally:
            await client.aclose()
        self.cookies[login] = cookie
        return cookie

    def platform(self, login: str) -> dict[str, str]:
        return {"Host": PUBLIC_HOST, "Cookie": f"userland_session={self.cookies[login]}",
                "Origin": PUBLIC_URL}

    async def get(self, login: str, path: str) -> aiohttp.ClientResponse:
        return await self.gw.get(path, headers={**self.platform(login), **HTML}, allow_redirects=False)

    async def page(self, login: str, path: str) -> str:
        response = await self.get(login, path)
        assert response.status == 200, (response.status, await response.text())
        return html.unescape(await response.text())

    def token(self, login: str) -> str:
        """The form token the web UI gives `login`'s session (for someone whose pages have no form)."""
        digest = hashlib.sha256(self.cookies[login].encode()).hexdigest()
        return security.csrf_token(SECRET, login, identity.session_id(digest, SECRET))

    async def post(self, login: str, path: str, data: dict[str, str], *, token_from: str | None = "/me",
                   origin: str = PUBLIC_URL) -> aiohttp.ClientResponse:
        """A form posted from one of the platform's pages (`token_from`), with its token."""
        if token_from is None:
            token = self.token(login)
        else:
            found = CSRF.search(await self.page(login, token_from))
            assert found is not None, f"no form token on {token_from}"
            token = found.group(1)
        headers = {**self.platform(login), "Origin": origin}
        return await self.gw.post(path, headers=headers, data={"csrf": token, **data}, allow_redirects=False)

    # -- the help flow, as the buttons do it

    async def ask(self, student: str, message: str = "") -> aiohttp.ClientResponse:
        return await self.post(student, "/me/help", {"course": self.namespace, "message": message})

    async def join(self, staff: str, student: str, namespace: str | None = None) -> aiohttp.ClientResponse:
        ns = namespace or self.namespace
        return await self.post(staff, f"/courses/{ns}/help/join", {"student": student},
                               token_from=f"/courses/{ns}")

    async def web_metrics(self) -> str:
        async with aiohttp.ClientSession() as http, http.get(f"{self.web_internal_url}/metrics") as response:
            return await response.text()

    async def wait_for_course(self, login: str, namespace: str | None = None) -> None:
        path = f"/courses/{namespace or self.namespace}"

        async def shown() -> bool:
            return (await self.get(login, path)).status == 200
        await eventually(shown, timeout=20)

    # -- a browser on a student's origin

    async def handoff(self, login: str, origin: str, path: str = "/") -> aiohttp.ClientResponse:
        """The platform's handoff for `login` to `origin`: the redirect to the origin (302),
        or the page that refuses it."""
        query = urlencode({"origin": origin, "next": path})
        return await self.gw.get(f"/auth/handoff?{query}", headers=self.platform(login),
                                 allow_redirects=False)

    async def origin_cookie(self, login: str, origin: str) -> str:
        """Sign `login` in on `origin` through the handoff (as a browser follows it)."""
        first = await self.handoff(login, origin)
        assert first.status == 302, (first.status, await first.text())
        target = urlsplit(first.headers["Location"])
        done = await self.gw.get(f"{target.path}?{target.query}", headers={"Host": target.netloc},
                                 allow_redirects=False)
        assert done.status == 302, (done.status, await done.text())
        cookie = done.cookies.get(ORIGIN_COOKIE)
        assert cookie is not None
        return cookie.value

    async def on_origin(self, origin: str, cookie: str, path: str = "/",
                        **headers: str) -> aiohttp.ClientResponse:
        host = urlsplit(origin).netloc
        return await self.gw.get(path, allow_redirects=False,
                                 headers={"Host": host, "Cookie": f"{ORIGIN_COOKIE}={cookie}", **headers})

    async def websocket(self, origin: str, cookie: str) -> aiohttp.ClientWebSocketResponse:
        host = urlsplit(origin).netloc
        ws: aiohttp.ClientWebSocketResponse = await self.gw.ws_connect(
            "/ws", headers={"Host": host, "Cookie": f"{ORIGIN_COOKIE}={cookie}", "Origin": origin})
        return ws


async def start_lab(*, kube: KubeClient, namespace: str, redis_url: str, world: World,
                    echo_factory: EchoFactory, gateway_factory: GatewayFactory,
                    servers: list[TestServer], course: dict[str, str] | None = None,
                    also_watch: tuple[str, ...] = ()) -> Lab:
    """The lab; `also_watch`: more namespaces (courses) the gateway serves."""
    await make_course(kube, namespace, **(course or {}))
    await world.template("ide", host=IDE_HOST)
    echoes = {}
    for student in ("alice", "bob"):
        echoes[student] = await echo_factory(f"{student}-upstream")
        await world.environment("ide", student, echoes[student])
        # The address the operator reports (status.url): the pages link to it.
        await kube.merge_patch(USERLANDS, namespace, f"ide-{student}",
                               {"status": {"url": origin_url(student) + "/"}}, subresource="status")
    web_app = create_web_app(Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC_URL,
                                      cookie_secure=False), kube=kube)
    server = TestServer(web_app, host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    web_url = f"http://127.0.0.1:{server.port}"
    internal = TestServer(create_internal_app(web_app), host="127.0.0.1")
    await internal.start_server()
    servers.append(internal)
    gw = await gateway_factory(web_url=web_url, namespaces=(namespace, *also_watch))
    lab = Lab(gw=gw, web_url=web_url, web_internal_url=f"http://127.0.0.1:{internal.port}",
              namespace=namespace, redis_url=redis_url, kube=kube, echoes=echoes)
    for login in ("alice", "bob", "tina", "teacher", "mallory"):
        await lab.sign_in(login)
    await lab.wait_for_course("teacher")

    async def routed() -> bool:
        response = await lab.on_origin(origin_url("alice"), "none", **HTML)
        return response.status == 302  # the origin is served (to a handoff), not a 404
    await eventually(routed, timeout=20)
    return lab


@contextlib.asynccontextmanager
async def running_lab(*, kube: KubeClient, namespace: str, redis_url: str, world: World,
                      echo_factory: EchoFactory, gateway_factory: GatewayFactory) -> AsyncIterator[Lab]:
    """`start_lab` for one course, its servers closed at the end (the tests' `lab` fixture)."""
    servers: list[TestServer] = []
    try:
        yield await start_lab(kube=kube, namespace=namespace, redis_url=redis_url, world=world,
                              echo_factory=echo_factory, gateway_factory=gateway_factory, servers=servers)
    finally:
        for server in servers:
            await server.close()


async def text(response: aiohttp.ClientResponse) -> str:
    """A page's text with its HTML entities read (what a person sees)."""
    return html.unescape(await response.text())


async def live_grants(lab: Lab) -> list[Any]:
    """The course's live help grants, as Redis holds them."""
    client = redis.asyncio.from_url(lab.redis_url)
    try:
        return await GrantStore(client).live_in(lab.namespace)
    finally:
        await client.aclose()
