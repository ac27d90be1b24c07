"""The LTI 1.3 launch on the platform host: `/lti/login`, `/lti/launch`, `/lti/continue`, `/lti/jwks`.

1. `/lti/login` (GET or POST: OIDC third-party initiated login). The platform names itself
   (`iss`, `client_id`, `lti_deployment_id`), the user (`login_hint`) and where the launch goes
   (`target_link_uri`, which must be on this platform). A pending launch is stored under a new
   single-use `state` with a new `nonce` and the hash of a browser secret; the secret goes to the
   browser as a cookie (SameSite=None, so it comes back on the platform's cross-site form post),
   and also into the platform's storage (`lti.put_data`) when it offers LTI Platform Storage
   (`lti_storage_target`). Then the browser goes to the platform's authorization URL.
2. `/lti/launch` (the platform's form post of `id_token` and `state`): the state is taken
   (single use), every id_token check made (auth/rules/lti_launch.py), the nonce recorded as
   used, the LMS user's login bound (auth/lti_store.py); then a single-use ticket is issued.
   The browser proves it is the one that started the login with the cookie, or, where third-party
   cookies are blocked, with the secret read back from the platform's storage (`lti.get_data`).
   Neither available (cookies blocked, no Platform Storage): the login starts again in a new
   window, where the platform's pages and ours are first-party.
3. `/lti/continue?ticket=...`: opened top-level (the launch page goes there itself when it is
   not framed, and offers "Open Userland" in a new window when it is), it signs the user in with
   an ordinary platform session cookie, set first-party, and sends them on. No cookie set inside
   the iframe is ever relied on.
4. `/lti/jwks`: the tool's public keys (platform/model/lti_keys.py: two during a rollover).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import redis.asyncio
from aiohttp import web

from userland.auth import lti_pages
from userland.auth.context import auth_context, fail_closed, redirect
from userland.auth.lti_context import (
    CONTINUE_PATH,
    JWKS_PATH,
    LAUNCH_PATH,
    LOGIN_PATH,
    LTI,
    RESTART_PARAMS,
    TRY_AGAIN,
    LtiContext,
    lti_context,
    starting,
    state_cookie,
    storage_key,
)
from userland.auth.lti_continue import continue_launch, jwks
from userland.auth.lti_register import REGISTER_PATH, register
from userland.auth.lti_registry import KeySetUnavailable
from userland.auth.lti_store import LtiStore, NameTaken, PendingLaunch, browser_secret
from userland.auth.rules import lti_identity
from userland.auth.rules.lti_launch import (
    CUSTOM,
    DEEP_LINKING_SETTINGS,
    Launch,
    LaunchRefused,
    check_claims,
    same_origin,
    seconds_to_remember_nonce,
    token_kid,
    verify_signature,
)
from userland.platform.model import naming
from userland.platform.model.keyspace import digest
from userland.platform.model.lti import LtiRegistration, find_registration
from userland.platform.model.lti_links import assignment_named, linked_courses
from userland.platform.model.settings import Settings

log = logging.getLogger(__name__)


def setup_lti(
    app: web.Application, settings: Settings, *, redis: redis.asyncio.Redis, rate_limited: Any
) -> LtiContext:
    """Add the /lti/ routes; the gateway runs `LtiContext.run(kube)` once its client is up."""
    lti = LtiContext(settings=settings, store=LtiStore(redis))
    app[LTI] = lti
    app.router.add_get(LOGIN_PATH, rate_limited(login))
    app.router.add_post(LOGIN_PATH, rate_limited(login))
    app.router.add_post(LAUNCH_PATH, launch)
    app.router.add_get(CONTINUE_PATH, continue_launch)
    app.router.add_get(JWKS_PATH, jwks)
    app.router.add_get(REGISTER_PATH, register)
    app.router.add_post(REGISTER_PATH, register)
    return lti


def _with_query(url: str, query: dict[str, str]) -> str:
    parts = urlsplit(url)
    extra = urlencode(query)
    return urlunsplit(
        (parts.scheme, parts.netloc, parts.path, f"{parts.query}&{extra}" if parts.query else extra, "")
    )


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def _params(request: web.Request) -> dict[str, str]:
    source = request.query if request.method == "GET" else await request.post()
    return {k: v[:2048] for k, v in source.items() if isinstance(v, str)}


@fail_closed
async def login(request: web.Request) -> web.StreamResponse:
    lti = lti_context(request)
    if not lti.ready.is_set() or lti.registrations is None:
        return starting()
    params = await _params(request)
    issuer, hint, target = (
        params.get("iss", ""),
        params.get("login_hint", ""),
        params.get("target_link_uri", ""),
    )
    if not issuer or not hint or not target:
        lti.outcomes["login_incomplete"] += 1
        return lti_pages.refusal(
            400,
            "Sign-in from your LMS failed",
            "Your LMS did not send what an LTI 1.3 sign-in needs (iss, login_hint and "
            "target_link_uri). " + TRY_AGAIN,
        )
    deployment = params.get("lti_deployment_id") or None
    registration = find_registration(
        lti.registrations.all(), issuer, params.get("client_id") or None, deployment
    )
    if registration is None:
        lti.outcomes["login_unregistered"] += 1
        log.info(
            "LTI login refused: no registration",
            extra={
                "event": "lti.login_unregistered",
                "issuer": issuer[:200],
                "client_id": params.get("client_id", "")[:100],
            },
        )
        return lti_pages.refusal(
            403,
            "This LMS is not registered here",
            "Userland does not know this LMS (or this installation of Userland in it). "
            "Ask your LMS admin to register it with Userland's admin.",
        )
    if deployment is not None and not registration.knows_deployment(deployment):
        lti.outcomes["login_deployment"] += 1
        return lti_pages.refusal(
            403,
            "This deployment is not registered here",
            "This installation of Userland in your LMS is not registered here. Ask your "
            "LMS admin to add its deployment id to the registration.",
        )
    origin = auth_context(request).public_origin(request)
    if not same_origin(target, origin):
        lti.outcomes["login_target"] += 1
        return lti_pages.refusal(
            400,
            "This link points elsewhere",
            "The link in your course points to another site than this one, so Userland did not sign you in.",
        )
    secret, bind = browser_secret()
    nonce = secrets.token_urlsafe(32)
    storage_target = params.get("lti_storage_target", "")[:100]
    pending = PendingLaunch(
        nonce=nonce,
        issuer=registration.issuer,
        client_id=registration.client_id,
        target=target,
        bind=bind,
        mode="storage" if storage_target else "cookie",
        params={k: params[k] for k in RESTART_PARAMS if k in params},
        storage_target=storage_target,
    )
    state = await lti.store.begin(pending)
    query = {
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "client_id": registration.client_id,
        "redirect_uri": origin + LAUNCH_PATH,
        "login_hint": hint,
        "state": state,
        "nonce": nonce,
    }
    if "lti_message_hint" in params:
        query["lti_message_hint"] = params["lti_message_hint"]
    url = _with_query(registration.auth_login_url, query)
    response: web.StreamResponse
    if storage_target:
        response = lti_pages.step_page(
            mode="storage-put",
            title="Signing you in",
            working="Signing you in...",
            url=url,
            key=storage_key(state),
            value=secret,
            storage_target=storage_target,
            platform_origin=_origin_of(registration.auth_login_url),
        )
    else:
        response = redirect(url)
    # SameSite=None (it must come back on the platform's cross-site form post) requires Secure;
    # browsers keep Secure cookies of http://localhost too. Path /lti/: nothing else sees it.
    response.set_cookie(
        state_cookie(state), secret, max_age=600, path="/lti/", secure=True, httponly=True, samesite="None"
    )
    log.info(
        "LTI login started",
        extra={"event": "lti.login_started", "registration": registration.name, "mode": pending.mode},
    )
    return response


def _refused(lti: LtiContext, exc: LaunchRefused) -> web.Response:
    lti.outcomes[exc.reason] += 1
    log.info("LTI launch refused", extra={"event": "lti.launch_refused", "reason": exc.reason})
    status = 400 if exc.reason == "malformed" else 403
    return lti_pages.refusal(status, "Userland could not open this link", exc.message)


@fail_closed
async def launch(request: web.Request) -> web.StreamResponse:
    lti = lti_context(request)
    if not lti.ready.is_set() or lti.registrations is None or lti.key_sets is None:
        return starting()
    form = await request.post()
    if "error" in form:
        lti.outcomes["platform_error"] += 1
        error = str(form.get("error_description") or form.get("error") or "")[:200]
        return lti_pages.refusal(
            400, "Your LMS did not sign you in", f"Your LMS answered: {error}. " + TRY_AGAIN
        )
    state, token = str(form.get("state") or ""), str(form.get("id_token") or "")
    pending = await lti.store.finish(state)
    if pending is None:
        return _refused(
            lti, LaunchRefused("state", "This launch has expired or was already used. " + TRY_AGAIN)
        )
    registration = next(
        (r for r in lti.registrations.all() if r.key == (pending.issuer, pending.client_id)), None
    )
    if registration is None:
        return _refused(lti, LaunchRefused("unregistered", "This LMS is no longer registered here."))
    try:
        checked = await _check(
            lti, token, pending, registration, auth_context(request).public_origin(request)
        )
    except LaunchRefused as exc:
        return _refused(lti, exc)
    except KeySetUnavailable as exc:
        lti.outcomes["key_set"] += 1
        log.warning(
            "LTI launch: the platform's key set is unavailable",
            extra={"event": "lti.key_set_unavailable", "registration": registration.name, "error": str(exc)},
        )
        return lti_pages.refusal(
            502,
            "Your LMS is not answering",
            "Userland could not read your LMS's keys to check this launch. Please try "
            "again in a moment; if it keeps failing, tell your LMS admin.",
        )
    try:
        login_name, subject, fresh = await _bind(lti, checked, registration)
    except NameTaken as exc:
        lti.outcomes["name_taken"] += 1
        return lti_pages.refusal(
            403,
            "Your Userland name belongs to another account",
            f"The name {exc.login} you had here now belongs to another account. Ask an admin to check.",
        )
    await _note_assignment(lti, checked, registration)
    proven = _cookie_proves(request, state, pending)
    landing = _landing(lti, checked, registration, auth_context(request).proto)
    fresh = fresh and not landing.course_page  # staff never link (auth/rules/account_link.py)
    if landing.course_page:
        course = await lti.store.remember_course(_course_payload(checked, registration, login_name))
        page = DEEP_LINK_PAGE if checked.deep_linking else COURSE_PAGE
        landing = Landing(f"{page}?" + urlencode({"launch": course}))
    ticket = await lti.store.issue_ticket(
        {
            "login": login_name,
            "name": _display_name(checked),
            "bind": pending.bind,
            "proven": proven,
            "next": landing.next_url,
            "environment": landing.environment,
            "issuer": checked.issuer,
            "context": checked.context_id,
            # "Link your LMS account" (auth/account_link.py) may move an LMS user seen first now.
            "subject": subject,
            "fresh": fresh,
        }
    )
    lti.outcomes["checked"] += 1
    log.info(
        "LTI launch checked",
        extra={
            "event": "lti.launch_checked",
            "login": login_name,
            "registration": registration.name,
            "proven": proven,
            "message_type": checked.message_type,
        },
    )
    url = f"{CONTINUE_PATH}?" + urlencode({"ticket": ticket})
    response: web.Response
    if proven:
        response = lti_pages.step_page(
            mode="continue", title="Opening Userland", working="Opening Userland...", url=url
        )
    elif pending.mode == "storage":
        response = lti_pages.step_page(
            mode="storage-get",
            title="Opening Userland",
            working="Opening Userland...",
            url=url,
            key=storage_key(state),
            storage_target=pending.storage_target,
            platform_origin=_origin_of(registration.auth_login_url),
            restart_url=_restart_url(pending),
        )
    else:
        response = lti_pages.step_page(
            mode="restart", title="Open Userland", working="", url="", restart_url=_restart_url(pending)
        )
    response.del_cookie(state_cookie(state), path="/lti/", secure=True, httponly=True, samesite="None")
    return response


# The web UI's page that links an LMS course to a Userland course and gives LMS staff their
# course role (web/lti_link.py).
COURSE_PAGE = "/lms/course"
# The web UI's content picker for a deep-linking launch by staff (web/lti_deep_link.py).
DEEP_LINK_PAGE = "/lms/deep-link"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


@dataclass(frozen=True)
class Landing:
    next_url: str
    environment: list[str] | None = None  # [namespace, template, host] to make for a Learner
    course_page: bool = False  # staff of an LMS course: the web UI's course page


def _claim_url(claims: Any, claim: str, key: str) -> str:
    value = claims.get(claim)
    url = value.get(key) if isinstance(value, dict) else None
    return url[:2048] if isinstance(url, str) else ""


def _course_payload(launch: Launch, registration: LtiRegistration, login_name: str) -> dict[str, Any]:
    """What the web UI's course page needs of the launch (platform/model/keyspace.py lti_course_key)."""
    return {
        "login": login_name,
        "registration": registration.name,
        "context": launch.context_id,
        "title": launch.context_title[:200],
        "role": lti_identity.course_role(launch.roles) or "",
        "memberships": _claim_url(launch.claims, NRPS_CLAIM, "context_memberships_url"),
        "lineitems": _claim_url(launch.claims, AGS_CLAIM, "lineitems"),
        **({"deep_link": _deep_link_payload(launch)} if launch.deep_linking else {}),
    }


