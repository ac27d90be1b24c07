"""`/lms/deep-link`: the content picker of a deep-linking launch (a teacher adding Userland to an
LMS module), and its signed answer to the LMS.

The gateway sends an Instructor's or TeachingAssistant's deep-linking launch here with the id of
what it kept (the linking page's handoff, web/lti_link.py, plus the request's deployment and
deep-linking settings: Redis, 30 minutes, only for the login it names). The decisions are
web/rules/lti_deep_link.py; this module reads the course, creates an Assignment through the
assignment form's own code (web/routes_assignments.py `create_assignment`), signs the answer
with the tool's key (the Secret `userland-lti-keys`, the key /lti/jwks publishes) and writes the
Assignment's gradebook link:

- GET: not linked -> "link it first" (the linking page, which comes back here); linked -> the
  launcher's staff role written as on the linking page, then the choices;
- POST (CSRF-checked by the app's middleware): the choice, if the page offered it; a new
  Assignment created; the handoff used up (a second POST of it is refused); the Assignment
  annotated `userland.dev/lti-line-item`; then a page that posts the `LtiDeepLinkingResponse`
  JWT to the LMS's `deep_link_return_url` (form field `JWT`).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import web

from userland.platform.clients.kube import ASSIGNMENTS, TEMPLATES, KubeError, NotFound
from userland.platform.model import naming
from userland.platform.model.keyspace import lti_course_key
from userland.platform.model.lti_links import linked_courses
from userland.platform.model.lti_services_deeplink import DeepLinkError, deep_linking_response
from userland.web.context import web_context
from userland.web.lti_link import DEEP_LINK_PATH, audit_lms, decide_launch, grant, write_namespace
from userland.web.lti_sync import RosterSync, SyncUnavailable
from userland.web.routes_assignments import create_assignment, form_from_post, storage_templates
from userland.web.routes_course import class_state, course_watch
from userland.web.routes_lti_sync import LTI_SYNC
from userland.web.rules import assignments as views
from userland.web.rules import lti_deep_link as rules
from userland.web.rules.courses import Course, may
from userland.web.rules.lti_link import Decision, LaunchCourse
from userland.web.state import CourseWatch

log = logging.getLogger(__name__)
AGAIN = "Open the content selection from your LMS again."
# The answer's page: its one script (static, auto-submits the form) and a form to the LMS only.
ANSWER_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
              "form-action {origin}; frame-ancestors 'none'; base-uri 'none'")


async def _raw_request(request: web.Request, launch_id: str) -> tuple[rules.DeepLinkRequest | None, str]:
    """The handoff's deep-linking request, or None and why (in the teacher's words)."""
    raw = await web_context(request).redis.get(lti_course_key(launch_id)) if launch_id else None
    try:
        payload = json.loads(raw) if raw is not None else {}
        raw_request = payload.get("deep_link") if isinstance(payload, dict) else None
        return rules.DeepLinkRequest.parse(raw_request), ""
    except DeepLinkError as err:
        return None, str(err)
    except ValueError:
        return None, ""


async def _picker(request: web.Request, launch_id: str) -> tuple[LaunchCourse | None, rules.Picker,
                                                               CourseWatch | None, Decision]:
    """The handoff, the picker's offers and the course's watch (linked courses only); the
    launcher's staff role is written in the course(s) the LMS course feeds, as on the linking page."""
    ctx = web_context(request)
    launch, decision, by_name = await decide_launch(request, launch_id)
    deep_link, problem = await _raw_request(request, launch_id)
    if decision.outcome != "linked" or launch is None or decision.role is None:
        return launch, rules.decide(decision, deep_link, settings_problem=problem), None, decision
    for namespace in decision.linked:
        change = grant(launch, decision.role, launch.link("-"))
        by_name[namespace] = await write_namespace(ctx, namespace, change)
    namespace = decision.linked[0]
    course = Course.from_namespace(by_name[namespace])
    watch = await course_watch(request, course)
    may_assign = may(decision.role, "assign")
    templates = []
    for _, link in linked_courses([by_name[namespace]], launch.registration, launch.context):
        spec = (watch.template_objects().get(link.template) or {}).get("spec") or {}
        templates.append((link.template, str(spec.get("displayName") or course.title)))
    assignments = [(str(o["metadata"]["name"]), str((o.get("spec") or {}).get("title") or ""),
                    views.when((o.get("spec") or {}).get("due")))
                   for o in watch.assignment_objects()] if may_assign else []
    picker = rules.decide(decision, deep_link, settings_problem=problem, namespace_title=course.title,
                          templates=templates, assignments=assignments,
                          may_create=may_assign and bool(storage_templates(watch)))
    return launch, picker, watch, decision


