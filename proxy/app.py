"""`create_app(settings)`: the gateway as an aiohttp application.

Dispatch (a middleware, so it sees every request before the router's choice counts). First,
on every host: a request whose target is not a path (the absolute form `GET http://host/x`,
which would otherwise name the host instead of the Host header, `*`, an authority) or that has
no Host is a 400; a WebSocket upgrade or an unsafe method (anything but GET/HEAD/OPTIONS) whose
Origin is not the request's own origin is refused with a 403 (auth/rules/origins.py says exactly
when); a request carrying a platform cookie twice (one planted for a parent domain) is a 400
page that says how to recover (proxy/repeated_cookies.py). Then, by Host:
1. the platform's own host (host of USERLAND_PUBLIC_URL): `/auth/...` the auth routes, `/lti/...`
   the LTI launch when it is on (auth/lti.py: posts from the LMS's site pass the cross-site check,
   its pages may be framed); with
   USERLAND_ALLOW_PATH_ROUTES a path-prefix Template route; anything else the web UI
   (USERLAND_WEB_URL), with identity. It never serves an environment otherwise;
2. a Template host (`ide.example.edu`): a redirect (through the platform's handoff) to the
   student's own origin;
3. a student's origin (`alice.ide.example.edu`): `/__userland/...` the gateway's own endpoints
   (proxy/origins.py), anything else alice's environment, for alice only;
4. anything else: 404.
Everything the gateway answers itself carries the pages' security headers (proxy/pages.py).

Health, metrics and forward-auth (`/healthz`, `/metrics`, `/auth/verify`) are not on this app at
all, whatever the Host: `create_internal_app` serves them on a listener of their own
(`USERLAND_INTERNAL_LISTEN`), which only probes, Prometheus and an ingress controller reach.

Resources (Kubernetes client, watches, Redis client, the pooled upstream client) are opened
and closed in `cleanup_ctx`; the app does not start serving before its watches have synced.
Run the app with `RUNNER_KWARGS` (no request-body decompression, the scrubbed access log).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis.asyncio
from aiohttp import web

from userland.auth.context import AUTH
from userland.auth.lti_context import LTI, LtiContext, LtiTarget
from userland.auth.lti_pages import LTI_PATH_PREFIX, LTI_RESPONSE_HEADERS
from userland.auth.origin_sessions import OriginSession, OriginSessions
from userland.auth.routes import setup_auth
from userland.auth.rules.origins import (
    CLEAR_COOKIES_PATH,
    LTI_CROSS_SITE_POSTS,
    OWN_PATH_PREFIX,
    PLATFORM_CLEAR_COOKIES_PATH,
    cookie_names,
    cross_site_refusal,
    split_student_host,
)
from userland.auth.session_routes import verify
from userland.platform.clients.exposition import PlatformCollector
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.redis_pool import anonymous_client, connect_redis
from userland.platform.clients.sessions import (
    RedisSessionStore,
    Session,
    SessionStore,
    SessionStoreBusy,
    SessionStoreUnavailable,
)
from userland.platform.model.addresses import client_address
from userland.platform.model.routes import platform_host_of
from userland.platform.model.settings import Settings
from userland.proxy.accesslog import ACCESS_LOGGER, GatewayAccessLogger
from userland.proxy.activity import ActivityTracker
from userland.proxy.connections import client_key
from userland.proxy.gateway import Gateway
from userland.proxy.lti_courses import ensure_environment, linked_targets
from userland.proxy.metrics import GatewayMetrics
from userland.proxy.origins import OriginEndpoints
from userland.proxy.pages import OWN_RESPONSE_HEADERS
from userland.proxy.request_kinds import FORWARDED, NOT_READY, UPSTREAM_FAILED
from userland.proxy.routes_cache import RoutingCache
from userland.proxy.rules.routing import host_namespaces, host_route_for, prefix_route_for, request_host
from userland.proxy.session_cache import SESSION_CACHE_TTL, SessionCache, SessionLookup
from userland.proxy.session_census import SessionCensus
from userland.proxy.upstream import make_client_session
from userland.proxy.websocket import is_websocket_upgrade

log = logging.getLogger(__name__)

GATEWAY = web.AppKey("gateway", Gateway)
SESSION_CACHE = web.AppKey("session_cache", SessionCache[Session])
ORIGIN_SESSION_CACHE = web.AppKey("origin_session_cache", SessionCache[OriginSession])
ORIGIN_ENDPOINTS = web.AppKey("origin_endpoints", OriginEndpoints)
# The public app, as the internal app (health, metrics, forward-auth) reads it.
PUBLIC_APP = web.AppKey("public_app", web.Application)

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


def _store_lookup(store: SessionStore, cookie: str) -> SessionLookup[Session]:
    async def lookup(request: web.Request) -> Session | None:
        cookie_id = request.cookies.get(cookie)
        return None if not cookie_id else await store.load(cookie_id)
    return lookup


def _origin_lookup(sessions: OriginSessions, cookie: str) -> SessionLookup[OriginSession]:
    async def lookup(request: web.Request) -> OriginSession | None:
        return await sessions.load(request.cookies.get(cookie))
    return lookup


def create_app(settings: Settings, *, kube: KubeClient | None = None, kubeconfig: str | None = None,
               redis_client: redis.asyncio.Redis | None = None, metrics: GatewayMetrics | None = None,
               session_cache_ttl: float = SESSION_CACHE_TTL) -> web.Application:
    """The gateway app. `kube` (not closed here) or `kubeconfig`; `session_cache_ttl` 0 turns
    the session cache (session_cache.py) off, and with it the negative cache and the
    known-cookie shortcut (tests only)."""
    app = web.Application(middlewares=[dispatch], handler_args={"max_field_size": 32768})
    metrics = metrics or GatewayMetrics()
    owns_redis = redis_client is None
    # A pool that waits (bounded) when busy, with a bounded share for anonymous requests
    # (platform/clients/redis_pool.py): a flood of them is never taken for Redis being down.
    redis_conn = redis_client or connect_redis(settings.redis_url)

    async def redis_lifetime(_: web.Application) -> AsyncIterator[None]:
        # First in, last out: the session caches' invalidation listeners (below) stop before
        # the client they listen on is closed (else they would reconnect through shutdown).
        yield
        if owns_redis:
            await redis_conn.aclose()

    app.cleanup_ctx.append(redis_lifetime)
    store = RedisSessionStore(redis_conn, settings.session_ttl_seconds)
    names = cookie_names(settings.cookie_secure)
    lookup = _store_lookup(store, names.session)
    origin_sessions = OriginSessions(redis_conn, settings.session_ttl_seconds)
    origin_lookup = _origin_lookup(origin_sessions, names.origin)
    holder: dict[str, Any] = {}
    if settings.allow_path_routes:
        log.warning("path-prefix Template routes are allowed (USERLAND_ALLOW_PATH_ROUTES): their "
                    "environments share the platform's origin, so one student's pages can reach "
                    "another's data in a shared browser; use host routes where you can")

    def template_hosts() -> set[str]:
        gateway = holder.get("gateway")
        return set() if gateway is None else set(gateway.routes.routes.hosts)

    def namespaces_of(host: str) -> tuple[str, ...]:
        gateway = holder.get("gateway")
        return () if gateway is None else host_namespaces(host, gateway.routes.routes)

    def lti_setup(lti: LtiContext) -> None:
        def targets(registration: str, context: str) -> list[LtiTarget]:
            gateway = holder.get("gateway")
            if gateway is None:
                return []
            courses = lti.courses.items() if lti.courses is not None else ()
            return linked_targets(gateway.routes, registration, context, courses)

        async def environment(target: LtiTarget, login: str) -> bool:
            gateway = holder.get("gateway")
            if gateway is None:
                return False
            return await ensure_environment(gateway.routes, gateway.kube, target, login)

        lti.targets, lti.ensure_environment = targets, environment

    # Forward-auth is served by the internal app, never on the public listener.
    auth = setup_auth(app, settings, redis=redis_conn, store=store, template_hosts=template_hosts,
                      host_namespaces=namespaces_of, forward_auth=False, lti_setup=lti_setup)
    metrics.attach(sign_ins=lambda: auth.sign_ins, auth_refusals=lambda: auth.refusals)
    if session_cache_ttl > 0:
        cache = SessionCache(lookup, names.session, ttl=session_cache_ttl, redis_client=redis_conn)
        app[SESSION_CACHE] = cache
        app.cleanup_ctx.append(cache.running)  # its invalidation channel (session_cache.py)
        lookup = cache
        # The auth routes look platform sessions up the same way.
        auth.session_lookup = cache
        origin_cache = SessionCache(origin_lookup, names.origin, ttl=session_cache_ttl,
                                    redis_client=redis_conn)
        app[ORIGIN_SESSION_CACHE] = origin_cache
        app.cleanup_ctx.append(origin_cache.running)
        origin_lookup = origin_cache
        # Its subscription is pinged every half second: whether Redis answers, right now.
        metrics.attach(redis_connected=lambda: cache.serving)

    app.router.add_route("*", "/{tail:.*}", not_found)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        client = kube or await KubeClient.connect(kubeconfig)
        routes = RoutingCache(client, settings.namespaces,
                              platform_host=platform_host_of(settings.public_url))
        gateway = Gateway(settings, routes=routes, kube=client, platform_sessions=lookup,
                          origin_sessions=origin_lookup, metrics=metrics,
                          activity=ActivityTracker(settings, client, redis_conn),
                          grants=GrantStore(redis_conn))
        gateway.open(make_client_session())
        app[GATEWAY] = gateway
        for key in (SESSION_CACHE, ORIGIN_SESSION_CACHE):
            if key in app:  # both hear every published digest; ending twice finds nothing
                app[key].on_invalidate.append(gateway.live.end)
        app[ORIGIN_ENDPOINTS] = endpoints = OriginEndpoints(settings, origin_sessions, gateway.pages,
                                                            names.origin)
        census = SessionCensus(redis_conn)
        metrics.attach(handoffs=lambda: endpoints.handoffs, sessions=census)
        metrics.attach_platform(PlatformCollector(
            kube=lambda: (client,), informers=lambda: (routes.templates, routes.userlands, routes.services),
            redis=lambda: (redis_conn,), labels={"component": "gateway", "worker": metrics.worker}))
        holder["gateway"] = gateway
        await routes.start()
        flusher = asyncio.create_task(gateway.activity.run())
        grant_watch = asyncio.create_task(gateway.grant_watch.run())
        # The LTI registrations' watch and the tool's keys (auth/lti.py), beside the routes.
        lti = asyncio.create_task(app[LTI].run(client)) if LTI in app else None
        try:
            await routes.wait_synced()
            log.info("gateway routing data synced", extra={"templates": len(routes.templates.store)})
            yield
        finally:
            flusher.cancel()
            grant_watch.cancel()
            if lti is not None:
                lti.cancel()
            await asyncio.gather(flusher, grant_watch, *([lti] if lti else []), return_exceptions=True)
            # What students did since the last flush is not lost with this replica.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(gateway.activity.flush(everything=True), 5)
            await census.close()
            await routes.stop()
            await gateway.pool.close()
            await gateway.client.close()
            if kube is None:
                await client.close()

    app.cleanup_ctx.append(resources)
    return app


def _client_of(request: web.Request, trusted: tuple[str, ...]) -> str:
    """Whose share of the Redis connections an anonymous request's work takes: the client's
    address (through trusted proxies), an IPv6 /64 as one."""
    return client_key(client_address(request.remote or "", request.headers.getall("X-Forwarded-For", []),
                                     trusted))


@web.middleware
async def dispatch(request: web.Request, handler: Handler) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    started = time.perf_counter()
    status = 500
    gateway.request_started()
    # Anonymous until a session says otherwise (the session cache lifts it): its Redis work takes
    # its client's bounded share (platform/clients/redis_pool.py); the address is worked out only then.
    anonymous_client(functools.partial(_client_of, request, gateway.settings.trusted_proxies))
    try:
        response = await _dispatch(gateway, request, handler)
        status = response.status
        if not request.get(FORWARDED) and not response.prepared:
            response.headers.update(_own_headers(gateway, request))
        return response
    except web.HTTPException as exc:
        status = exc.status
        exc.headers.update(_own_headers(gateway, request))
        raise
    except SessionStoreBusy:
        status = 429
        gateway.metrics.refused("busy")
        response = gateway.pages.busy()
        response.headers.update(OWN_RESPONSE_HEADERS)
        return response
    finally:
        gateway.request_finished()
        # A WebSocket's "latency" would be its whole session: count it, keep it out of the histogram.
        # A 5xx is the platform's own failure unless an upstream answered it, or it is the designed
        # 503 of an environment still waking (only a 5xx pays for finding out).
        failed = status >= 500 and (not request.get(FORWARDED) or UPSTREAM_FAILED in request) \
            and NOT_READY not in request
        gateway.metrics.observe(status, time.perf_counter() - started, latency=status != 101, failed=failed)


def _is_lti(gateway: Gateway, request: web.Request) -> bool:
    return request.path.startswith(LTI_PATH_PREFIX) and LTI in request.app \
        and request_host(request.host) == gateway.public_host


def _own_headers(gateway: Gateway, request: web.Request) -> dict[str, str]:
    """The security headers of what the gateway answers itself; the LTI pages' own (framed by
    the LMS, one script by hash: auth/lti_pages.py) on the platform host's /lti/."""
    return LTI_RESPONSE_HEADERS if _is_lti(gateway, request) else OWN_RESPONSE_HEADERS


