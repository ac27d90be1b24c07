"""Mount the auth routes on an aiohttp application (the gateway calls `setup_auth`).

Routes: `/auth/login`, `/auth/callback`, `/auth/logout` (GET confirm page, POST sign out),
`/auth/handoff` and `/auth/signed-out` (student origins, auth/handoff.py),
`/auth/verify` (forward-auth; the gateway mounts it on its internal listener instead),
`/auth/admin/bindings/{login}` (+ `/clear`), `/auth/account` (+ `/link-github`, `/link-lms`:
auth/account_page.py), and
`/auth/dev-login` only when `settings.dev_login` is on, and the LTI launch (`/lti/login`,
`/lti/launch`, `/lti/continue`, `/lti/jwks`: auth/lti.py) only when `settings.lti_namespace` is set.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import redis.asyncio
from aiohttp import web

from userland.auth import admin, dev_login, handoff, login, pages, session_routes
from userland.auth.account_link import LMS_LINKS, LmsLinks
from userland.auth.account_page import setup_account_routes
from userland.auth.bindings import LoginBindings
from userland.auth.context import AUTH, SESSION_COOKIE, AuthContext, current_session
from userland.auth.github import GitHubOAuth
from userland.auth.lti import setup_lti
from userland.auth.lti_context import LtiContext
from userland.auth.oauth_state import LoginRateLimiter, OAuthStateStore
from userland.auth.origin_sessions import OriginSessions
from userland.auth.pages import busy_page, unavailable_page
from userland.auth.rules.origins import PLATFORM_COOKIES
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.sessions import SessionStore, SessionStoreBusy, SessionStoreUnavailable
from userland.platform.model.addresses import client_address
from userland.platform.model.settings import Settings

__all__ = ["PLATFORM_COOKIES", "SESSION_COOKIE", "current_session", "setup_auth", "unavailable_page"]

GITHUB_TIMEOUT = aiohttp.ClientTimeout(total=15, connect=5)
LOGIN_RATE = web.AppKey("userland_login_rate", LoginRateLimiter)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger(__name__)


def rate_limited(handler: Handler) -> Handler:
    """Refuse (429) a client address that starts more logins a minute than allowed: each
    start stores a pending-login record, so anonymous clients must not make them at will."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        address = client_address(request.remote or "", request.headers.getall("X-Forwarded-For", []),
                                 request.config_dict[AUTH].settings.trusted_proxies)
        try:
            allowed = await request.config_dict[LOGIN_RATE].allow(address)
        except SessionStoreBusy:
            request.config_dict[AUTH].refusals["busy"] += 1
            return busy_page()
        except SessionStoreUnavailable:
            return unavailable_page()
        if not allowed:
            request.config_dict[AUTH].refusals["login_rate"] += 1
            log.info("login start refused: rate limit", extra={"event": "login.rate_limited",
                                                               "client": address})
            return _too_many_logins()
        return await handler(request)

    return wrapper


@functools.cache
def _too_many_logins_page() -> str:
    # Rendered once: a flood of login starts is answered with it thousands of times a second.
    return pages.error_page(429, "Too many sign-in attempts",
                            "Too many sign-ins were started from your network. "
                            "Please wait a minute and try again.", retry_url="/auth/login").text or ""


def _too_many_logins() -> web.Response:
    return web.Response(status=429, text=_too_many_logins_page(), content_type="text/html",
                        headers={**pages.NO_STORE, "Retry-After": "60"})


def _no_hosts() -> set[str]:
    return set()


def _no_namespaces(_host: str) -> tuple[str, ...]:
    return ()


def setup_auth(app: web.Application, settings: Settings, *, redis: redis.asyncio.Redis,
               store: SessionStore, template_hosts: Callable[[], set[str]] = _no_hosts,
               host_namespaces: Callable[[str], tuple[str, ...]] = _no_namespaces,
               forward_auth: bool = True,
               lti_setup: Callable[[LtiContext], None] | None = None) -> AuthContext:
    """Add the auth routes to `app`, and its own GitHub HTTP client to `app.cleanup_ctx`.
    `template_hosts()`: the hosts Template routes own now (the gateway's routing table);
    `host_namespaces(host)`: the courses whose Templates a host serves (for help grants).
    `forward_auth=False` leaves `/auth/verify` out (the gateway serves it on its internal
    listener only: `session_routes.verify`). `lti_setup(lti)`: the gateway gives the LTI
    launch its routing data (proxy/lti_courses.py) when LTI is on."""
    auth = AuthContext(settings=settings, store=store, states=OAuthStateStore(redis),
                       bindings=LoginBindings(redis),
                       origin_sessions=OriginSessions(redis, settings.session_ttl_seconds),
                       template_hosts=template_hosts, grants=GrantStore(redis),
                       host_namespaces=host_namespaces)
    app[AUTH] = auth
    app[LOGIN_RATE] = LoginRateLimiter(redis, settings.login_rate_per_minute)
    app[LMS_LINKS] = LmsLinks(redis)

    async def github_client(_: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(timeout=GITHUB_TIMEOUT) as http:
            auth.github = GitHubOAuth(settings, http)
            yield
            auth.github = None

    app.cleanup_ctx.append(github_client)
    app.router.add_get("/auth/login", rate_limited(login.login))
    app.router.add_get(login.CALLBACK_PATH, login.callback)
    app.router.add_get("/auth/logout", session_routes.logout_form)
    app.router.add_post("/auth/logout", session_routes.logout)
    app.router.add_get(handoff.HANDOFF_ROUTE, handoff.handoff)
    app.router.add_get(handoff.SIGNED_OUT_ROUTE, handoff.signed_out)
    if forward_auth:
        app.router.add_get("/auth/verify", session_routes.verify)
    app.router.add_get("/auth/admin/bindings/{login}", admin.get_binding)
    app.router.add_post("/auth/admin/bindings/{login}/clear", admin.clear_binding)
    setup_account_routes(app)
    if settings.lti_namespace:
        lti = setup_lti(app, settings, redis=redis, rate_limited=rate_limited)
        if lti_setup is not None:
            lti_setup(lti)
    if settings.dev_login:
        app.router.add_get(dev_login.DEV_LOGIN_PATH, rate_limited(dev_login.dev_login_form))
        app.router.add_post(dev_login.DEV_LOGIN_PATH, dev_login.dev_login_submit)
    return auth
