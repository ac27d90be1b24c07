"""What the auth routes share: settings, stores, the GitHub client, cookies, the session lookup.

One `AuthContext` per application, kept under `AUTH` (a `web.AppKey`); no module globals.
`current_session()` is the one way to ask "who is this?" on the platform host and is also what
the gateway calls there. Cookies are host-only (no Domain, ever) and, when Secure, named with
the `__Host-` prefix (auth/rules/origins.py keeps every name).
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import redis.exceptions
from aiohttp import web

from userland.auth import pages
from userland.auth.bindings import LoginBindings
from userland.auth.github import GitHubOAuth
from userland.auth.oauth_state import OAuthStateStore
from userland.auth.origin_sessions import OriginSessions
from userland.auth.rules.origins import (
    SESSION_COOKIE_BASE,
    CookieNames,
    cookie_names,
    port_suffix,
    student_origin,
)
from userland.auth.rules.redirects import safe_next
from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.sessions import (
    Session,
    SessionStore,
    SessionStoreBusy,
    SessionStoreUnavailable,
    store_error,
)
from userland.platform.model.grants import Grant
from userland.platform.model.settings import Settings

log = logging.getLogger(__name__)

# The session cookie's name on local http; `AuthContext.cookies.session` is the one in use.
SESSION_COOKIE = SESSION_COOKIE_BASE
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SessionLookup = Callable[[web.Request], Awaitable[Session | None]]


@dataclass
class AuthContext:
    settings: Settings
    store: SessionStore
    states: OAuthStateStore
    bindings: LoginBindings
    origin_sessions: OriginSessions
    # The hosts Template routes own (`ide.example.edu`); students' origins are their subdomains.
    template_hosts: Callable[[], set[str]]
    github: GitHubOAuth | None = None  # set while the application runs (cleanup_ctx)
    # The gateway's session lookup (its cache, negative cache and anonymous share: proxy/
    # session_cache.py), so that the auth routes look sessions up the way every request does.
    session_lookup: SessionLookup | None = None
    # What the auth routes did, for the gateway's /metrics (plain counts: auth has no Prometheus):
    # sign-ins by outcome, and refusals by reason (proxy/metrics.py REFUSALS).
    sign_ins: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    # Help grants (platform/model/grants.py), and the courses (namespaces) whose Templates a host
    # serves (the gateway's routing table): a member of staff's handoff to a student's origin.
    grants: GrantStore | None = None
    host_namespaces: Callable[[str], tuple[str, ...]] = lambda _host: ()

    async def staff_grant(self, owner: str, staff: str, template_host: str) -> Grant | None:
        """A live grant letting `staff` into `owner`'s environments served on `template_host`."""
        if self.grants is None:
            return None
        try:
            for course in self.host_namespaces(template_host):
                grant = await self.grants.live_for(course, owner, staff)
                if grant is not None:
                    return grant
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc  # fail closed: the handoff answers 503
        return None

    @property
    def cookies(self) -> CookieNames:
        return cookie_names(self.settings.cookie_secure)

    @property
    def proto(self) -> str:
        return "http" if self.settings.public_url.startswith("http://") else "https"

    def own_origin(self, login: str, template_host: str) -> str:
        """`login`'s origin on a Template host, on the platform's port."""
        return student_origin(self.proto, login, template_host, port_suffix(self.settings.public_url))

    def own_origins(self, login: str) -> list[str]:
        return [self.own_origin(login, host) for host in sorted(self.template_hosts())]

    def safe_next(self, target: str | None) -> str:
        return safe_next(target, public_url=self.settings.public_url, template_hosts=self.template_hosts)

    def public_origin(self, request: web.Request) -> str:
        """The platform's own origin; the request's when no public URL is configured."""
        return self.settings.public_url or str(request.url.origin())

    def set_session_cookie(self, response: web.StreamResponse, cookie_id: str) -> None:
        response.set_cookie(self.cookies.session, cookie_id, max_age=self.settings.session_ttl_seconds,
                            path="/", secure=self.settings.cookie_secure, httponly=True, samesite="Lax")

    def delete_session_cookie(self, response: web.StreamResponse) -> None:
        response.del_cookie(self.cookies.session, path="/", secure=self.settings.cookie_secure,
                            httponly=True, samesite="Lax")

    @property
    def _nonce_path(self) -> str:
        # `__Host-` requires Path=/. Without the prefix (local http) it only has to reach /auth/.
        return "/" if self.settings.cookie_secure else "/auth/"

    def set_nonce_cookie(self, response: web.StreamResponse, nonce: str) -> None:
        # Host-only and, when Secure, `__Host-`: a student origin on a sibling host could
        # otherwise plant its own login's nonce in a victim's browser (Domain=<parent>) and
        # send the victim to that login's callback, signing them in as the attacker.
        response.set_cookie(self.cookies.nonce, nonce, max_age=self.states.ttl, path=self._nonce_path,
                            secure=self.settings.cookie_secure, httponly=True, samesite="Lax")

    def delete_nonce_cookie(self, response: web.StreamResponse) -> None:
        response.del_cookie(self.cookies.nonce, path=self._nonce_path, secure=self.settings.cookie_secure,
                            httponly=True, samesite="Lax")

    def nonce_cookie(self, request: web.Request) -> str | None:
        return request.cookies.get(self.cookies.nonce)


AUTH = web.AppKey("userland_auth", AuthContext)


def auth_context(request: web.Request) -> AuthContext:
    try:
        return request.config_dict[AUTH]
    except KeyError:
        raise RuntimeError("setup_auth() was not called on this application") from None


def session_cookie_id(request: web.Request) -> str | None:
    return request.cookies.get(auth_context(request).cookies.session)


async def current_session(request: web.Request) -> Session | None:
    """The session of the request's platform cookie, or None; raises SessionStoreUnavailable
    (or SessionStoreBusy)."""
    auth = auth_context(request)
    if auth.session_lookup is not None:
        return await auth.session_lookup(request)
    cookie_id = session_cookie_id(request)
    if not cookie_id:
        return None
    return await auth.store.load(cookie_id)


def redirect(location: str, status: int = 302) -> web.Response:
    return web.Response(status=status, headers={"Location": location, **pages.NO_STORE})


def fail_closed(handler: Handler) -> Handler:
    """Map an unreachable store to a 503 page: never let a request through, never a traceback.
    A store this process could not get a connection to in time (busy) is a 429, not a 503."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except SessionStoreBusy:
            log.info("session store busy", extra={"event": "store.busy", "path": request.path})
            auth_context(request).refusals["busy"] += 1
            return pages.busy_page()
        except SessionStoreUnavailable as exc:
            log.warning("session store unavailable", extra={"path": request.path, "error": str(exc)})
            return pages.unavailable_page()

    return wrapper