async def _dispatch(gateway: Gateway, request: web.Request, handler: Handler) -> web.StreamResponse:
    # The route comes from the Host header only: an absolute-form target (aiohttp would take its
    # host instead), `*` or an authority is no request for an origin server; no Host, nothing
    # to route by (HTTP/1.0 without one would get the listening address as its host).
    if not request.raw_path.startswith("/") or not request.headers.get("Host"):
        gateway.metrics.refused("bad_request")
        log.info("request refused: target or Host", extra={"event": "gateway.bad_target",
                                                            "client": request.remote or ""})
        return gateway.pages.error(400, "Bad request", "This request cannot be served.")
    here = gateway.origin_of(request.host)
    refusal = cross_site_refusal(request.method, request.headers, here,
                                 websocket=is_websocket_upgrade(request))
    if refusal is not None and request.method == "POST" and request.path in LTI_CROSS_SITE_POSTS \
            and _is_lti(gateway, request):
        # The LMS posts these from its own site; a signed id_token and a single-use state stand in.
        refusal = None
    if refusal is not None:
        gateway.metrics.refused("cross_site")
        log.info("cross-site request refused", extra={"reason": refusal, "path": request.path,
                                                      "origin": request.headers.get("Origin", "")[:200]})
        return gateway.pages.error(403, "Request refused",
                                   "This request came from another site and was refused.")
    host = request_host(request.host)
    path = request.path
    if path == (PLATFORM_CLEAR_COOKIES_PATH if host == gateway.public_host else CLEAR_COOKIES_PATH) \
            and request.method == "GET":
        return gateway.repeated_cookies.clear(request, host, secure=gateway.settings.cookie_secure)
    repeated = gateway.repeated_cookies.check(request)
    if repeated is not None:
        gateway.metrics.refused("cookie_twice")
        log.info("request refused: a platform cookie twice", extra={
            "event": "gateway.cookie_twice", "cookie": repeated, "host": host})
        clear = PLATFORM_CLEAR_COOKIES_PATH if host == gateway.public_host else CLEAR_COOKIES_PATH
        return gateway.pages.error(
            400, "Your browser has two sign-in cookies for this site",
            "One of them was not set by this site (a page from another address under this site "
            "can set one), so neither is used. Clear this site's cookies to continue: the link "
            "below does it, or your browser's settings for this site. You may be asked to sign in "
            "again.", link_url=clear, link_text="Clear this site's cookies")
    table = gateway.routes.routes
    if host == gateway.public_host:
        if path.startswith("/auth/") or _is_lti(gateway, request):
            return await _auth(request, handler)
        if gateway.settings.allow_path_routes:
            route = prefix_route_for(path, table)
            if route is not None:
                return await gateway.handle_template(request, route)
        return await gateway.handle_platform(request)
    if host in table.hosts:
        return gateway.bare_template_host(request)
    student = split_student_host(host, table.hosts)
    if student is not None:
        owner, template_host = student
        if path.startswith(OWN_PATH_PREFIX):
            try:
                return await request.app[ORIGIN_ENDPOINTS].handle(request, here or "")
            except SessionStoreBusy:
                gateway.metrics.refused("busy")
                return gateway.pages.busy()
            except SessionStoreUnavailable:
                return gateway.pages.unavailable()
        route = host_route_for(template_host, path, table)
        if route is None:
            return gateway.pages.not_found()
        return await gateway.handle_template(request, route, owner=owner)
    return gateway.pages.not_found()


