"""Admin views of login-id bindings: read one (a page with the release form for a browser, JSON
otherwise), or clear one (CSRF-protected form post).

Clearing lets the next account that signs in with that name claim it; an admin does this
after checking that a refused login really is the rightful owner (for example after the
previous holder of the name renamed away).
"""

from __future__ import annotations

import hmac
import logging
from datetime import UTC, datetime

from aiohttp import web

from userland.auth import pages
from userland.auth.context import auth_context, current_session, fail_closed
from userland.platform.clients.sessions import Session
from userland.platform.model import naming

log = logging.getLogger(__name__)


async def _admin(request: web.Request) -> Session | None:
    session = await current_session(request)
    return session if session is not None and session.role == "admin" else None


@fail_closed
async def get_binding(request: web.Request) -> web.StreamResponse:
    admin = await _admin(request)
    if admin is None:
        return web.json_response({"error": "an admin session is required"}, status=403,
                                 headers=pages.NO_STORE)
    try:
        login = naming.normalize_login(request.match_info["login"])
    except naming.InvalidName:
        return web.json_response({"error": "not a GitHub login"}, status=400, headers=pages.NO_STORE)
    binding = await auth_context(request).bindings.get(login)
    if "text/html" in request.headers.get("Accept", ""):
        # The web UI's admin page sends its look-up here: the form carries this session's token.
        bound_at = "" if binding is None else datetime.fromtimestamp(binding.bound_at, UTC).strftime(
            "%Y-%m-%d %H:%M UTC")
        return pages.render("binding.html", title=f"GitHub account of {login}", login=login,
                            github_id=None if binding is None else binding.github_id, bound_at=bound_at,
                            csrf=admin.csrf)
    if binding is None:
        return web.json_response({"login": login, "github_id": None}, status=404, headers=pages.NO_STORE)
    return web.json_response({"login": binding.login, "github_id": binding.github_id,
                              "bound_at": binding.bound_at}, headers=pages.NO_STORE)


@fail_closed
async def clear_binding(request: web.Request) -> web.StreamResponse:
    admin = await _admin(request)
    if admin is None:
        return pages.error_page(403, "Admins only", "Only an admin can release a name.")
    form = await request.post()
    if not hmac.compare_digest(str(form.get("csrf") or ""), admin.csrf):
        return pages.error_page(403, "Form expired", "This form has expired. Reload the page and try again.")
    try:
        login = naming.normalize_login(request.match_info["login"])
    except naming.InvalidName:
        return pages.error_page(400, "Not a GitHub login", "That is not a valid GitHub login.")
    removed = await auth_context(request).bindings.clear(login)
    log.info("binding cleared", extra={"event": "binding.cleared", "login": login,
                                       "admin": admin.login, "existed": removed})
    message = (f"{login} is no longer bound; the next GitHub account to sign in with that name "
               "will be." if removed else f"{login} was not bound to any account.")
    return pages.render("message.html", title="Name released", message=message, link_url="/admin",
                        link_text="Back to the admin page")
