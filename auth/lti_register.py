"""`/lti/register`: LTI Dynamic Registration, the tool's side. An LMS admin pastes Userland's
registration URL into the LMS; the LMS opens it with `openid_configuration` (its configuration's
URL) and `registration_token`. A Userland admin must be signed in (in this browser: the LMS
frames this page, where Userland's cookie is not sent, so the page offers a window of its own),
and confirms with a form (a GET alone never registers: a link or image on another site must not
make an admin's browser register an attacker's LMS). Then the platform's configuration is
fetched and checked (auth/rules/lti_dynamic.py), Userland's
registration posted to the platform's registration endpoint, and the answer written as an
LtiRegistration in the LTI namespace, whose status then says whether it works. The page ends by
telling the LMS it is done (`org.imsglobal.lti.close`).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web

from userland.auth import lti_pages, pages
from userland.auth.context import auth_context, current_session, fail_closed
from userland.auth.lti_context import lti_context, starting
from userland.auth.lti_registry import LTI_REGISTRATIONS
from userland.auth.rules.lti_dynamic import (
    RegistrationRefused,
    check_configuration,
    object_name,
    registration_request,
    registration_spec,
)
from userland.platform.clients.kube import AlreadyExists, KubeError
from userland.platform.model import naming
from userland.platform.model.lti import InvalidRegistration, check_url

log = logging.getLogger(__name__)

REGISTER_PATH = "/lti/register"
TIMEOUT = aiohttp.ClientTimeout(total=15, connect=5)
MAX_ANSWER_BYTES = 256 * 1024


async def _json(resp: aiohttp.ClientResponse, what: str) -> Any:
    body = await resp.content.read(MAX_ANSWER_BYTES + 1)
    if len(body) > MAX_ANSWER_BYTES:
        raise RegistrationRefused(f"The platform's {what} is too large.")
    try:
        return json.loads(body)
    except ValueError:
        raise RegistrationRefused(f"The platform's {what} is not JSON.") from None


def _refused(message: str, status: int = 400) -> web.Response:
    return lti_pages.refusal(status, "Userland could not be registered", message)


@fail_closed
async def register(request: web.Request) -> web.StreamResponse:
    lti = lti_context(request)
    if not lti.ready.is_set() or lti.registrations is None or lti.key_sets is None:
        return starting()
    session = await current_session(request)
    if session is None:
        sign_in = "/auth/login?" + urlencode({"next": str(request.rel_url)})
        return pages.render(
            "lti_register.html",
            status=401,
            title="Sign in to Userland first",
            message="Registering an LMS needs a Userland admin signed in in this browser.",
            issuer="",
            sign_in_url=sign_in,
        )
    if session.role != "admin":
        return _refused("Only a Userland admin can register an LMS.", 403)
    source = request.query if request.method == "GET" else await request.post()
    config_url = str(source.get("openid_configuration") or "")[:2048]
    token = str(source.get("registration_token") or "")[:4096]
    if request.method == "GET":
        try:
            check_url(config_url, "openid_configuration", "the platform's configuration URL")
        except InvalidRegistration as exc:
            return _refused(str(exc))
        return pages.render(
            "lti_register.html",
            title="Register an LMS with Userland",
            message=f"Your LMS asks to register Userland as an LTI tool (its configuration: {config_url}).",
            issuer=urlsplit(config_url).netloc,
            csrf=session.csrf,
            openid_configuration=config_url,
            registration_token=token,
            sign_in_url="",
        )
    if not hmac.compare_digest(str(source.get("csrf") or ""), session.csrf):
        return _refused("This form has expired. Open the registration again from your LMS.", 403)
    try:
        check_url(config_url, "openid_configuration", "the platform's configuration URL")
    except InvalidRegistration as exc:
        return _refused(str(exc))
    http = lti.key_sets.http
    try:
        async with http.get(config_url, allow_redirects=False, timeout=TIMEOUT) as resp:
            if resp.status != 200:
                raise RegistrationRefused(f"The platform's configuration answered HTTP {resp.status}.")
            endpoints = check_configuration(await _json(resp, "configuration"), config_url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = registration_request(auth_context(request).public_origin(request))
        async with http.post(
            endpoints["registration_endpoint"],
            json=body,
            headers=headers,
            allow_redirects=False,
            timeout=TIMEOUT,
        ) as resp:
            if resp.status not in (200, 201):
                raise RegistrationRefused(f"The platform refused the registration (HTTP {resp.status}).")
            spec = registration_spec(endpoints, await _json(resp, "answer"))
    except RegistrationRefused as exc:
        log.info(
            "LTI dynamic registration refused", extra={"event": "lti.register_refused", "reason": str(exc)}
        )
        return _refused(str(exc))
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return _refused(f"The platform could not be reached ({type(exc).__name__}).", 502)
    name = object_name(spec["issuer"], spec["clientId"])
    try:
        await lti.registrations.kube.create(
            LTI_REGISTRATIONS,
            lti.settings.lti_namespace,
            {
                "apiVersion": naming.API_VERSION,
                "kind": "LtiRegistration",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "userland"}},
                "spec": spec,
            },
        )
    except AlreadyExists:
        return _refused(f"This LMS registration already exists (LtiRegistration {name}).", 409)
    except KubeError as exc:
        log.warning(
            "LTI dynamic registration not saved",
            extra={"event": "lti.register_failed", "error": str(exc)[:200]},
        )
        return _refused("The registration could not be saved. Please try again.", 503)
    log.info(
        "LTI platform registered",
        extra={
            "event": "lti.registered",
            "registration": name,
            "issuer": spec["issuer"],
            "admin": session.login,
        },
    )
    return lti_pages.step_page(
        mode="close",
        title="Userland is registered",
        working=f"Userland is registered with {spec['issuer']} (LtiRegistration {name}). "
        "You can close this window.",
    )
