"""The development login: a local stand-in for GitHub that asks for a username.

Only mounted when `settings.dev_login` is true (the local `make run` setup); otherwise the
routes do not exist (404). `userland gateway` refuses to start with it next to GitHub
credentials, on a non-loopback address, with an https public URL or Secure cookies
(`refusal` below), and these routes answer loopback clients only (404 otherwise).
The form is protected like the OAuth flow: its hidden `state` is a
single-use Redis record bound to the browser by the nonce cookie. The GitHub id is derived
from the name (negative, so it can never equal a real GitHub id), and the role comes from the
login entries of the admin and instructor lists (there are no teams here).
"""

from __future__ import annotations

import hashlib
import logging
from urllib.parse import urlsplit

from aiohttp import web

from userland.auth import pages
from userland.auth.context import AuthContext, auth_context, fail_closed
from userland.auth.login import complete_login
from userland.auth.oauth_state import StateMismatch
from userland.auth.rules import roles
from userland.platform.model import naming
from userland.platform.model.addresses import is_loopback_host
from userland.platform.model.settings import Settings

log = logging.getLogger(__name__)


def refusal(settings: Settings, listen_host: str) -> str | None:
    """Why the development login must not run with these settings (one line), or None.

    It signs anyone in as any name, admins included: only a machine's own local setup may
    have it, never anything reachable from elsewhere or configured for production."""
    if not settings.dev_login:
        return None
    if settings.github_client_id or settings.github_client_secret:
        return "USERLAND_DEV_LOGIN=true cannot be used with GitHub credentials (USERLAND_GITHUB_CLIENT_*)"
    if not is_loopback_host(listen_host):
        return f"USERLAND_DEV_LOGIN=true needs a loopback --listen address, not {listen_host!r}"
    if urlsplit(settings.public_url).scheme == "https":
        return "USERLAND_DEV_LOGIN=true cannot be used with an https USERLAND_PUBLIC_URL"
    if settings.cookie_secure:
        return "USERLAND_DEV_LOGIN=true needs USERLAND_COOKIE_SECURE=false (a local HTTP setup)"
    return None


DEV_LOGIN_PATH = "/auth/dev-login"


def dev_github_id(login: str) -> int:
    """A deterministic id for a development login: negative, never a real GitHub id."""
    digest = hashlib.sha256(f"userland-dev-login:{login.lower()}".encode()).digest()
    return -1 - int.from_bytes(digest[:6], "big")


async def _form(auth: AuthContext, next_url: str, *, status: int = 200, login: str = "",
                problem: str = "") -> web.Response:
    pending = await auth.states.begin(next_url)
    response = pages.render("dev_login.html", status=status, title="Sign in (development)",
                            state=pending.state, login=login, problem=problem)
    auth.set_nonce_cookie(response, pending.nonce)
    return response


def _from_loopback(request: web.Request) -> bool:
    # The TCP peer, never a header: only this machine's own browser may use it.
    return is_loopback_host(request.remote or "")


def _not_here(request: web.Request) -> web.Response:
    log.warning("development login refused to a non-loopback client", extra={"event": "login.dev_refused"})
    return pages.error_page(404, "Not found", "There is no such page here.")


@fail_closed
async def dev_login_form(request: web.Request) -> web.StreamResponse:
    if not _from_loopback(request):
        return _not_here(request)
    auth = auth_context(request)
    return await _form(auth, auth.safe_next(request.query.get("next")))


@fail_closed
async def dev_login_submit(request: web.Request) -> web.StreamResponse:
    if not _from_loopback(request):
        return _not_here(request)
    auth = auth_context(request)
    form = await request.post()
    state, login = str(form.get("state") or ""), str(form.get("login") or "").strip()
    try:
        pending = await auth.states.finish(state, auth.nonce_cookie(request))
    except StateMismatch:
        response = pages.error_page(403, "Form expired", "This sign-in form has expired or was "
                                    "already used. Please open it again.", retry_url=DEV_LOGIN_PATH)
        auth.delete_nonce_cookie(response)
        return response
    try:
        login = naming.normalize_login(login)
    except naming.InvalidName:
        return await _form(auth, pending.next_url, status=400, login=login,
                           problem="Use 1-39 letters, digits or single hyphens.")
    member = roles.Membership(login=login)
    log.info("development login", extra={"event": "login.dev", "login": login})
    done = await complete_login(request, auth, login=login, github_id=dev_github_id(login),
                                role=roles.role_for(member, auth.settings), next_url=pending.next_url)
    auth.delete_nonce_cookie(done)
    return done