def _refusal(request: web.Request, picker: rules.Picker) -> web.Response | None:
    ctx = web_context(request)
    if picker.outcome == "expired":
        return ctx.error(request, 404, "This link has expired",
                         "The content selection from your LMS is used up or too old. " + AGAIN)
    if picker.outcome == "not-yours":
        return ctx.error(request, 403, "This link is someone else's",
                         "It was opened for another account than the one you are signed in with. " + AGAIN)
    if picker.outcome == "not-staff":
        return ctx.error(request, 403, "Only your course's teachers can do this",
                         "Adding Userland to an LMS course is for its teachers. As a student, open "
                         "Userland from your course's link: it takes you to your own environment.")
    return None


def _page(request: web.Request, launch: LaunchCourse | None, picker: rules.Picker, launch_id: str, *,
          status: int = 200, error: str = "", form: views.Form | None = None, chosen: str = "",
          points: str = "") -> web.Response:
    refused = _refusal(request, picker)
    if refused is not None:
        return refused
    assert launch is not None
    return web_context(request).page(
        request, "lms_deep_link.html", status=status, title="Add Userland to your LMS course", launch=launch,
        picker=picker, request_launch=launch_id, error=error, form=form or views.Form(ref="main"),
        chosen=chosen, points=points or f"{rules.DEFAULT_POINTS:g}",
        link_url=f"/lms/course?launch={quote(launch_id)}")


async def picker_page(request: web.Request) -> web.StreamResponse:
    launch_id = request.query.get("launch", "")
    launch, picker, _, _ = await _picker(request, launch_id)
    return _page(request, launch, picker, launch_id)


def _sync(request: web.Request) -> RosterSync | None:
    found = web_context(request).extras.get(LTI_SYNC)
    return found if isinstance(found, RosterSync) else None


