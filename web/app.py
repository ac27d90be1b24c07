"""`create_app(settings)`: the web UI as an aiohttp application.

Behind the gateway only: every page request must carry the gateway's signed identity for the
`web` audience (platform/model/identity.py); anything else is a 401 page. Middlewares, outermost
first:
0. `measure`: each answer's route, status and time, for /metrics (web/metrics.py; served by the
   internal app, `create_internal_app`, on a listener of its own, never through the gateway);
1. `errors`: a dependency that fails (API server, Redis) is a 503 page, anything unexpected a
   500 page; the traceback goes to the log, never to the user;
2. `security_headers`: CSP without inline code, no framing, no sniffing, on every response;
3. `identity`: the signed identity (except /healthz and /static/);
4. `unsafe_requests`: POST/PUT/PATCH/DELETE must come from our own origin and carry the CSRF
   token of the signed-in login.
Resources (Kubernetes client, Redis) are opened and closed in `cleanup_ctx`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

import redis.asyncio
import redis.exceptions
from aiohttp import web

from userland.platform.clients.exposition import PlatformCollector
from userland.platform.clients.kube import KubeClient, KubeError
from userland.platform.clients.redis_pool import MeasuredRedis
from userland.platform.clients.store_client import StoreClient
from userland.platform.model import identity, look
from userland.platform.model.settings import Settings
from userland.web import render
from userland.web.access import DIRECTORY
from userland.web.context import IDENTITY, WEB, WebContext, identity_of, web_context
from userland.web.help_monitor import HelpMonitor
from userland.web.lti_deep_link import setup_lti_deep_link_routes
from userland.web.lti_link import setup_lti_link_routes
from userland.web.lti_new_course import setup_new_course_routes
from userland.web.lti_sync import RosterSync
from userland.web.metrics import WEB_METRICS, WebMetrics, metrics_page, route_of
from userland.web.routes_actions import setup_action_routes
from userland.web.routes_admin import setup_admin_routes
from userland.web.routes_assignment_actions import setup_assignment_action_routes
from userland.web.routes_assignments import STORE, setup_assignment_routes
from userland.web.routes_audit import AUDIT, setup_audit_routes
from userland.web.routes_course import setup_course_routes
from userland.web.routes_grading import setup_grading_routes
from userland.web.routes_help import setup_help_routes
from userland.web.routes_lti_sync import LTI_SYNC, setup_lti_sync_routes
from userland.web.routes_me import setup_me_routes
from userland.web.rules import security
from userland.web.rules.courses import course_role
from userland.web.rules.selection import MAX_TARGETS
from userland.web.state import STATE, ClassState

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
STATIC_DIR = Path(__file__).parent / "static"
# A roster upload is capped at 1 MiB by the parser; the body may carry a little more.
MAX_BODY_BYTES = 2 * 1024 * 1024
# A confirmed course-wide action posts back every environment it listed (up to MAX_TARGETS
# names): aiohttp's default of 1,000 fields refused a course of 500 students with two each.
MAX_FORM_FIELDS = MAX_TARGETS + 100
_PUBLIC_PATHS = ("/healthz",)
# The status /metrics counts for a request whose client went away before its answer (nginx's 499).
CLIENT_GONE = 499


@web.middleware
async def measure(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = CLIENT_GONE  # the client went away (a live stream's page closed): not our failure
        raise
    finally:
        request.app[WEB_METRICS].observe(route_of(request), request.method, status,
                                         time.perf_counter() - started)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await _page_for_errors(request, handler)
    if not response.prepared:  # the pages made here never passed security_headers (inside)
        for name, value in security.SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
    return response


async def _page_for_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    ctx = web_context(request)
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        return ctx.error(request, 413, "That upload is too large",
                         "Rosters are limited to 1 MiB. Split the file and upload the parts one by one.")
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        if exc.content_type == "text/html":
            raise  # one of our own pages (web/access.py Refused)
        # The router's bare "404: Not Found": a page with the navigation instead.
        if exc.status == 405:
            return ctx.error(request, 405, "That cannot be done here",
                             "This address does not take that kind of request. Go back and use the page's "
                             "buttons and links.")
        return ctx.error(request, 404, "There is no page here",
                         "Check the address, or go on from the navigation above.")
    except web.HTTPException:
        raise
    except KubeError as err:
        log.warning("kubernetes api error", extra={"path": request.path, "status": err.status,
                                                   "reason": err.reason})
        if err.status in (401, 403):
            return ctx.error(request, 403, "Kubernetes refused this",
                             "The web UI is not allowed to do that in this namespace. An admin can check "
                             "that the namespace is a course (deploy/course/).")
        return ctx.error(request, 503, "The cluster is not answering",
                         "Nothing was changed. Try again in a moment; if this lasts, tell your admin.")
    except (redis.exceptions.RedisError, OSError) as err:
        log.warning("dependency unavailable", extra={"path": request.path, "error": type(err).__name__})
        return ctx.error(request, 503, "Temporarily unavailable",
                         "A service the web UI needs is not answering. Nothing was changed. "
                         "Try again in a moment.")
    except Exception:
        log.exception("unexpected error", extra={"path": request.path})
        return ctx.error(request, 500, "Something went wrong",
                         "This is a bug in Userland; it has been logged. Nothing else was changed.")


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(security.SECURITY_HEADERS)
        raise
    if not response.prepared:
        for name, value in security.SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
    return response


@web.middleware
async def identity_check(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in _PUBLIC_PATHS or request.path.startswith("/static/"):
        return await handler(request)
    ctx = web_context(request)
    try:
        who = identity.verify_identity(request.headers, ctx.settings.identity_secret,
                                       audience=identity.AUDIENCE_WEB)
    except identity.IdentityRejected as why:
        log.info("identity refused", extra={"path": request.path, "reason": str(why)})
        # Back to this very page after signing in (a link to a course's dashboard, say); the
        # gateway's login accepts only its own hosts as `next`.
        back = request.path_qs if request.method in ("GET", "HEAD") else "/"
        login_url = f"{ctx.settings.public_url}/auth/login?" + urlencode(
            {"next": ctx.settings.public_url + back})
        if request.path == "/":  # the start page: what a first visitor sees of Userland
            return ctx.page(request, "error.html", status=401, title="Welcome to Userland",
                            heading="Welcome to Userland",
                            message="Your own coding environment for class, in your browser. Sign in "
                                    "to open yours; instructors manage their courses here.",
                            link=login_url, link_text="Sign in", home=False)
        return ctx.page(request, "error.html", status=401, title="Please sign in",
                        heading="Please sign in",
                        message="This page is only for signed-in users, through the Userland sign-in.",
                        link=login_url, link_text="Sign in", home=False)  # the start page is this one
    request[IDENTITY] = who
    return await handler(request)


@web.middleware
async def unsafe_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method not in security.UNSAFE_METHODS:
        return await handler(request)
    ctx = web_context(request)
    public_origin = security.origin_of(ctx.settings.public_url)
    if not security.same_origin_request(request.headers.get("Origin"), request.headers.get("Referer"),
                                        public_origin):
        log.info("cross-origin request refused", extra={"path": request.path})
        return ctx.error(request, 403, "Request refused",
                         "This form was sent from another site. Open the page again and retry.")
    if request.method == "POST" and security.STREAMED_UPLOADS.match(request.path):
        return await handler(request)  # its token is checked by its handler before the file is read
    who = identity_of(request)
    # The body is read here, once (aiohttp keeps it for the handler): a body that is not a
    # readable form (a field that is not UTF-8, an unknown charset, broken multipart; no
    # browser sends these from our pages) is a 400 page, not a 500 "bug" page.
    try:
        form = await request.post()
    except (UnicodeDecodeError, LookupError, ValueError) as err:
        log.info("unreadable form refused", extra={"path": request.path, "error": type(err).__name__})
        return ctx.error(request, 400, "This form could not be read",
                         "Nothing was changed. Open the page again and send the form from there.")
    token = request.headers.get("X-CSRF-Token", "")
    if not token:
        value = form.get(security.CSRF_FIELD, "")
        token = value if isinstance(value, str) else ""
    if not security.csrf_valid(token, ctx.settings.identity_secret, who.login, who.session):
        log.info("csrf token refused", extra={"path": request.path})
        return ctx.error(request, 403, "This form has expired",
                         "Open the page again and repeat what you did; nothing was changed.")
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
    """Ready once the watches have loaded every course: before that, pages would be empty."""
    state = web_context(request).extras.get(STATE)
    if not isinstance(state, ClassState) or not state.synced:
        return web.Response(status=503, text="loading courses\n", headers={"Cache-Control": "no-store"})
    return web.Response(text="ok\n", headers={"Cache-Control": "no-store"})


async def index(request: web.Request) -> web.StreamResponse:
    """Staff (global, or named on a course) land on their courses, students on their environments."""
    who = identity_of(request)
    state = web_context(request).extras.get(STATE)
    staff = who.role in ("admin", "instructor") or (
        isinstance(state, ClassState) and any(course_role(who, c) is not None for c in state.courses()))
    raise web.HTTPFound("/courses" if staff else "/me")


async def look_css(request: web.Request) -> web.Response:
    """The look every Userland page shares (platform/model/look.py; the gateway inlines it)."""
    return web.Response(text=look.CSS, content_type="text/css",
                        headers={"Cache-Control": "public, max-age=300"})


def create_app(settings: Settings, *, kube: KubeClient | None = None, kubeconfig: str | None = None,
               redis_client: redis.asyncio.Redis | None = None) -> web.Application:
    """The web UI. `kube` (not closed here) or `kubeconfig`; `redis_client` likewise."""
    app = web.Application(middlewares=[measure, errors, security_headers, identity_check, unsafe_requests],
                          client_max_size=MAX_BODY_BYTES, client_max_fields=MAX_FORM_FIELDS)
    owns_redis = redis_client is None
    redis_conn = redis_client or MeasuredRedis.from_url(
        settings.redis_url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30)
    metrics = WebMetrics()
    ctx = WebContext(settings=settings, templates=render.make_environment(), redis=redis_conn,
                     metrics=metrics)
    app[WEB] = ctx
    app[WEB_METRICS] = metrics
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/", index)
    # follow_symlinks: a strict editable install (make venv) links each file into a link tree;
    # the folder is our own package data, nothing a user can place a link in.
    app.router.add_get("/static/look.css", look_css)  # before the folder: the shared look
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=True)
    setup_course_routes(app)
    setup_me_routes(app)
    setup_action_routes(app)
    setup_admin_routes(app)
    setup_audit_routes(app)
    setup_assignment_routes(app)
    setup_assignment_action_routes(app)
    setup_grading_routes(app)
    setup_help_routes(app)
    setup_lti_link_routes(app)
    setup_new_course_routes(app)
    setup_lti_deep_link_routes(app)
    setup_lti_sync_routes(app)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        client = kube or await KubeClient.connect(kubeconfig)
        ctx.kube = client
        state = ClassState(client)
        # Live help cards and the grants that must end (web/help_monitor.py).
        monitor = HelpMonitor(redis_conn, state, ctx.extras[AUDIT], client, metrics)
        await state.start()
        await monitor.start()
        ctx.extras[STATE] = ctx.extras[DIRECTORY] = state
        metrics.attach(
            streams=state.notifier.streams,
            courses=lambda: [watch.status for watch in list(state.watches.values())],
            course_names=lambda: list(state.watches),
            platform=lambda: PlatformCollector(
                kube=lambda: (client,), redis=lambda: (redis_conn,), labels={"component": "web"},
                informers=lambda: [state.namespaces,
                                   *(i for watch in list(state.watches.values()) for i in watch.informers)]))
        store = StoreClient(settings.store_url, settings.store_secret,
                            "web") if settings.store_secret else None
        if store is not None:
            ctx.extras[STORE] = store
        # The LMS roster sync (web/lti_sync.py), when LTI is on.
        roster_sync = None
        if settings.lti_namespace:
            roster_sync = RosterSync(client, redis_conn, settings.lti_namespace, audit=ctx.extras[AUDIT],
                                     interval_minutes=settings.lti_sync_minutes,
                                     grade_seconds=settings.lti_grade_seconds)
            ctx.extras[LTI_SYNC] = roster_sync
            state.assignment_hooks.append(roster_sync.on_assignment)  # the grader's scores, at once
            roster_sync.start()
        try:
            yield
        finally:
            if roster_sync is not None:
                await roster_sync.stop()
            await monitor.stop()
            if store is not None:
                await store.close()
            await state.stop()
            if kube is None:
                await client.close()
            if owns_redis:
                await redis_conn.aclose()

    app.cleanup_ctx.append(resources)
    return app


def create_internal_app(app: web.Application) -> web.Application:
    """/healthz and /metrics of the web UI `app`, for a listener of their own
    (`USERLAND_INTERNAL_LISTEN`: probes and Prometheus), never reachable through the gateway."""
    internal = web.Application()
    internal[WEB] = app[WEB]
    internal[WEB_METRICS] = app[WEB_METRICS]
    internal.router.add_get("/healthz", healthz)
    internal.router.add_get("/metrics", metrics_page)
    return internal