def _deep_link_payload(launch: Launch) -> dict[str, Any]:
    """What the content picker answers with: the request's deployment and the settings claim's
    return URL, accepted types and opaque `data` (checked again by the web UI before use)."""
    settings = launch.claims.get(DEEP_LINKING_SETTINGS)
    claim = settings if isinstance(settings, dict) else {}
    types = claim.get("accept_types")
    data = claim.get("data")
    return_url = claim.get("deep_link_return_url")
    return {
        "deployment_id": launch.deployment_id,
        "deep_link_return_url": return_url[:2048] if isinstance(return_url, str) else "",
        "accept_types": ([t[:100] for t in types[:20] if isinstance(t, str)]
                         if isinstance(types, list) else []),
        "accept_multiple": claim.get("accept_multiple") is not False,
        **({"data": data[:4096]} if isinstance(data, str) else {}),
    }


async def _note_assignment(lti: LtiContext, launch: Launch, registration: LtiRegistration) -> None:
    """A resource link of an Assignment (its deep link's custom parameter), launched from an LMS
    course linked to the Assignment's course: the web UI finds its gradebook column now
    (web/lti_line_items.py). Nothing else follows from it; a failure here never stops the launch."""
    named = assignment_named(launch.claims.get(CUSTOM))
    if launch.deep_linking or named is None or lti.courses is None:
        return
    namespace, name = named
    if namespace not in {ns for ns, _ in linked_courses(lti.courses.items(), registration.name,
                                                        launch.context_id)}:
        return
    try:
        await lti.store.note_assignment_launch(namespace, name, {
            "registration": registration.name, "context": launch.context_id,
            "lineitem": _claim_url(launch.claims, AGS_CLAIM, "lineitem")})
    except Exception as exc:
        log.warning("LTI: assignment launch not noted", extra={"event": "lti.assignment_note_failed",
                                                              "error": type(exc).__name__})


