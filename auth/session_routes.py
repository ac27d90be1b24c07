"""Endpoints about an existing session: sign out, and `/auth/verify` for forward-auth."""

from __future__ import annotations

import hmac
import logging

from aiohttp import web

from userland.auth import pages
from userland.auth.context import SESSION_COOKIE, auth_context, current_session, fail_closed, redirect
from userland.platform.identity import USER_HEADER

log = logging.getLogger(__name__)

ROLE_HEADER = "X-User-Role"


@fail_closed
async def verify(request: web.Request) -> web.StreamResponse:
    """ingress-nginx `auth-url`: 200 with `X-User` for a valid session, else 401."""
    session = await current_session(request)
    if session is None:
        return web.Response(status=401, text="not signed in", headers=pages.NO_STORE)
    return web.Response(status=200, text="ok", headers={
        USER_HEADER: session.login, ROLE_HEADER: session.role, **pages.NO_STORE})


@fail_closed
async def logout_form(request: web.Request) -> web.StreamResponse:
    session = await current_session(request)
    if session is None:
        response = pages.render("message.html", title="Signed out", message="You are not signed in.",
                                link_url="/", link_text="Continue")
        if SESSION_COOKIE in request.cookies:
            auth_context(request).delete_session_cookie(response)
        return response
    return pages.render("logout.html", title="Sign out", login=session.login, csrf=session.csrf)


@fail_closed
async def logout(request: web.Request) -> web.StreamResponse:
    auth = auth_context(request)
    session = await current_session(request)
    if session is not None:
        form = await request.post()
        if not hmac.compare_digest(str(form.get("csrf") or ""), session.csrf):
            return pages.error_page(403, "Form expired",
                                    "This sign-out form has expired. Please try again.")
        await auth.store.clear(request.cookies[SESSION_COOKIE])
        log.info("logout", extra={"event": "logout", "login": session.login})
    response = redirect("/")
    auth.delete_session_cookie(response)
    return response
