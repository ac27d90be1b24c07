"""Mount the auth routes on an aiohttp application (the gateway calls `setup_auth`).

Routes: `/auth/login`, `/auth/callback`, `/auth/logout` (GET confirm page, POST sign out),
`/auth/verify` (forward-auth), `/auth/admin/bindings/{login}` (+ `/clear`), and
`/auth/dev-login` only when `settings.dev_login` is on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import aiohttp
import redis.asyncio
from aiohttp import web

from userland.auth import admin, dev_login, login, session_routes
from userland.auth.bindings import LoginBindings
from userland.auth.context import AUTH, SESSION_COOKIE, AuthContext, current_session
from userland.auth.github import GitHubOAuth
from userland.auth.oauth_state import OAuthStateStore
from userland.auth.pages import unavailable_page
from userland.platform.sessions import SessionStore
from userland.platform.settings import Settings

__all__ = ["SESSION_COOKIE", "current_session", "setup_auth", "unavailable_page"]

GITHUB_TIMEOUT = aiohttp.ClientTimeout(total=15, connect=5)


def _no_hosts() -> set[str]:
    return set()


def setup_auth(app: web.Application, settings: Settings, *, redis: redis.asyncio.Redis,
               store: SessionStore, allowed_hosts: Callable[[], set[str]] = _no_hosts) -> None:
    """Add the auth routes to `app`, and its own GitHub HTTP client to `app.cleanup_ctx`."""
    auth = AuthContext(settings=settings, store=store, states=OAuthStateStore(redis),
                       bindings=LoginBindings(redis), allowed_hosts=allowed_hosts)
    app[AUTH] = auth

    async def github_client(_: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(timeout=GITHUB_TIMEOUT) as http:
            auth.github = GitHubOAuth(settings, http)
            yield
            auth.github = None

    app.cleanup_ctx.append(github_client)
    app.router.add_get("/auth/login", login.login)
    app.router.add_get(login.CALLBACK_PATH, login.callback)
    app.router.add_get("/auth/logout", session_routes.logout_form)
    app.router.add_post("/auth/logout", session_routes.logout)
    app.router.add_get("/auth/verify", session_routes.verify)
    app.router.add_get("/auth/admin/bindings/{login}", admin.get_binding)
    app.router.add_post("/auth/admin/bindings/{login}/clear", admin.clear_binding)
    if settings.dev_login:
        app.router.add_get(dev_login.DEV_LOGIN_PATH, dev_login.dev_login_form)
        app.router.add_post(dev_login.DEV_LOGIN_PATH, dev_login.dev_login_submit)