def _landing(lti: LtiContext, launch: Launch, registration: LtiRegistration, proto: str) -> Landing:
    """Where the launch goes: a Learner of a context linked to one Template, their own
    environment of it; an Instructor or TeachingAssistant the web UI's course page (link the
    LMS course, or take their role in the course it is linked to); anyone else the platform's
    home page (which lists what they have). The roles count for the launch's own context only:
    it selects the Template, or the course."""
    if not launch.context_id:
        return Landing("/")
    role = lti_identity.course_role(launch.roles)
    if role in ("instructor", "assistant"):
        return Landing("/", course_page=True)  # a deep-linking launch: the content picker
    if launch.deep_linking:
        return Landing("/")
    targets = lti.targets(registration.name, launch.context_id)
    if role != "student" or len(targets) != 1:
        return Landing("/")
    target = targets[0]
    port = urlsplit(lti.settings.public_url).port
    url = f"{proto}://{target.host}{f':{port}' if port else ''}/"
    return Landing(url, [target.namespace, target.template, target.host])


def _restart_url(pending: PendingLaunch) -> str:
    return f"{LOGIN_PATH}?" + urlencode(pending.params)


def _cookie_proves(request: web.Request, state: str, pending: PendingLaunch) -> bool:
    secret = request.cookies.get(state_cookie(state))
    return bool(secret) and secrets.compare_digest(digest(secret or ""), pending.bind)