async def choose(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    post = await request.post()
    launch_id = str(post.get("launch") or "")[:100]
    key, points_text = str(post.get("choice") or "")[:400], str(post.get("points") or "")[:20]
    launch, picker, watch, decision = await _picker(request, launch_id)
    if picker.outcome != "choose" or launch is None or watch is None or decision.role is None:
        status = 409 if picker.outcome == "not-linked" else 400
        return _page(request, launch, picker, launch_id, status=status)
    offer = rules.chosen(picker, key)
    if offer is None:
        return ctx.error(request, 403, "You cannot choose this",
                         "Choose one of the things the page offers: this course's environment or its "
                         "assignments.")
    form = form_from_post(post) if offer.kind == "new" else None
    try:
        maximum = rules.points(points_text)
        if form is not None:
            offer = await _create(request, picker, offer, watch, form, decision)
        item, obj = await _item(request, offer, maximum)
    except (DeepLinkError, views.FormProblem) as err:
        return _page(request, launch, picker, launch_id, status=400, error=str(err), form=form,
                     chosen=key, points=points_text)
    sync = _sync(request)
    if sync is None:
        return ctx.error(request, 503, "LMS features are off",
                         "This Userland does not talk to LMSs (an admin turns it on). Nothing was sent.")
    try:
        registration = (await sync.registrations()).get(launch.registration)
        tool_key = await sync.tool_key()
    except (KubeError, SyncUnavailable) as err:
        log.warning("deep link not answered",
                    extra={"event": "lti.deep_link_failed", "error": str(err)[:200]})
        return ctx.error(request, 503, "Userland cannot answer your LMS now",
                         "Its LMS settings could not be read. Try again in a minute; nothing was sent.")
    deep_link, problem = await _raw_request(request, launch_id)
    if registration is None or deep_link is None:
        return ctx.error(request, 400, "Userland cannot answer your LMS",
                         problem or "Your LMS is no longer registered with Userland. " + AGAIN)
    try:
        token = deep_linking_response(
            tool_key, client_id=registration.client_id, platform_issuer=registration.issuer,
            deployment_id=deep_link.deployment_id, settings=deep_link.settings, items=[item], now=time.time(),
            nonce=secrets.token_urlsafe(16))
    except DeepLinkError as err:
        return _page(request, launch, picker, launch_id, status=400, error=str(err), chosen=key,
                     points=points_text)
    # The handoff is used up here: a second post of this page (a replay) finds nothing.
    if await ctx.redis.getdel(lti_course_key(launch_id)) is None:
        return _page(request, launch, rules.Picker("expired"), launch_id)
    if obj is not None:
        await _link_line_item(request, launch, offer, maximum, obj)
    await audit_lms(request, offer.namespace, "lms-deep-link",
                    f"LMS course {launch.title or launch.context} links to {offer.kind} {offer.name}")
    log.info("LMS content item sent", extra={"event": "lti.deep_link_sent", "course": offer.namespace,
                                            "kind": offer.kind, "item": offer.name,
                                            "registration": launch.registration, "login": launch.login})
    return _answer(request, deep_link.settings.return_url, token, item["title"])


async def _create(request: web.Request, picker: rules.Picker, offer: rules.Offer, watch: CourseWatch,
                  form: views.Form, decision: Decision) -> rules.Offer:
    """The new Assignment, created by the assignment form's code, as an "assignment" offer. Its
    students are those of the environment the LMS course's students get (when it keeps files)."""
    storage = [name for name, _ in storage_templates(watch)]
    linked = [o.name for o in picker.offers if o.kind == "template"]
    form.templates = [t for t in linked if t in storage] or storage[:1]
    form.path = form.path.strip() or views.slug(form.title)
    form.ref = form.ref.strip() or "main"
    course = class_state(request).course(offer.namespace)
    if course is None or decision.role is None:
        raise views.FormProblem("This course is gone. " + AGAIN)
    name = await create_assignment(request, course, decision.role, watch, form)
    return rules.Offer("assignment", offer.namespace, name, form.title.strip())


async def _item(request: web.Request, offer: rules.Offer, maximum: float) -> tuple[dict[str, Any],
                                                                                  dict[str, Any] | None]:
    """The content item for `offer`, and the Assignment it opens (None for the environment)."""
    ctx = web_context(request)
    assert ctx.kube is not None
    launch_url = ctx.settings.public_url.rstrip("/") + "/lti/launch"
    if offer.kind == "template":
        template = await ctx.kube.get(TEMPLATES, offer.namespace, offer.name)
        title = str((template.get("spec") or {}).get("displayName") or offer.title)
        return rules.content_item(offer, launch_url=launch_url, title=title), None
    try:
        obj = await ctx.kube.get(ASSIGNMENTS, offer.namespace, offer.name)
    except NotFound:
        raise DeepLinkError("This assignment was deleted in the meantime: choose another.") from None
    spec = obj.get("spec") or {}
    title = str(spec.get("title") or offer.name)
    item = rules.content_item(offer, launch_url=launch_url, title=title, uid=str(obj["metadata"]["uid"]),
                              maximum=maximum, due=rules.due_of(spec))
    return item, obj


async def _link_line_item(request: web.Request, launch: LaunchCourse, offer: rules.Offer, maximum: float,
                          obj: dict[str, Any]) -> None:
    """The Assignment posts its grades to the LMS course's column from now on (web/lti_grades.py)."""
    ctx = web_context(request)
    assert ctx.kube is not None
    title = str((obj.get("spec") or {}).get("title") or offer.name)
    value = rules.line_item_annotation(launch.registration, launch.context, maximum, title)
    await ctx.kube.merge_patch(ASSIGNMENTS, offer.namespace, offer.name,
                               {"metadata": {"annotations": {naming.ANNOTATION_LTI_LINE_ITEM: value}}})


def _answer(request: web.Request, return_url: str, token: str, title: str) -> web.Response:
    parts = urlsplit(return_url)
    response = web_context(request).page(request, "lms_deep_link_sent.html", title="Sending to your LMS",
                                         return_url=return_url, token=token, item_title=title)
    response.headers["Content-Security-Policy"] = ANSWER_CSP.format(origin=f"{parts.scheme}://{parts.netloc}")
    response.headers["Cache-Control"] = "no-store"
    return response


def setup_lti_deep_link_routes(app: web.Application) -> None:
    app.router.add_get(DEEP_LINK_PATH, picker_page)
    app.router.add_post(DEEP_LINK_PATH, choose)
