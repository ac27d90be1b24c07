"""The GitHub login: `/auth/login` starts the authorization-code flow, `/auth/callback` ends it.

Callback rules (as JupyterHub's): a provider `error` is a 400 page; a missing state is a 400;
an unknown, expired, replayed or other-browser state is a 403; then the code is exchanged with
the PKCE verifier, the user (and orgs/teams when rules need them) fetched, the org rule and
the login-id binding checked, a session saved and the browser sent to a validated next-URL.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from userland.auth import pages
from userland.auth.account_link import finish_github_link, lms_links
from userland.auth.context import AuthContext, auth_context, fail_closed, redirect, session_cookie_id
from userland.auth.github import GitHubOAuth, GitHubUnavailable, OAuthRejected
from userland.auth.oauth_state import StateMismatch
from userland.auth.rules import roles
from userland.platform.clients.sessions import Session, SessionStoreBusy, SessionStoreUnavailable
from userland.platform.model import naming
from userland.platform.model.identity import Role

log = logging.getLogger(__name__)

CALLBACK_PATH = "/auth/callback"


def _retry_url(next_url: str = "/") -> str:
    return "/auth/login?" + urlencode({"next": next_url})


@fail_closed
async def login(request: web.Request) -> web.StreamResponse:
    auth = auth_context(request)
    settings = auth.settings
    next_url = auth.safe_next(request.query.get("next"))
    if not settings.github_client_id:
        if settings.dev_login:
            return redirect("/auth/dev-login?" + urlencode({"next": next_url}))
        log.error("login attempted but no GitHub client id is configured")
        return pages.error_page(503, "Sign-in is not configured",
                                "This site has no GitHub app configured yet. Please tell its admin.")
    public = urlsplit(settings.public_url)
    if settings.public_url and request.host.lower() != public.netloc.lower():
        # Start on the platform's own host, where the callback (and its nonce cookie) live.
        return redirect(f"{settings.public_url}/auth/login?" + urlencode({"next": next_url}))
    github = github_client(auth)
    pending = await auth.states.begin(next_url)
    url = github.authorization_url(state=pending.state, verifier=pending.verifier,
                                   redirect_uri=auth.public_origin(request) + CALLBACK_PATH,
                                   scopes=roles.scopes(settings))
    response = redirect(url)
    auth.set_nonce_cookie(response, pending.nonce)
    return response


def github_client(auth: AuthContext) -> GitHubOAuth:
    if auth.github is None:
        raise RuntimeError("the auth application is not running (cleanup_ctx not entered)")
    return auth.github


@fail_closed
async def callback(request: web.Request) -> web.StreamResponse:
    auth = auth_context(request)
    try:
        response = await _callback(request, auth)
    except (SessionStoreUnavailable, SessionStoreBusy):
        auth.sign_ins["unavailable"] += 1  # Redis: fail_closed answers the page
        raise
    auth.delete_nonce_cookie(response)
    return response


async def _callback(request: web.Request, auth: AuthContext) -> web.StreamResponse:
    query = request.query
    if "error" in query:
        error = query.get("error", "")[:100]
        log.info("login refused by provider", extra={"event": "login.provider_error", "error": error})
        auth.sign_ins["cancelled"] += 1
        message = ("You did not allow this site to use your GitHub account."
                   if error == "access_denied" else f"GitHub did not sign you in ({error}).")
        return pages.error_page(400, "Sign-in cancelled", message, retry_url=_retry_url())
    state = query.get("state")
    if not state:
        auth.sign_ins["cancelled"] += 1
        return pages.error_page(400, "Sign-in failed", "The sign-in answer had no state.",
                                retry_url=_retry_url())
    try:
        pending = await auth.states.finish(state, auth.nonce_cookie(request))
    except StateMismatch as exc:
        log.info("login state refused", extra={"event": "login.state_refused", "reason": str(exc)})
        auth.sign_ins["expired"] += 1
        return pages.error_page(403, "Sign-in link expired",
                                "This sign-in link has expired, was already used, or was started "
                                "in another browser. Please sign in again.", retry_url=_retry_url())
    code = query.get("code")
    if not code:
        auth.sign_ins["cancelled"] += 1
        return pages.error_page(400, "Sign-in failed", "The sign-in answer had no code.",
                                retry_url=_retry_url(pending.next_url))
    github = github_client(auth)
    redirect_uri = auth.public_origin(request) + CALLBACK_PATH
    try:
        token = await github.exchange_code(code=code, verifier=pending.verifier, redirect_uri=redirect_uri)
        user = await github.user(token)
        settings = auth.settings
        orgs = await github.orgs(token) if roles.needs_orgs(settings) else frozenset()
        teams = await github.teams(token) if roles.needs_teams(settings) else frozenset()
    except OAuthRejected as exc:
        log.info("code exchange refused", extra={"event": "login.code_refused", "error": exc.error[:100]})
        auth.sign_ins["code_refused"] += 1
        return pages.error_page(400, "Sign-in failed",
                                "GitHub did not accept this sign-in (it may have expired). Please try again.",
                                retry_url=_retry_url(pending.next_url))
    except GitHubUnavailable as exc:
        log.warning("github unavailable", extra={"event": "login.github_unavailable", "error": str(exc)})
        auth.sign_ins["github_unavailable"] += 1
        return pages.error_page(502, "GitHub is not answering",
                                "We could not reach GitHub to sign you in. Please try again shortly.",
                                retry_url=_retry_url(pending.next_url))
    try:
        login_name = naming.normalize_login(user.login)
    except naming.InvalidName:
        log.warning("github returned an invalid login", extra={"event": "login.invalid_login"})
        auth.sign_ins["invalid_login"] += 1
        return pages.error_page(502, "Sign-in failed", "GitHub returned an account name we cannot use.")
    member = roles.Membership(login=login_name, orgs=orgs, teams=teams)
    if pending.link:  # "Link your GitHub account" (auth/account_link.py), not a sign-in
        return await finish_github_link(request, auth, lms_links(request), pending, github_name=login_name,
                                        github_id=user.id, role=roles.role_for(member, settings),
                                        allowed=roles.is_allowed(member, settings))
    if not roles.is_allowed(member, settings):
        log.info("login refused: not in an allowed org",
                 extra={"event": "login.not_allowed", "login": login_name, "github_id": user.id})
        auth.sign_ins["not_allowed"] += 1
        return pages.error_page(
            403, "Not allowed here",
            f"The GitHub account {login_name} is not a member of an organization allowed to use "
            "this site. If you think it should be, ask your instructor to check your membership.")
    # A GitHub account an LMS user linked to their login signs in there (auth/account_link.py).
    linked = await auth.bindings.linked_login(user.id)
    return await complete_login(request, auth, login=linked or login_name, github_id=user.id,
                                role=roles.role_for(member, settings), next_url=pending.next_url,
                                name=user.name, avatar_url=user.avatar_url, teams=teams)


async def complete_login(request: web.Request, auth: AuthContext, *, login: str, github_id: int,
                         role: Role, next_url: str, name: str = "",
                         avatar_url: str = "", teams: Iterable[str] = ()) -> web.StreamResponse:
    """Check the id binding, save a new session, set its cookie and redirect onwards."""
    if not await auth.bindings.bind(login, github_id):
        log.warning("login refused: name bound to another account",
                    extra={"event": "login.binding_refused", "login": login, "github_id": github_id})
        auth.sign_ins["binding_refused"] += 1
        return pages.error_page(
            403, "This name belongs to another account",
            f"The name {login} was first used here by a different GitHub account (GitHub names "
            "can change hands after a rename). Ask an admin to check and release the name.")
    old = session_cookie_id(request)
    if old:
        await auth.store.clear(old)
    session = Session(login=login, github_id=github_id, role=role, csrf=secrets.token_urlsafe(32),
                      created=time.time(), name=name, avatar_url=avatar_url,
                      teams=tuple(sorted(teams)))
    cookie_id = await auth.store.save(session)
    auth.sign_ins["succeeded"] += 1
    log.info("login succeeded", extra={"event": "login.succeeded", "login": login, "role": role,
                                       "github_id": github_id})
    response = redirect(auth.safe_next(next_url))
    auth.set_session_cookie(response, cookie_id)
    return response
