"""The platform's half of a student origin's sign-in, and the end of a sign-out.

`GET /auth/handoff?origin=<origin>&next=<path>`: a student origin without its own session sends
the browser here (the gateway does, on a navigation). Signed out: on to `/auth/login`, which
comes back here. Signed in: `origin` must be the student's own origin, or a Template host (the
bare `ide.example.edu` means "my origin there"); someone else's origin is a 403 page that links
to the student's own, unless a live help grant lets the signed-in member of staff into that
student's environments (platform/model/grants.py), made for them as they are signed in now (the same
global role and teams as at Join): then the code is for the student's origin and bound to the
grant. Then a single-use code (auth/origin_sessions.py) and a redirect to
`<own origin>/__userland/handoff?code=...&next=...`, where the gateway sets the origin's cookie.
A session that asks for more codes a minute than a browser would gets a 429 page instead.
A GET is enough: the code only ever goes to the signed-in student's own origin. Only a page load
(`Sec-Fetch-Mode: navigate`, when the browser says) gets one: an image, script or fetch that
another page makes here (a student's page in a helping staff member's browser, same site) is
refused before anything is issued, so it cannot use up the staff member's codes for the minute.

`GET /auth/signed-out?chain=...`: the last step of a sign-out (session_routes.py): asks the
browser to clear the platform origin's data, then goes home. Without a live chain it clears
nothing (a link from elsewhere cannot wipe anyone's data).
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from userland.auth import pages
from userland.auth.context import auth_context, current_session, fail_closed, redirect, session_cookie_id
from userland.auth.origin_sessions import HANDOFF_TTL_SECONDS, TooManyHandoffs
from userland.auth.rules.origins import (
    CLEAR_SITE_DATA,
    HANDOFF_PATH,
    normalize_origin,
    port_suffix,
    safe_path,
    split_student_host,
)

HANDOFF_ROUTE = "/auth/handoff"
SIGNED_OUT_ROUTE = "/auth/signed-out"
log = logging.getLogger(__name__)


def _target(origin: str | None, template_hosts: set[str], proto: str,
            port: str) -> tuple[str | None, str] | None:
    """(owner, Template host) for a student's origin, (None, Template host) for a bare Template
    host, when `origin` is served by this platform (its scheme and port); else None."""
    if origin is None:
        return None
    host = (urlsplit(origin).hostname or "").lower()
    if origin != f"{proto}://{host}{port}":
        return None
    if host in template_hosts:
        return None, host
    return split_student_host(host, template_hosts)


def is_page_load(request: web.Request) -> bool:
    """A navigation (top level or a frame's), or a client that sends no fetch metadata."""
    return request.headers.get("Sec-Fetch-Mode", "navigate") == "navigate"


@fail_closed
async def handoff(request: web.Request) -> web.StreamResponse:
    auth = auth_context(request)
    if not is_page_load(request):
        auth.refusals["cross_site"] += 1  # another page's request (proxy/metrics.py REFUSALS)
        return pages.error_page(403, "Open it in the browser",
                                "Environments are signed in when you open them, not from another page.")
    origin = normalize_origin(request.query.get("origin") or "")
    next_path = safe_path(request.query.get("next"))
    target = _target(origin, auth.template_hosts(), auth.proto, port_suffix(auth.settings.public_url))
    if target is None or origin is None:
        return pages.error_page(400, "Unknown address",
                                "This address is not one of this site's environments.")
    owner, template_host = target
    cookie_id = session_cookie_id(request)
    session = await current_session(request) if cookie_id else None
    if session is None or cookie_id is None:
        back = HANDOFF_ROUTE + "?" + urlencode({"origin": origin, "next": next_path})
        return redirect("/auth/login?" + urlencode({"next": back}))
    login = session.login.lower()
    own = auth.own_origin(login, template_host)
    grant_id: str | None = None
    if owner is not None and owner != login:
        grant = await auth.staff_grant(owner, login, template_host)
        if grant is not None and not grant.made_for(session.role, session.teams):
            # Signed in again since Join with another global role or other teams: the course's
            # staff rules judged who they were then (web/rules/courses.py grant_still_allowed).
            log.info("handoff refused: staff changed since join", extra={
                "event": "handoff.staff_changed", "login": login, "owner": owner, "course": grant.course})
            grant = None
        if grant is None:
            # Staff meet this page too, from a student's address on the class dashboard.
            return pages.render("message.html", status=403, title=f"This is {owner}'s environment",
                                message=f"Only {owner} can open it; you are signed in as {login}. Course "
                                        f"staff can open it while helping {owner}, after {owner} asks for "
                                        f"help. If you are a student, yours is at {own}/.",
                                link_url=own + "/", link_text="Open your own environment")
        own, grant_id = auth.own_origin(owner, template_host), grant.id
        log.info("handoff for staff", extra={"event": "handoff.staff", "login": login, "owner": owner,
                                             "course": grant.course})
    try:
        code = await auth.origin_sessions.issue_code(cookie_id, own, next_path, grant=grant_id)
    except TooManyHandoffs:
        auth.refusals["handoff_rate"] += 1
        log.info("handoff refused: too many codes", extra={"event": "handoff.rate_limited",
                                                           "login": login})
        response = pages.error_page(429, "Too many sign-ins",
                                    "Your environments were asked to sign you in too many times in "
                                    "the last minute. Please wait a minute and try again.",
                                    retry_url=own + next_path)
        response.headers["Retry-After"] = str(HANDOFF_TTL_SECONDS)
        return response
    return redirect(own + HANDOFF_PATH + "?" + urlencode({"code": code, "next": next_path}))


@fail_closed
async def signed_out(request: web.Request) -> web.StreamResponse:
    auth = auth_context(request)
    chain = await auth.origin_sessions.signout(request.query.get("chain"), finish=True)
    response = redirect("/")
    if chain is not None:
        response.headers["Clear-Site-Data"] = CLEAR_SITE_DATA
    return response
