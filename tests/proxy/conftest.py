"""Fixtures for the gateway's tests. What is real: all of it.

- the Kubernetes control plane (`control_plane`, `kube`, `namespace` from tests/conftest.py)
  holds the Templates, Userlands and Services the gateway watches; tests patch a Userland's
  status themselves (no operator runs here);
- Redis (`redis_url`) holds the sessions, written with the platform's RedisSessionStore;
- upstreams are real aiohttp servers on 127.0.0.1 that report exactly what they received;
- the gateway runs in-process (aiohttp TestServer with the gateway's runner options), except in
  the SIGTERM test, which runs `userland gateway` as a subprocess.
Upstream mode is `local`: each Service's `userland.dev/upstream` annotation names its echo server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestClient, TestServer

from userland.auth.origin_sessions import OriginSessions
from userland.platform.clients.kube import SERVICES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.platform.model import naming
from userland.platform.model.settings import Settings
from userland.proxy.app import GATEWAY, RUNNER_KWARGS, create_app, create_internal_app

SECRET = "s" * 40
PUBLIC_HOST = "userland.test"
PUBLIC_URL = f"http://{PUBLIC_HOST}"
IDE_HOST = "ide.test"  # a Template host; alice's origin is alice.ide.test
ORIGIN_COOKIE = "userland_origin"  # local http: the plain name


GOLDEN = Path(__file__).parent / "golden"

# -- the echo upstream -------------------------------------------------------------------------


@dataclass
class Echo:
    """A real HTTP + WebSocket server that reports what it received."""

    name: str
    server: TestServer | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    ws_closes: list[int | None] = field(default_factory=list)
    ws_handshakes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=2**40)
        app.router.add_get("/download", self.download)
        app.router.add_get("/redirect", self.redirect)
        app.router.add_get("/set-cookie", self.set_cookie)
        app.router.add_get("/ws", self.websocket)
        app.router.add_get("/slow", self.slow)
        app.router.add_route("*", "/{tail:.*}", self.report)
        return app

    async def _record(self, request: web.Request) -> dict[str, Any]:
        digest = hashlib.sha256()
        size = 0
        async for chunk in request.content.iter_chunked(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        seen = {
            "upstream": self.name,
            "method": request.method,
            "path_qs": request.raw_path,
            "headers": [[k, v] for k, v in request.headers.items()],
            "cookie_header": request.headers.getall("Cookie", []),
            "body_sha256": digest.hexdigest(),
            "body_len": size,
        }
        self.requests.append(seen)
        return seen

    async def report(self, request: web.Request) -> web.Response:
        return web.json_response(await self._record(request))

    async def download(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        size = int(request.query["size"])
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if request.query.get("length") == "1":
            response.content_length = size
        await response.prepare(request)
        block = bytes(range(256)) * 4096  # 1 MiB
        left = size
        while left > 0:
            piece = block[: min(left, len(block))]
            await response.write(piece)
            left -= len(piece)
        await response.write_eof()
        return response

    async def slow(self, request: web.Request) -> web.Response:
        """Answers after `seconds`: a request that is in flight when the gateway is told to stop."""
        await self._record(request)
        await asyncio.sleep(float(request.query["seconds"]))
        return web.Response(text="slow done")

    async def redirect(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.Response(status=302, headers={"Location": "/somewhere/else?x=1&y=%2F"})

    async def set_cookie(self, request: web.Request) -> web.Response:
        await self._record(request)
        response = web.Response(text="cookies")
        response.headers.add("Set-Cookie", "app_a=1; Path=/")
        response.headers.add("Set-Cookie", "app_b=2; Path=/; HttpOnly")
        response.headers.add("Set-Cookie", "userland_session=planted; Path=/")
        response.headers.add("Set-Cookie", "__Host-userland_origin=planted; Path=/; Secure")
        response.headers.add("Set-Cookie", "userland_origin=planted; Path=/")
        return response

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        self.ws_handshakes.append({k.lower(): v for k, v in request.headers.items()})
        ws = web.WebSocketResponse(protocols=("echo.v1",))
        await ws.prepare(request)
        async for msg in ws:
            if msg.type is WSMsgType.TEXT:
                if msg.data.startswith("close:"):
                    _, code, reason = msg.data.split(":", 2)
                    await ws.close(code=int(code), message=reason.encode())
                    break
                if msg.data == "ping-me":
                    await ws.ping(b"from-upstream")
                    continue
                if msg.data == "whoami":
                    await ws.send_str(json.dumps({"upstream": self.name,
                                                  "user": request.headers.get("X-User")}))
                    continue
                await ws.send_str(f"{self.name}:{msg.data}")
            elif msg.type is WSMsgType.BINARY:
                await ws.send_bytes(msg.data[::-1])
        self.ws_closes.append(ws.close_code)
        return ws


EchoFactory = Callable[[str], Awaitable[Echo]]


@pytest.fixture
async def echo_factory() -> AsyncIterator[EchoFactory]:
    servers: list[TestServer] = []

    async def make(name: str) -> Echo:
        echo = Echo(name)
        echo.server = TestServer(echo.app(), host="127.0.0.1")
        await echo.server.start_server(auto_decompress=False)  # report bodies as received
        servers.append(echo.server)
        return echo

    yield make
    for server in servers:
        await server.close()


# -- Kubernetes objects -----------------------------------------------------------------------


def template_body(name: str, *, host: str | None = None, prefix: str | None = None, port: int = 8080,
                  self_service: bool = False) -> dict[str, Any]:
    routing: dict[str, str] = {}
    if host:
        routing["host"] = host
    if prefix:
        routing["pathPrefix"] = prefix
    return {
        "apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
        "spec": {"displayName": name.upper(), "routing": routing, "port": port,
                 "selfService": self_service,
                 "podSpec": {"containers": [{"name": "main", "image": "example/ide:1"}]}},
    }


@dataclass
class World:
    kube: KubeClient
    namespace: str

    async def template(self, name: str, **kwargs: Any) -> None:
        await self.kube.create(TEMPLATES, self.namespace, template_body(name, **kwargs))

    async def userland(self, template: str, user: str, *, ready: bool = True,
                       suspended: bool = False) -> str:
        name = naming.userland_name(template, user)
        await self.kube.create(USERLANDS, self.namespace, {
            "apiVersion": naming.API_VERSION, "kind": "Userland", "metadata": {"name": name},
            "spec": {"user": user, "template": template, "suspended": suspended}})
        await self.set_ready(template, user, ready)
        return name

    async def set_ready(self, template: str, user: str, ready: bool) -> None:
        status = "True" if ready else "False"
        await self.kube.merge_patch(USERLANDS, self.namespace, naming.userland_name(template, user), {
            "status": {"phase": "Ready" if ready else "Starting",
                       "conditions": [{"type": "Ready", "status": status, "reason": "Test",
                                       "message": "set by the test", "lastTransitionTime":
                                       "2026-01-01T00:00:00Z"}]}}, subresource="status")

    async def service(self, template: str, user: str, *, upstream: str | None, port: int = 8080) -> None:
        annotations = {naming.ANNOTATION_UPSTREAM: upstream} if upstream else {}
        await self.kube.create(SERVICES, self.namespace, {
            "metadata": {"name": naming.service_name(template, user), "annotations": annotations,
                         "labels": {naming.LABEL_USER: user, naming.LABEL_TEMPLATE: template}},
            "spec": {"ports": [{"port": port, "targetPort": port}], "selector": {"app": "x"}}})

    async def environment(self, template: str, user: str, echo: Echo, *, ready: bool = True) -> None:
        await self.userland(template, user, ready=ready)
        await self.service(template, user, upstream=echo.url)


@pytest.fixture
def world(kube: KubeClient, namespace: str) -> World:
    return World(kube, namespace)


# -- sessions and the gateway ------------------------------------------------------------------


@pytest.fixture
async def sessions(redis_url: str) -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    client = redis.asyncio.from_url(redis_url)
    store = RedisSessionStore(client, 3600)

    async def login(user: str) -> str:
        """A real platform session in Redis for `user`; returns the cookie value."""
        return await store.save(Session(login=user, github_id=abs(hash(user)) % 10**8, role="student",
                                        csrf="csrf-token", created=time.time()))

    yield login
    await client.aclose()


@dataclass
class Origins:
    """Origin sessions made the way a handoff makes them (a code, then redeemed), in Redis."""

    sessions: OriginSessions
    platform_login: Callable[[str], Awaitable[str]]

    async def login(self, user: str, origin: str | None = None) -> str:
        """`user` signed in on `origin` (their own on ide.test by default): the origin cookie."""
        platform_cookie = await self.platform_login(user)
        return await self.handoff(platform_cookie, origin or f"http://{user.lower()}.{IDE_HOST}")

    async def handoff(self, platform_cookie: str, origin: str) -> str:
        code = await self.sessions.issue_code(platform_cookie, origin, "/")
        redeemed = await self.sessions.redeem(code, origin)
        assert redeemed is not None
        return redeemed[0]


@pytest.fixture
async def origins(redis_url: str, sessions: Callable[[str], Awaitable[str]]) -> AsyncIterator[Origins]:
    client = redis.asyncio.from_url(redis_url)
    yield Origins(OriginSessions(client, 3600), sessions)
    await client.aclose()


def origin_cookie(cookie_id: str) -> dict[str, str]:
    return {"Cookie": f"{ORIGIN_COOKIE}={cookie_id}"}


def gateway_settings(namespace: str, redis_url: str, web_url: str = "http://127.0.0.1:9", **extra: Any
                     ) -> Settings:
    return Settings(namespaces=extra.pop("namespaces", (namespace,)), redis_url=redis_url,
                    identity_secret=SECRET, public_url=PUBLIC_URL,
                    upstream_mode=extra.pop("upstream_mode", "local"),
                    cookie_secure=extra.pop("cookie_secure", False), web_url=web_url, **extra)


GatewayFactory = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


@pytest.fixture
async def gateway_factory(kube: KubeClient, namespace: str, redis_url: str
                          ) -> AsyncIterator[GatewayFactory]:
    clients: list[TestClient[web.Request, web.Application]] = []

    async def make(**settings_extra: Any) -> TestClient[web.Request, web.Application]:
        settings = gateway_settings(namespace, settings_extra.pop("ns_redis_url", redis_url),
                                    **settings_extra)
        app = create_app(settings, kube=kube)
        server = TestServer(app, host="127.0.0.1")
        # The runner options the real server uses (the test server sets handler_cancellation itself).
        await server.start_server(**{k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"})
        # No cookie jar: every test says which cookies it sends (a jar would mix origins up).
        client = TestClient(server, cookie_jar=aiohttp.DummyCookieJar())
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


InternalOf = Callable[[TestClient[web.Request, web.Application]],
                      Awaitable[TestClient[web.Request, web.Application]]]


@pytest.fixture
async def internal_of() -> AsyncIterator[InternalOf]:
    """The internal listener (/healthz, /metrics, /auth/verify) of an in-process gateway, served
    on a port of its own as `userland gateway` serves it (USERLAND_INTERNAL_LISTEN)."""
    clients: list[TestClient[web.Request, web.Application]] = []

    async def make(gw: TestClient[web.Request, web.Application]) -> TestClient[web.Request, web.Application]:
        assert gw.app is not None
        client = TestClient(TestServer(create_internal_app(gw.app), host="127.0.0.1"),
                            cookie_jar=aiohttp.DummyCookieJar())
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


def routes_of(client: TestClient[web.Request, web.Application]) -> Any:
    return client.app[GATEWAY].routes  # type: ignore[index]


def golden_vscode_frames() -> list[dict[str, Any]]:
    """Frames a real VS Code (code-server 4.100.3) tab sent, captured with Playwright's
    `framesent` and labelled by what the student was doing (docs/sleep.md): `what` names the
    protocol messages in the frame, `counts` whether it is the student using VS Code."""
    frames: list[dict[str, Any]] = json.loads((GOLDEN / "vscode_frames.json").read_text())
    return frames
