"""The request path: who is asking, which environment is theirs, and forwarding to it.

`Gateway` holds what every request needs (settings, the routing cache, the pooled upstream
client, pages, metrics) and nothing per user: sessions live in Redis, routing data comes from
watches, so any number of gateway replicas can serve side by side.

For a Template route: session (one Redis round trip) -> the user's Userland in memory ->
its Service in memory -> forward. The user comes only from the session, never from the
request, so one student's session can only ever reach that student's own environment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol
from urllib.parse import quote, urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from userland.platform import naming
from userland.platform.kube import USERLANDS, AlreadyExists, KubeClient, KubeError
from userland.platform.sessions import SessionStoreUnavailable
from userland.platform.settings import Settings
from userland.proxy.accesslog import LOGIN_KEY
from userland.proxy.headers import upstream_request_header_list
from userland.proxy.metrics import GatewayMetrics
from userland.proxy.pages import Pages
from userland.proxy.routes_cache import RoutingCache
from userland.proxy.routing import TemplateRoute, request_host, upstream_url
from userland.proxy.upstream import UpstreamError, UpstreamPool, forward_http, target_url
from userland.proxy.websocket import WebSocketPair, forward_websocket, is_websocket_upgrade

log = logging.getLogger(__name__)


class SessionLike(Protocol):
    @property
    def login(self) -> str: ...


SessionLookup = Callable[[web.Request], Awaitable[SessionLike | None]]


def wants_html(request: web.Request) -> bool:
    return request.method in ("GET", "HEAD") and "text/html" in request.headers.get("Accept", "")


class Gateway:
    def __init__(self, settings: Settings, *, routes: RoutingCache, kube: KubeClient,
                 session_lookup: SessionLookup, session_cookie: str,
                 metrics: GatewayMetrics) -> None:
        self.settings = settings
        self.routes = routes
        self.kube = kube
        self.session_lookup = session_lookup
        self.session_cookie = session_cookie
        self.metrics = metrics
        self.pages = Pages()
        public = urlsplit(settings.public_url)
        self.public_host = request_host(public.netloc)
        # The scheme clients use, as the deployment publishes it (TLS usually ends before us).
        self.proto = public.scheme or "http"
        self.websockets: set[WebSocketPair] = set()
        # Requests being handled (WebSockets included), for a drain that waits for them.
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self._client: aiohttp.ClientSession | None = None
        self._pool: UpstreamPool | None = None

    # -- lifecycle

    def open(self, client: aiohttp.ClientSession, pool: UpstreamPool | None = None) -> None:
        """`client` for WebSockets, `pool` for HTTP requests (a new one when not given)."""
        self._client = client
        self._pool = pool or UpstreamPool()

    @property
    def pool(self) -> UpstreamPool:
        assert self._pool is not None, "Gateway.open() was not called"
        return self._pool

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self._client is not None, "Gateway.open() was not called"
        return self._client

    def request_started(self) -> None:
        self.active += 1
        self.idle.clear()

    def request_finished(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.idle.set()

    # -- helpers

    def login_url(self, request: web.Request) -> str:
        original = f"{self.proto}://{request.host}{request.raw_path}"
        return f"{self.settings.public_url}/auth/login?next={quote(original, safe='')}"

    def not_logged_in(self, request: web.Request) -> web.StreamResponse:
        if wants_html(request) and not is_websocket_upgrade(request):
            raise web.HTTPFound(self.login_url(request))
        return web.Response(status=401, text="login required\n",
                            headers={"Cache-Control": "no-store"})

    async def _login(self, request: web.Request) -> str | None:
        session = await self.session_lookup(request)
        if session is None:
            return None
        login = session.login.lower()
        request[LOGIN_KEY] = login
        return login

    async def forward(self, request: web.Request, base_url: str, login: str | None) -> web.StreamResponse:
        websocket = is_websocket_upgrade(request)
        headers = upstream_request_header_list(
            request.headers, login, secret=self.settings.identity_secret,
            client_ip=request.remote or "", proto=self.proto, host=request.host,
            session_cookie=self.session_cookie, websocket=websocket,
        )
        try:
            if websocket:
                return await forward_websocket(request, self.client, target_url(base_url, request.raw_path),
                                               CIMultiDict(headers), register=self._ws_opened,
                                               unregister=self._ws_closed)
            return await forward_http(request, self.pool, base_url, headers,
                                      session_cookie=self.session_cookie)
        except UpstreamError as err:
            self.metrics.upstream_error(err.kind)
            log.info("upstream failed", extra={"upstream": str(URL(base_url).origin()),
                                               "kind": err.kind, "path": request.path})
            if err.response is not None:
                return err.response
            return self.pages.gateway_timeout() if err.kind == "timeout" else self.pages.bad_gateway()

    def _ws_opened(self, pair: WebSocketPair) -> None:
        self.websockets.add(pair)
        self.metrics.websocket_opened()

    def _ws_closed(self, pair: WebSocketPair) -> None:
        self.websockets.discard(pair)
        self.metrics.websocket_closed()

    # -- the two kinds of traffic

    async def handle_template(self, request: web.Request, route: TemplateRoute) -> web.StreamResponse:
        try:
            login = await self._login(request)
        except SessionStoreUnavailable:
            return self.pages.unavailable()
        if login is None:
            return self.not_logged_in(request)
        name = route.display_name or route.template
        userland = self.routes.userland(route.namespace, route.template, login)
        if userland is None:
            if route.self_service:
                return await self._create_userland(route, login)
            return self.pages.forbidden(name, login, f"{self.settings.public_url}/auth/logout")
        if userland.suspended:
            return self.pages.suspended(name, login)
        if not userland.ready:
            return self.pages.starting(name, login, userland.message)
        service_name = naming.service_name(route.template, login)
        service = self.routes.service(route.namespace, service_name)
        # The label check is defence in depth: the name is already derived from the login.
        if service is None or service.user != login:
            return self.pages.starting(name, login)
        base = upstream_url(self.settings.upstream_mode, service=service_name,
                            namespace=route.namespace, port=service.port or route.port,
                            cluster_domain=self.settings.cluster_domain,
                            annotation=service.upstream_annotation)
        if base is None:
            return self.pages.starting(name, login)
        return await self.forward(request, base, login)

    async def handle_platform(self, request: web.Request) -> web.StreamResponse:
        """The platform's own host (not /auth/): the web UI, with the caller's identity if any."""
        try:
            login = await self._login(request)
        except SessionStoreUnavailable:
            return self.pages.unavailable()
        return await self.forward(request, self.settings.web_url, login)

    async def _create_userland(self, route: TemplateRoute, login: str) -> web.StreamResponse:
        name = naming.userland_name(route.template, login)
        body = {
            "apiVersion": naming.API_VERSION,
            "kind": "Userland",
            "metadata": {"name": name, "namespace": route.namespace,
                         "labels": {naming.LABEL_USER: naming.label_value(login),
                                    naming.LABEL_TEMPLATE: naming.label_value(route.template)}},
            "spec": {"user": login, "template": route.template},
        }
        try:
            await self.kube.create(USERLANDS, route.namespace, body)
            log.info("self-service userland created", extra={"userland": f"{route.namespace}/{name}",
                                                             "user": login})
        except AlreadyExists:
            pass  # another replica or an earlier request made it; the watch brings it soon
        except KubeError as err:
            log.warning("self-service userland not created", extra={
                "userland": f"{route.namespace}/{name}", "error": str(err)})
            return self.pages.error(503, "Your environment could not be created",
                                    "Try again in a moment; if this lasts, ask your instructor.",
                                    retry=True)
        return self.pages.starting(route.display_name or route.template, login)
