"""What the auth routes share: settings, stores, the GitHub client, cookies, the session lookup.

One `AuthContext` per application, kept under `AUTH` (a `web.AppKey`); no module globals.
`current_session()` is the one way to ask "who is this?" and is also what the gateway calls.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from userland.auth import pages
from userland.auth.bindings import LoginBindings
from userland.auth.github import GitHubOAuth
from userland.auth.oauth_state import NONCE_COOKIE, OAuthStateStore
from userland.auth.redirects import safe_next
from userland.platform.sessions import Session, SessionStore, SessionStoreUnavailable
from userland.platform.settings import Settings

log = logging.getLogger(__name__)

SESSION_COOKIE = "userland_session"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class AuthContext:
    settings: Settings
    store: SessionStore
    states: OAuthStateStore
    bindings: LoginBindings
    allowed_hosts: Callable[[], set[str]]
    github: GitHubOAuth | None = None  # set while the application runs (cleanup_ctx)

    def safe_next(self, target: str | None) -> str:
        return safe_next(target, public_url=self.settings.public_url,
                         cookie_domain=self.settings.cookie_domain, allowed_hosts=self.allowed_hosts)

    def public_origin(self, request: web.Request) -> str:
        """The platform's own origin; the request's when no public URL is configured."""
        return self.settings.public_url or str(request.url.origin())

    def set_session_cookie(self, response: web.StreamResponse, cookie_id: str) -> None:
        response.set_cookie(SESSION_COOKIE, cookie_id, max_age=self.settings.session_ttl_seconds,
                            path="/", domain=self.settings.cookie_domain or None,
                            secure=self.settings.cookie_secure, httponly=True, samesite="Lax")

    def delete_session_cookie(self, response: web.StreamResponse) -> None:
        response.del_cookie(SESSION_COOKIE, path="/", domain=self.settings.cookie_domain or None,
                            secure=self.settings.cookie_secure, httponly=True, samesite="Lax")

    def set_nonce_cookie(self, response: web.StreamResponse, nonce: str) -> None:
        # Host-only and limited to /auth/: it only has to reach the callback or the form post.
        response.set_cookie(NONCE_COOKIE, nonce, max_age=self.states.ttl, path="/auth/",
                            secure=self.settings.cookie_secure, httponly=True, samesite="Lax")

    def delete_nonce_cookie(self, response: web.StreamResponse) -> None:
        response.del_cookie(NONCE_COOKIE, path="/auth/", secure=self.settings.cookie_secure,
                            httponly=True, samesite="Lax")


AUTH = web.AppKey("userland_auth", AuthContext)


def auth_context(request: web.Request) -> AuthContext:
    try:
        return request.config_dict[AUTH]
    except KeyError:
        raise RuntimeError("setup_auth() was not called on this application") from None


async def current_session(request: web.Request) -> Session | None:
    """The session of the request's cookie, or None; raises SessionStoreUnavailable."""
    cookie_id = request.cookies.get(SESSION_COOKIE)
    if not cookie_id:
        return None
    return await auth_context(request).store.load(cookie_id)


def redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location, **pages.NO_STORE})


def fail_closed(handler: Handler) -> Handler:
    """Map an unreachable store to a 503 page: never let a request through, never a traceback."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except SessionStoreUnavailable as exc:
            log.warning("session store unavailable", extra={"path": request.path, "error": str(exc)})
            return pages.unavailable_page()

    return wrapper