async def _check(
    lti: LtiContext, token: str, pending: PendingLaunch, registration: LtiRegistration, origin: str
) -> Launch:
    assert lti.key_sets is not None
    key_set = await lti.key_sets.get(registration.key_set_url, kid=token_kid(token))
    claims = verify_signature(token, key_set)
    checked = check_claims(
        claims, registration, nonce=pending.nonce, target_link_uri=pending.target, platform_origin=origin
    )
    if not await lti.store.use_nonce(registration.issuer, pending.nonce, seconds_to_remember_nonce(claims)):
        raise LaunchRefused("nonce", "This launch was already used. " + TRY_AGAIN)
    return checked


def _display_name(launch: Launch) -> str:
    name = launch.claims.get("name")
    return name[:200] if isinstance(name, str) else ""


async def _bind(lti: LtiContext, launch: Launch, registration: LtiRegistration) -> tuple[str, str, bool]:
    """The launch's login, its LMS user's key, and whether the LMS user was seen first now."""
    subject = lti_identity.subject_key(launch.issuer, launch.subject)
    fresh = await lti.store.bound_login(subject) is None
    base = lti_identity.normalise(lti_identity.claimed_name(launch.claims, registration))
    # A name the settings list as an admin or instructor is a GitHub account's: never an LMS user's.
    reserved = {
        entry.lower() for entry in (*lti.settings.admins, *lti.settings.instructors) if "/" not in entry
    }
    candidates = (c for c in lti_identity.login_candidates(base, subject) if c not in reserved)
    login_name = await lti.store.bind(subject, candidates)
    return naming.normalize_login(login_name), subject, fresh


