"""The request path: who is asking, which environment is theirs, and forwarding to it.

`Gateway` holds what every request needs (settings, the routing cache, the pooled upstream
client, pages, metrics) and nothing per user: sessions live in Redis, routing data comes from
watches, so any number of gateway replicas can serve side by side.

For a Template route: session (one Redis round trip) -> the user's Userland in memory ->
its Service in memory -> forward. The user comes only from the session, never from the
request, so one student's session can only ever reach that student's own environment.

On a student's origin (`alice.ide.example.edu`) the session is that origin's own (auth/
origin_sessions.py), and it is served only to its owner: the origin names the owner, the session
names the user, and they must match. Without a session there, a navigation goes to the
platform's `/auth/handoff`, which signs the origin in (or shows someone else a 403 page with a
link to their own). The bare Template host (`ide.example.edu`) serves nothing: it sends the
student on through the same handoff to their own origin.

Its answers that are not forwarding live beside it: proxy/waiting.py (an environment asleep or
starting), proxy/help_ended.py (a member of staff whose help grant has ended); what kind of
request it is and what it marks on one, proxy/request_kinds.py.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

import userland.proxy.rules.decision as decision
from userland.auth.origin_sessions import OriginSession
from userland.auth.rules.origins import (
    PLATFORM_COOKIES,
    cookie_names,
    port_suffix,
    request_origin,
    student_origin,
)
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.sessions import Session, SessionStoreBusy, SessionStoreUnavailable
from userland.platform.model import identity, naming
from userland.platform.model.grants import Grant
from userland.platform.model.settings import Settings
from userland.proxy.accesslog import LOGIN_KEY
from userland.proxy.activity import ActivityTracker, counts_as_use, frame_counts
from userland.proxy.grant_watch import GrantWatch, LiveGrants
from userland.proxy.help_ended import HelpEnded
from userland.proxy.live import SESSION_DIGEST, LiveConnections, cookie_digest
from userland.proxy.metrics import GatewayMetrics
from userland.proxy.pages import Pages
from userland.proxy.repeated_cookies import RepeatedCookies
from userland.proxy.request_kinds import FORWARDED, UPSTREAM_FAILED, is_background, wants_html
from userland.proxy.routes_cache import RoutingCache, UserlandState
from userland.proxy.rules.headers import upstream_request_header_list
from userland.proxy.rules.routing import TemplateRoute, lost_to, request_host, upstream_url
from userland.proxy.self_service import self_service
from userland.proxy.session_cache import SessionLookup
from userland.proxy.upstream import UpstreamError, UpstreamPool, forward_http, target_url
from userland.proxy.waiting import Waiting
from userland.proxy.websocket import (
    WebSocketPair,
    WebSocketQuota,
    forward_websocket,
    is_websocket_upgrade,
)

log = logging.getLogger(__name__)


# A Service routes to its Pod a moment after the Pod is Ready (kube-proxy rewrites its rules
# once the Endpoints change; a busy node takes seconds). A refused connection that soon after
# Ready is an environment still starting, so the student gets the starting page (which reloads
# itself), not "not answering"; later, a refusal is a failure and says so.
JUST_READY_SECONDS = 30.0

# Worked out on every request otherwise; pure, and a process serves a bounded set of students.
_service_name = functools.lru_cache(maxsize=8192)(naming.service_name)


@functools.lru_cache(maxsize=8192)
def _env_identity(login: str) -> identity.Identity:
    return identity.for_audience(login, identity.AUDIENCE_ENV)


@functools.lru_cache(maxsize=1024)
def _staff_identity(login: str, owner: str, course_role: str) -> identity.Identity:
    return identity.for_staff(login, owner, course_role)


class Gateway:
    def __init__(self, settings: Settings, *, routes: RoutingCache, kube: KubeClient,
                 platform_sessions: SessionLookup[Session], origin_sessions: SessionLookup[OriginSession],
                 metrics: GatewayMetrics, activity: ActivityTracker | None = None,
                 grants: LiveGrants | None = None) -> None:
        self.settings = settings
        self.routes = routes
        self.kube = kube
        # Typed lookups (cached: proxy/session_cache.py): the platform host's sessions, and
        # student origins' own sessions, each bound to one origin (auth/origin_sessions.py).
        self.platform_sessions = platform_sessions
        self.origin_sessions = origin_sessions
        # Every platform cookie is stripped from what goes upstream and from what comes back.
        self.session_cookie = PLATFORM_COOKIES
        self.cookie_names = cookie_names(settings.cookie_secure)  # the names this gateway reads
        # A request carrying one of them twice is refused (proxy/repeated_cookies.py).
        self.repeated_cookies = RepeatedCookies(self.cookie_names)
        self.metrics = metrics
        self.pages = Pages(settings.public_url)
        public = urlsplit(settings.public_url)
        self.public_host = request_host(public.netloc)
        # The scheme clients use, as the deployment publishes it (TLS usually ends before us).
        self.proto = public.scheme or "http"
        self.port = port_suffix(settings.public_url)
        self._origins: dict[str, str | None] = {}  # origin_of's memory
        self._visitors: dict[int, tuple[object, decision.Visitor]] = {}  # _visitor's memory
        self.websockets: set[WebSocketPair] = set()
        self.websocket_quota = WebSocketQuota(settings.max_websockets_per_user)
        # Forwarded requests by session: a session that ends closes them (proxy/live.py).
        self.live = LiveConnections()
        # Requests being handled (WebSockets included), for a drain that waits for them.
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self._client: aiohttp.ClientSession | None = None
        self._pool: UpstreamPool | None = None
        # Students' use of their environments, for sleeping and waking (proxy/activity.py).
        self.activity = activity or ActivityTracker(settings, kube, None)
        # Staff connections let in by help grants, closed when their grant ends (grant_watch.py).
        self.grant_watch = GrantWatch(grants, on_close=metrics.help_connections_closed)
        self.grants = grants
        # Staff whose help grant has ended (proxy/help_ended.py); environments not answering yet
        # (proxy/waiting.py).
        self.help_ended = HelpEnded(settings, self.pages, self.cookie_names, grants, self.handoff_url)
        self.waiting = Waiting(routes, self.pages, metrics, self.activity)

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

    def origin_of(self, host_header: str) -> str | None:
        """`request_origin` for this gateway's scheme, remembered per Host value (a browser sends
        the same few; parsing one cost a few microseconds on every request)."""
        try:
            return self._origins[host_header]
        except KeyError:
            pass
        origin = request_origin(self.proto, host_header)
        if len(host_header) <= 255:
            if len(self._origins) >= 4096:
                self._origins.clear()
            self._origins[host_header] = origin
        return origin

    def login_url(self, request: web.Request) -> str:
        original = f"{self.proto}://{request.host}{request.raw_path}"
        return f"{self.settings.public_url}/auth/login?next={quote(original, safe='')}"

    def handoff_url(self, request: web.Request) -> str:
        """The platform's handoff for this request's origin, coming back to the same path."""
        origin = self.origin_of(request.host) or ""
        return f"{self.settings.public_url}/auth/handoff?" + urlencode(
            {"origin": origin, "next": request.raw_path})

    def own_origin(self, login: str, template_host: str) -> str:
        return student_origin(self.proto, login, template_host, self.port)

    def bare_template_host(self, request: web.Request) -> web.StreamResponse:
        """`ide.example.edu` itself: on to the student's own origin (the platform knows who)."""
        if request.method not in ("GET", "HEAD") or is_websocket_upgrade(request):
            return self.pages.error(404, "Open your own address",
                                    "Each student's environment has its own address; open this site's "
                                    "address in the browser to be sent to yours.")
        return web.Response(status=302, headers={"Location": self.handoff_url(request),
                                                 "Cache-Control": "no-store"})

    async def _platform_session(self, request: web.Request) -> Session | None:
        session = await self.platform_sessions(request)
        if session is not None:
            request[LOGIN_KEY] = session.login.lower()
        return session

    async def forward(self, request: web.Request, base_url: str,
                      user: identity.Identity | None,
                      on_client_data: Callable[[bytes | str], None] | None = None,
                      on_refused: Callable[[], Awaitable[web.StreamResponse]] | None = None,
                      failed: Callable[[str], web.StreamResponse] | None = None,
                      grant: Grant | None = None) -> web.StreamResponse:
        """Send `request` to `base_url` as `user`; `on_refused` answers instead of the 502 page
        when the upstream refuses the connection, `failed(kind)` instead of the environment's
        502/504 pages (the platform host's own)."""
        request[FORWARDED] = True
        websocket = is_websocket_upgrade(request)
        headers = upstream_request_header_list(
            request.headers, user, secret=self.settings.identity_secret,
            client_ip=request.remote or "", proto=self.proto, host=request.host,
            session_cookie=self.session_cookie, websocket=websocket, raw=request.raw_headers,
        )
        owner = user.login if websocket and user is not None else None
        if owner is not None and not self.websocket_quota.acquire(owner):
            self.metrics.refused("websockets")
            log.info("websocket refused: too many open", extra={"user": owner,
                                                                "limit": self.websocket_quota.limit})
            return self.pages.error(429, "Too many open connections",
                                    "Close some tabs or windows of this environment and try again.")
        tracked = self.live.add(request)
        if grant is not None:
            self.grant_watch.add(request, grant)  # closed when the grant ends (proxy/grant_watch.py)
        try:
            if websocket:
                return await forward_websocket(request, self.client,
                                               target_url(base_url, request.raw_path),
                                               CIMultiDict(headers), register=self._ws_opened,
                                               unregister=self._ws_closed, on_client_data=on_client_data)
            return await forward_http(request, self.pool, base_url, headers,
                                      session_cookie=self.session_cookie)
        except UpstreamError as err:
            self.metrics.upstream_error(err.kind)
            log.info("upstream failed", extra={"upstream": str(URL(base_url).origin()),
                                               "kind": err.kind, "path": request.path})
            if err.response is not None:
                return err.response
            if err.kind == "refused" and on_refused is not None:
                return await on_refused()
            request[UPSTREAM_FAILED] = True
            if failed is not None:
                return failed(err.kind)
            return self.pages.gateway_timeout() if err.kind == "timeout" else self.pages.bad_gateway()
        finally:
            if tracked is not None:
                self.live.discard(tracked, request)
            if grant is not None:
                self.grant_watch.discard(request, grant)
            if owner is not None:
                self.websocket_quota.release(owner)

    def _ws_opened(self, pair: WebSocketPair) -> None:
        self.websockets.add(pair)
        self.metrics.websocket_opened()

    def _ws_closed(self, pair: WebSocketPair) -> None:
        self.websockets.discard(pair)
        self.metrics.websocket_closed()

    # -- the two kinds of traffic

    async def handle_template(self, request: web.Request, route: TemplateRoute, *,
                              owner: str | None = None) -> web.StreamResponse:
        """A Template route: on `owner`'s origin (host routes), or on the platform's host
        (path routes, `owner` None). The decision is proxy/rules/decision.py's; this gathers its
        facts and answers it."""
        websocket = is_websocket_upgrade(request)
        try:
            session: Session | OriginSession | None = await (
                self.origin_sessions(request) if owner is not None else self.platform_sessions(request))
        except SessionStoreBusy:
            self.metrics.refused("busy")
            return self.pages.busy()
        except SessionStoreUnavailable:
            return self.pages.unavailable()
        here = self.origin_of(request.host) if owner is not None else None
        if session is None:
            visitor = None
            # What kind of request it is matters only without a session (which page to answer).
            navigation, background = wants_html(request) and not websocket, is_background(request)
        else:
            visitor, navigation, background = self._visitor(request, session), False, False
        embedded = False
        if visitor is not None and visitor.grant is not None:  # staff: where the request comes from
            headers = request.headers
            embedded = decision.embedded_elsewhere(
                headers.get("Sec-Fetch-Site"), headers.get("Sec-Fetch-Mode"), headers.get("Sec-Fetch-Dest"))
        admission = decision.admit(visitor, owner=owner, here=here, navigation=navigation,
                                   background=background, namespace=route.namespace, now=time.time(),
                                   embedded_elsewhere=embedded)
        if not isinstance(admission, decision.Admitted):
            if admission is decision.Outcome.GRANT_ENDED:
                assert visitor is not None and owner is not None and isinstance(session, OriginSession)
                self.metrics.help_request("ended")
                return await self.help_ended.answer(request, visitor.login, owner, route, session.grant_id)
            return self._refusal(request, admission, route, visitor, owner)
        login = admission.login  # whose environment: the visitor's own, or (staff) the owner's
        grant = admission.staff
        if grant is not None:
            self.metrics.help_request("admitted")
        userland = self.routes.userland(route.namespace, route.template, login)
        base = None if userland is None or not userland.ready else self.environment_url(route, login)
        lost = userland is None and any(
            self.routes.userland(r.namespace, r.template, login) is not None
            for r in lost_to(route, self.routes.routes))
        outcome = decision.serve(userland, has_address=base is not None,
                                 self_service=route.self_service and grant is None, lost_has_userland=lost)
        name = route.display_name or route.template
        if outcome is decision.Outcome.FORWARD:
            assert userland is not None and base is not None
            return await self._forward_to_environment(request, route, userland, base, login, websocket,
                                                      grant)
        if grant is not None and outcome in (decision.Outcome.FORBIDDEN, decision.Outcome.UNREACHABLE):
            assert visitor is not None
            self.metrics.refused("no_environment")
            return self.pages.help_nothing_here(name, visitor.login, login)
        if outcome is decision.Outcome.UNREACHABLE:
            # Theirs is a Template this address is not routed to (a collision).
            lost_route = next(r for r in lost_to(route, self.routes.routes)
                              if self.routes.userland(r.namespace, r.template, login) is not None)
            return self.pages.unreachable(lost_route.display_name or lost_route.template, login)
        if outcome is decision.Outcome.SELF_SERVICE:
            assert session is not None
            return await self_service(request, route, login, session.csrf, pages=self.pages, kube=self.kube)
        if outcome is decision.Outcome.FORBIDDEN:
            self.metrics.refused("no_environment")
            return self.pages.forbidden(name, login, f"{self.settings.public_url}/auth/logout")
        assert userland is not None
        if outcome is decision.Outcome.SUSPENDED:
            return self.pages.suspended(name, login, route.storage)
        if outcome is decision.Outcome.NOT_RUNNING:
            return await self.waiting.not_running(request, route, userland, name, login, websocket=websocket)
        # STARTING: Ready, but its address is not here yet (the watch of its Service lags a
        # moment): still starting, as far as the student can tell.
        return await self.waiting.wait_page(request, userland, name, login, websocket=websocket,
                                            asleep=False, storage=route.storage)

    def _visitor(self, request: web.Request, session: Session | OriginSession) -> decision.Visitor:
        # The session caches hand out the same object for a cookie for up to a second: its
        # Visitor is remembered for it (by identity; a new session object is a new entry).
        memo = self._visitors.get(id(session))
        if memo is not None and memo[0] is session:
            request[LOGIN_KEY] = memo[1].login
            return memo[1]
        login = request[LOGIN_KEY] = session.login.lower()
        if not isinstance(session, OriginSession):
            visitor = decision.Visitor(login)  # the platform's own session is bound to no origin
        elif not session.grant_bound:
            visitor = decision.Visitor(login, session.origin)
        else:
            visitor = decision.Visitor(login, session.origin, grant=session.grant,
                                       grant_ended=session.grant_ended)
        if len(self._visitors) >= 4096:
            self._visitors.clear()
        self._visitors[id(session)] = (session, visitor)
        return visitor

    def _refusal(self, request: web.Request, outcome: decision.Outcome, route: TemplateRoute,
                 visitor: decision.Visitor | None, owner: str | None) -> web.StreamResponse:
        no_store = {"Cache-Control": "no-store"}
        if visitor is None:
            self.metrics.refused("no_session")
        if outcome is decision.Outcome.HANDOFF:
            return web.Response(status=302, headers={"Location": self.handoff_url(request), **no_store})
        if outcome is decision.Outcome.SIGNED_OUT_BACKGROUND:
            return self.pages.signed_out_background()
        if outcome is decision.Outcome.LOGIN_REDIRECT:
            return web.Response(status=302, headers={"Location": self.login_url(request), **no_store})
        if outcome is decision.Outcome.NOT_YOURS:
            assert visitor is not None and owner is not None and route.host is not None
            self.metrics.refused("not_yours")
            own = self.own_origin(visitor.login, route.host) + "/"
            return self.pages.not_yours(visitor.login, own, owner)
        if outcome is decision.Outcome.STAFF_EMBEDDED:
            assert visitor is not None
            self.metrics.help_request("embedded")
            log.info("staff request from another site refused", extra={
                "event": "help.embedded", "login": visitor.login, "path": request.path,
                "site": request.headers.get("Sec-Fetch-Site", ""),
                "dest": request.headers.get("Sec-Fetch-Dest", "")})
            return self.pages.help_embedded(visitor.login)
        return web.Response(status=401, text="login required\n", headers=no_store)

    def _forward_to_environment(self, request: web.Request, route: TemplateRoute,
                                userland: UserlandState, base: str, login: str,
                                websocket: bool, grant: Grant | None = None) -> Awaitable[web.StreamResponse]:
        """Forwarding to `login`'s environment, noting use of it (sleep and wake); `grant`: the
        help grant a member of staff came in by (the environment is told who they are, signed).
        Returns `forward`'s coroutine for the caller to await: no coroutine of its own per request."""
        name = route.display_name or route.template
        key, idle = (userland.namespace, userland.name), route.idle_timeout_seconds
        on_data: Callable[[bytes | str], None] | None = None
        if idle is None:
            pass  # it never sleeps: nothing to track
        elif websocket:
            activity = route.activity

            def on_data(data: bytes | str) -> None:
                if frame_counts(data, activity):
                    self.activity.touch(*key, idle)
        elif counts_as_use(request.method, request.path, route.activity):
            self.activity.touch(*key, idle)
        on_refused: Callable[[], Awaitable[web.StreamResponse]] | None = None
        if userland.ready_since is not None and time.time() - userland.ready_since < JUST_READY_SECONDS:
            async def on_refused() -> web.StreamResponse:
                return await self.waiting.wait_page(request, userland, name, login, websocket=websocket,
                                                    asleep=False, storage=route.storage)
        if grant is not None:
            user = _staff_identity(grant.staff, login, grant.role)
            return self.forward(request, base, user, on_data, on_refused, grant=grant)
        return self.forward(request, base, _env_identity(login), on_data, on_refused)

    def environment_url(self, route: TemplateRoute, login: str) -> str | None:
        """Where `login`'s environment of `route` answers, from the watched Service (None: not
        there yet). Never from the request: the Service's name derives from the login."""
        service_name = _service_name(route.template, login)
        service = self.routes.service(route.namespace, service_name)
        # The label check is defence in depth: the name is already derived from the login.
        if service is None or service.user != login:
            return None
        return upstream_url(self.settings.upstream_mode, service=service_name,
                            namespace=route.namespace, port=service.port or route.port,
                            cluster_domain=self.settings.cluster_domain,
                            annotation=service.upstream_annotation, cluster_ip=service.cluster_ip)

    async def handle_platform(self, request: web.Request) -> web.StreamResponse:
        """The platform's own host (not /auth/): the web UI, with the caller's identity if any."""
        try:
            session = await self._platform_session(request)
        except SessionStoreBusy:
            self.metrics.refused("busy")
            return self.pages.busy()
        except SessionStoreUnavailable:
            return self.pages.unavailable()
        user = None if session is None else identity.for_audience(
            session.login.lower(), identity.AUDIENCE_WEB, role=session.role, teams=session.teams,
            session=self._session_id(request))

        def failed(kind: str) -> web.StreamResponse:
            # Whoever is signed in here (a teacher on a course page, too) reads about the site,
            # not "your environment ... tell your instructor".
            if session is None:
                return self.pages.platform_unavailable(kind)
            return self.pages.platform_unavailable(kind, session.login.lower(), session.role)

        return await self.forward(request, self.settings.web_url, user, failed=failed)

    def _session_id(self, request: web.Request) -> str:
        """The signed-in session's id for the web UI (its form tokens end with the session): from
        the digest of the cookie it was found with (the session cache marks it)."""
        digest = request.get(SESSION_DIGEST)
        if digest is None:  # no session cache (tests of the proxy core)
            digest = cookie_digest(request.cookies.get(self.cookie_names.session, ""))
        return identity.session_id(digest, self.settings.identity_secret)
