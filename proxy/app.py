"""`create_app(settings)`: the gateway as an aiohttp application.

Dispatch (a middleware, so it sees every request before the router's choice counts):
1. the platform's own host (host of USERLAND_PUBLIC_URL), `/auth/...`: the auth routes;
2. a Template route (host or path prefix): the student's environment;
3. the platform's own host, anything else: the web UI (USERLAND_WEB_URL), with identity;
4. any other host (pod IP, Service name): `/healthz`, `/metrics`, `/auth/verify` and the
   other auth routes (for forward-auth), else 404. So /metrics is never reachable through a
   Template host or the public host.

Resources (Kubernetes client, watches, Redis client, the pooled upstream client) are opened
and closed in `cleanup_ctx`; the app does not start serving before its watches have synced.
Run the app with `RUNNER_KWARGS` (no request-body decompression, the scrubbed access log).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis.asyncio
from aiohttp import web

from userland.auth.routes import SESSION_COOKIE, current_session, setup_auth
from userland.platform.kube import KubeClient
from userland.platform.sessions import RedisSessionStore, SessionStore
from userland.platform.settings import Settings
from userland.proxy.accesslog import ACCESS_LOGGER, GatewayAccessLogger
from userland.proxy.gateway import Gateway, SessionLookup
from userland.proxy.metrics import GatewayMetrics
from userland.proxy.routes_cache import RoutingCache
from userland.proxy.routing import request_host, route_for
from userland.proxy.session_cache import SESSION_CACHE_TTL, SessionCache
from userland.proxy.upstream import make_client_session

log = logging.getLogger(__name__)

GATEWAY = web.AppKey("gateway", Gateway)
SESSION_CACHE = web.AppKey("session_cache", SessionCache)

# For AppRunner / TestServer.start_server: bodies pass through byte for byte (a gzip upload
# stays gzip), a client that goes away cancels its upstream request, and the access log is
# the scrubbed structured one.
RUNNER_KWARGS: dict[str, Any] = {
    "auto_decompress": False,
    "handler_cancellation": True,
    "access_log_class": GatewayAccessLogger,
    "access_log": logging.getLogger(ACCESS_LOGGER),
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _store_lookup(store: SessionStore, cookie: str) -> SessionLookup:
    async def lookup(request: web.Request) -> Any:
        cookie_id = request.cookies.get(cookie)
        return None if not cookie_id else await store.load(cookie_id)
    return lookup


def create_app(settings: Settings, *, kube: KubeClient | None = None, kubeconfig: str | None = None,
               redis_client: redis.asyncio.Redis | None = None,
               session_lookup: SessionLookup | None = None, mount_auth: bool = True,
               metrics: GatewayMetrics | None = None,
               session_cache_ttl: float = SESSION_CACHE_TTL) -> web.Application:
    """The gateway app. `kube` (not closed here) or `kubeconfig`; `session_lookup` replaces the
    auth routes' `current_session` (tests of the proxy core); `mount_auth=False` leaves the
    auth routes out; `session_cache_ttl` 0 turns the session cache (session_cache.py) off."""
    app = web.Application(middlewares=[dispatch], handler_args={"max_field_size": 32768})
    owns_redis = redis_client is None
    redis_conn = redis_client or redis.asyncio.from_url(
        settings.redis_url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30)
    store = RedisSessionStore(redis_conn, settings.session_ttl_seconds)
    lookup: SessionLookup = session_lookup or _store_lookup(store, SESSION_COOKIE)
    holder: dict[str, Any] = {}

    def allowed_hosts() -> set[str]:
        gateway = holder.get("gateway")
        hosts = {request_host(settings.public_url.split("://", 1)[-1])}
        if gateway is not None:
            hosts |= set(gateway.routes.routes.hosts)
        return hosts

    if mount_auth:
        setup_auth(app, settings, redis=redis_conn, store=store, allowed_hosts=allowed_hosts)
        if session_lookup is None:
            lookup = current_session
    if session_cache_ttl > 0:
        cache = SessionCache(lookup, SESSION_COOKIE, ttl=session_cache_ttl)
        app[SESSION_CACHE] = cache
        lookup = cache

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_page)
    app.router.add_route("*", "/{tail:.*}", not_found)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        client = kube or await KubeClient.connect(kubeconfig)
        routes = RoutingCache(client, settings.namespaces)
        gateway = Gateway(settings, routes=routes, kube=client, session_lookup=lookup,
                          session_cookie=SESSION_COOKIE, metrics=metrics or GatewayMetrics())
        gateway.open(make_client_session())
        app[GATEWAY] = gateway
        holder["gateway"] = gateway
        await routes.start()
        try:
            await routes.wait_synced()
            log.info("gateway routing data synced", extra={"templates": len(routes.templates.store)})
            yield
        finally:
            await routes.stop()
            await gateway.pool.close()
            await gateway.client.close()
            if kube is None:
                await client.close()
            if owns_redis:
                await redis_conn.aclose()

    app.cleanup_ctx.append(resources)
    return app


@web.middleware
async def dispatch(request: web.Request, handler: Handler) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    started = time.perf_counter()
    status = 500
    gateway.request_started()
    try:
        response = await _dispatch(gateway, request, handler)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        gateway.request_finished()
        # A WebSocket's "latency" would be its whole session: count it, keep it out of the histogram.
        gateway.metrics.observe(status, time.perf_counter() - started, latency=status != 101)


async def _dispatch(gateway: Gateway, request: web.Request, handler: Handler) -> web.StreamResponse:
    host = request_host(request.host)
    path = request.path
    on_public_host = host == gateway.public_host
    if on_public_host and path.startswith("/auth/"):
        if path.startswith("/auth/logout") and SESSION_CACHE in request.app:
            # Signed out through this process: refused from now on (again after the handler,
            # in case a concurrent request cached it while Redis was being cleared).
            cache = request.app[SESSION_CACHE]
            cache.forget(request)
            try:
                return await handler(request)
            finally:
                cache.forget(request)
        return await handler(request)
    route = route_for(host, path, gateway.routes.routes)
    if route is not None:
        return await gateway.handle_template(request, route)
    if on_public_host:
        return await gateway.handle_platform(request)
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    if not gateway.routes.synced:
        return web.Response(status=503, text="routing data not synced\n")
    return web.Response(text="ok\n")


async def metrics_page(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    return web.Response(body=gateway.metrics.render(),
                        headers={"Content-Type": gateway.metrics.content_type})


async def not_found(request: web.Request) -> web.Response:
    return request.app[GATEWAY].pages.not_found()
