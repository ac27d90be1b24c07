"""The account page on the platform host: `/auth/account` shows which sign-in doors a login has
(GitHub, the LMS) and offers to link the missing one; `POST /auth/account/link-github` and
`POST /auth/account/link-lms` start a link (each a form post with the session's CSRF token).
auth/account_link.py completes them; auth/rules/account_link.py decides.
"""

from __future__ import annotations

import hmac
import logging
from urllib.parse import urlencode

from aiohttp import web

from userland.auth import pages
from userland.auth.account_link import ACCOUNT_PATH, lms_links, reserved
from userland.auth.context import auth_context, current_session, fail_closed, redirect, session_cookie_id
from userland.auth.login import CALLBACK_PATH, github_client
from userland.auth.rules import account_link as rules
from userland.auth.rules import roles
from userland.platform.clients.sessions import Session
from userland.platform.model.keyspace import digest

log = logging.getLogger(__name__)

LINK_GITHUB_PATH = ACCOUNT_PATH + "/link-github"
LINK_LMS_PATH = ACCOUNT_PATH + "/link-lms"


def _sign_in() -> web.Response:
    return redirect("/auth/login?" + urlencode({"next": ACCOUNT_PATH}))


async def _doors(request: web.Request, login: str) -> rules.Doors:
    binding = await auth_context(request).bindings.get(login)
    return rules.doors(binding.github_id, binding.lti_subject) if binding else rules.doors(0, "")


async def _start(request: web.Request, want: str) -> Session | web.Response:
    """The session a link form was posted in, its CSRF token checked and the link `want` allowed
    for it; else the page to answer."""
    session = await current_session(request)
    if session is None:
        return pages.error_page(403, "Not signed in", "Sign in first, then link your account.",
                                retry_url=ACCOUNT_PATH)
    form = await request.post()
    if not hmac.compare_digest(str(form.get("csrf") or ""), session.csrf):
        return pages.error_page(403, "Form expired", "This form has expired. Reload the page and try again.")
    refusal = rules.start_link(want, role=session.role, login=session.login,
                               door=await _doors(request, session.login),
                               reserved=reserved(auth_context(request)))
    if refusal is not None:
        return pages.error_page(403, refusal.title, refusal.message, retry_url=ACCOUNT_PATH)
    return session


@fail_closed
async def account(request: web.Request) -> web.StreamResponse:
    session = await current_session(request)
    if session is None:
        return _sign_in()
    auth = auth_context(request)
    door = await _doors(request, session.login)
    names = reserved(auth)
    github_refusal = rules.start_link("github", role=session.role, login=session.login, door=door,
                                      reserved=names)
    lms_refusal = rules.start_link("lms", role=session.role, login=session.login, door=door,
                                   reserved=names)
    can_github = github_refusal is None and bool(auth.settings.github_client_id)
    note = "" if session.role == "student" else rules.NOT_STUDENT.message
    return pages.render("account.html", title="Your account", login=session.login,
                        via_lms=session.github_id == 0,
                        doors=door, can_link_github=can_github, can_link_lms=lms_refusal is None,
                        armed=lms_refusal is None and await lms_links(request).armed(session.login),
                        csrf=session.csrf, note=note)


@fail_closed
async def link_github(request: web.Request) -> web.StreamResponse:
    session = await _start(request, "github")
    if isinstance(session, web.Response):
        return session
    auth = auth_context(request)
    if not auth.settings.github_client_id:
        return pages.error_page(503, "GitHub sign-in is not configured",
                                "This site has no GitHub app configured, so there is nothing to link.")
    pending = await auth.states.begin(ACCOUNT_PATH, link=session.login,
                                      link_session=digest(session_cookie_id(request) or ""))
    url = github_client(auth).authorization_url(
        state=pending.state, verifier=pending.verifier,
        redirect_uri=auth.public_origin(request) + CALLBACK_PATH, scopes=roles.scopes(auth.settings))
    log.info("GitHub link started", extra={"event": "account.github_link_started", "login": session.login})
    response = redirect(url, status=303)
    auth.set_nonce_cookie(response, pending.nonce)
    return response


@fail_closed
async def link_lms(request: web.Request) -> web.StreamResponse:
    session = await _start(request, "lms")
    if isinstance(session, web.Response):
        return session
    await lms_links(request).arm(session.login, session.github_id, digest(session_cookie_id(request) or ""))
    log.info("LMS link armed", extra={"event": "account.lms_link_armed", "login": session.login})
    return pages.render("message.html", title="Now open Userland from your LMS",
                        message="Within 10 minutes, open Userland from your LMS course in this browser: "
                                f"your LMS account is then linked to {session.login}. Only an LMS account "
                                "that has not opened Userland before can be linked.",
                        link_url=ACCOUNT_PATH, link_text="Back to your account")


def setup_account_routes(app: web.Application) -> None:
    app.router.add_get(ACCOUNT_PATH, account)
    app.router.add_post(LINK_GITHUB_PATH, link_github)
    app.router.add_post(LINK_LMS_PATH, link_lms)