async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith("/auth/logout") and SESSION_CACHE in request.app:
        # Signed out through this process: refused from now on (again after the handler,
        # in case a concurrent request cached it while Redis was being cleared).
        cache = request.app[SESSION_CACHE]
        cache.forget(request)
        try:
            return await handler(request)
        finally:
            cache.forget(request)
            # Its origin sessions are cached under cookies this request does not carry.
            request.app[ORIGIN_SESSION_CACHE].forget_all()
    return await handler(request)


def create_internal_app(app: web.Application) -> web.Application:
    """Health, metrics and forward-auth of the gateway `app`, for a listener of their own
    (`USERLAND_INTERNAL_LISTEN`: probes, Prometheus, an ingress controller's auth-url), so no
    request to the public listener can reach them, whatever its Host or request target says.
    Every Host is served here: the listener itself is the boundary."""
    internal = web.Application()
    internal[PUBLIC_APP] = app
    if AUTH in app:  # /auth/verify reads the platform cookie through the gateway's auth context
        internal[AUTH] = app[AUTH]
        internal.router.add_get("/auth/verify", verify)
    internal.router.add_get("/healthz", healthz)
    internal.router.add_get("/metrics", metrics_page)
    return internal


def _public_gateway(request: web.Request) -> Gateway | None:
    return request.app[PUBLIC_APP].get(GATEWAY)


async def healthz(request: web.Request) -> web.Response:
    gateway = _public_gateway(request)
    if gateway is None or not gateway.routes.synced:
        return web.Response(status=503, text="routing data not synced\n")
    return web.Response(text="ok\n")


async def metrics_page(request: web.Request) -> web.Response:
    gateway = _public_gateway(request)
    if gateway is None:
        return web.Response(status=503, text="starting\n")
    return web.Response(body=gateway.metrics.render(),
                        headers={"Content-Type": gateway.metrics.content_type})


async def not_found(request: web.Request) -> web.Response:
    return request.app[GATEWAY].pages.not_found()
