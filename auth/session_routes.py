"""Endpoints about an existing session: sign out, and `/auth/verify` for forward-auth.

Sign-out (a POST with the session's CSRF token, from the platform's own origin) deletes the
platform session and every origin session made from it, server side. Then the browser is sent
through each of the student's origins (`<origin>/__userland/signed-out`, answered by the gateway
with `Clear-Site-Data` and a redirect onwards) and ends at `/auth/signed-out`, which clears the
platform origin's data. Top-level redirects, because Chromium honours Clear-Site-Data on each
navigation response, while subresource or iframe responses may be partitioned or ignored.
"""

from __future__ import annotations

import hmac
import logging
from urllib.parse import urlencode

from aiohttp import web

from userland.auth import pages
from userland.auth.context import auth_context, current_session, fail_closed, redirect, session_cookie_id
from userland.auth.rules.origins import SIGNED_OUT_PATH
from userland.platform.model.identity import USER_HEADER

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
        if session_cookie_id(request) is not None:
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
        cookie_id = session_cookie_id(request) or ""
        await auth.store.clear(cookie_id)
        visited = await auth.origin_sessions.end_all(cookie_id)
        # The origins it signed in to, and every origin the student has (data from an expired
        # session is cleared as well).
        origins = tuple(dict.fromkeys((*visited, *auth.own_origins(session.login))))
        log.info("logout", extra={"event": "logout", "login": session.login, "origins": len(origins)})
        chain = await auth.origin_sessions.start_signout(session.login.lower(), origins)
        first = (f"{origins[0]}{SIGNED_OUT_PATH}?" + urlencode({"chain": chain, "step": "0"}) if origins
                 else "/auth/signed-out?" + urlencode({"chain": chain}))
        response = redirect(first, status=303)
    else:
        response = redirect("/", status=303)
    auth.delete_session_cookie(response)
    return response
