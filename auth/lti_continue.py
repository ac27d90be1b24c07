"""The last steps of an LTI launch: `/lti/continue` (the ticket redeemed in a top-level window:
the browser's proof checked when the launch could not check it, the Learner's environment
made, a first-party session cookie set) and `/lti/jwks` (the tool's public keys). auth/lti.py
has the rest of the flow.
"""

from __future__ import annotations

import logging
import secrets
import time

from aiohttp import web

from userland.auth import lti_pages
from userland.auth.account_link import apply_lms_link, lms_links
from userland.auth.context import auth_context, fail_closed, redirect, session_cookie_id
from userland.auth.lti_context import TRY_AGAIN, LtiTarget, lti_context, starting
from userland.platform.clients.sessions import Session
from userland.platform.model.keyspace import digest
from userland.platform.model.lti_keys import public_jwks

log = logging.getLogger(__name__)


@fail_closed
async def continue_launch(request: web.Request) -> web.StreamResponse:
    lti = lti_context(request)
    payload = await lti.store.redeem_ticket(request.query.get("ticket", ""))
    if payload is None:
        lti.outcomes["ticket"] += 1
        return lti_pages.refusal(
            403, "This link has expired", "This sign-in link has expired or was already used. " + TRY_AGAIN
        )
    if not payload.get("proven"):
        proof = request.query.get("proof", "")
        if not proof or not secrets.compare_digest(digest(proof), str(payload.get("bind", ""))):
            lti.outcomes["proof"] += 1
            return lti_pages.refusal(
                403, "Sign-in failed", "This sign-in was not started in this browser. " + TRY_AGAIN
            )
    auth = auth_context(request)
    linked = await apply_lms_link(request, lms_links(request), payload)  # "Link your LMS account"
    if isinstance(linked, web.Response):
        return linked
    payload = linked
    environment = payload.get("environment")
    if isinstance(environment, list) and len(environment) == 3:
        target = LtiTarget(*(str(part) for part in environment))
        if not await lti.ensure_environment(target, str(payload["login"])):
            return lti_pages.refusal(
                503,
                "Your environment could not be made",
                "Userland could not make your environment just now. " + TRY_AGAIN,
            )
    old = session_cookie_id(request)
    if old:
        await auth.store.clear(old)
    login_name = str(payload["login"])
    session = Session(
        login=login_name,
        github_id=0,
        role="student",
        csrf=secrets.token_urlsafe(32),
        created=time.time(),
        name=str(payload.get("name") or ""),
    )
    cookie_id = await auth.store.save(session)
    auth.sign_ins["succeeded"] += 1
    log.info(
        "login succeeded",
        extra={"event": "login.succeeded", "login": login_name, "role": "student", "via": "lti"},
    )
    response = redirect(auth.safe_next(str(payload.get("next") or "/")))
    auth.set_session_cookie(response, cookie_id)
    return response


async def jwks(request: web.Request) -> web.StreamResponse:
    lti = lti_context(request)
    if not lti.tool_keys:
        return starting()
    return web.json_response(public_jwks(lti.tool_keys), headers={"Cache-Control": "max-age=300"})
