"""`/lms/course/new`: an admin makes a new course for an unlinked LMS course (docs/lti.md).

The web UI may create no namespace, RoleBinding or Template (docs/decisions.md): it asks. The
linking page (web/lti_link.py) shows admins a second form, "Create a new course" (its name
suggested from the LMS course's title, editable; the environment to copy, from those the page
offers). Its POST (CSRF-checked by the app's middleware) is checked here (admin, an offered
environment, a valid name not taken) and becomes a `CourseRequest` in the LTI namespace
(platform/model/course_request.py); the operator makes the course and links the LMS course
(operator/course_requests.py). The admin then waits on `GET /lms/course/new?launch=..&request=..`
("being created", refreshed every two seconds) and lands on the new course's dashboard once the
request is Ready, or reads what went wrong.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from userland.platform.clients.kube import COURSE_REQUESTS, NAMESPACES, AlreadyExists, NotFound
from userland.platform.model import course_request as model
from userland.web.context import identity_of, web_context
from userland.web.lti_link import PATH, audit_lms, decide_launch
from userland.web.rules.lti_link import may_link
from userland.web.rules.new_course import offer
from userland.web.state import STATE, ClassState

log = logging.getLogger(__name__)
NEW_PATH = "/lms/course/new"
REFRESH_SECONDS = 2
SHOW_WAIT_SECONDS = 5.0
# The operator's reasons, in words for the admin on this page.
REFUSALS = {
    "NameTaken": "That name is already used in the cluster by something that is not this course. "
                 "Go back and choose another name.",
    "TemplateNotFound": "The environment to copy is gone. Go back and choose another one.",
}


async def create_course(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    form = await request.post()
    launch_id = str(form.get("launch") or "")
    launch, decision, _ = await decide_launch(request, launch_id)
    if who.role != "admin":
        return ctx.error(request, 403, "Only Userland admins can create courses",
                         "Ask a Userland admin to create the course, or link this LMS course to one "
                         "you teach.")
    found = offer(True, launch, decision)
    if found is None or launch is None:
        if decision.outcome == "linked":
            raise web.HTTPSeeOther(f"{PATH}?launch={quote(launch_id)}")
        return ctx.error(request, 409, "This LMS course cannot get a new course now",
                         "It is linked already, or the link from the LMS has expired. Open Userland "
                         "again from your LMS course.")
    name = str(form.get("name") or "").strip()
    namespace, _, template = str(form.get("template") or "").partition("/")
    title = str(form.get("title") or "").strip() or found.title
    if not may_link(decision, namespace, template):
        return ctx.error(request, 403, "You cannot copy this environment",
                         "Choose one of the environments the page offers.")
    problem = model.course_name_problem(name) or await _taken(request, name)
    if problem:
        return ctx.error(request, 400, "Choose another name for the course", problem)
    assert ctx.kube is not None
    wanted = model.CourseRequest(name, title[:model.TITLE_MAX], namespace, template,
                                 launch.link(template), who.login)
    try:
        await ctx.kube.create(COURSE_REQUESTS, ctx.settings.lti_namespace, model.request_body(name, wanted))
    except AlreadyExists:
        return ctx.error(request, 409, "This course is being created already",
                         "Someone asked for a course with this name a moment ago. Choose another name.")
    await audit_lms(request, name, "lms-new-course",
                    f"asked for a new course {name!r} for LMS course {found.title}, "
                    f"with {template} from {namespace}")
    log.info("new course requested", extra={"event": "lti.course_requested", "course": name,
                                            "template": f"{namespace}/{template}", "login": who.login})
    raise web.HTTPSeeOther(f"{NEW_PATH}?{urlencode({'launch': launch_id, 'request': name})}")


async def _taken(request: web.Request, name: str) -> str:
    ctx = web_context(request)
    assert ctx.kube is not None
    try:
        await ctx.kube.get(NAMESPACES, None, name)
    except NotFound:
        return ""
    return f"The name {name!r} is already used in the cluster. Choose another name."


async def creating_page(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    if who.role != "admin":
        return ctx.error(request, 403, "Only Userland admins can create courses",
                         "Ask a Userland admin to create the course.")
    name = request.query.get("request", "")
    if model.course_name_problem(name):
        return ctx.error(request, 404, "No such course request", "Open Userland again from your LMS course.")
    assert ctx.kube is not None
    try:
        obj: dict[str, Any] = await ctx.kube.get(COURSE_REQUESTS, ctx.settings.lti_namespace, name)
    except NotFound:
        return ctx.error(request, 404, "No such course request", "Open Userland again from your LMS course.")
    condition = model.ready_of(obj)
    if condition.get("status") == "True":
        await _show_at_once(request, name)
        raise web.HTTPSeeOther(f"/courses/{quote(name)}")
    reason = str(condition.get("reason") or "")
    if reason in REFUSALS or reason == "Invalid":
        return ctx.error(request, 409, "The course could not be created",
                         REFUSALS.get(reason) or str(condition.get("message") or ""))
    return ctx.page(request, "lms_course_new.html", title="Your course is being created", course=name,
                    course_title=str((obj.get("spec") or {}).get("title") or name), refresh=REFRESH_SECONDS,
                    back=f"{PATH}?launch={quote(request.query.get('launch', ''))}")


async def _show_at_once(request: web.Request, name: str) -> None:
    """Let the dashboard show the new course now: its namespace seen by the course list's watch,
    and its objects read (the web UI may have seen the namespace before the operator made its
    RoleBinding: looked at again at once), waiting a few seconds at most."""
    state = web_context(request).extras.get(STATE)
    if not isinstance(state, ClassState):
        return
    reprobed = False
    for _ in range(int(SHOW_WAIT_SECONDS / 0.1)):
        watch = state.watches.get(name)
        if watch is not None and not reprobed:
            watch, reprobed = state.reprobe(name), True
        if watch is not None and watch.status not in ("starting", "not_set_up"):
            return
        await asyncio.sleep(0.1)


def setup_new_course_routes(app: web.Application) -> None:
    app.router.add_post(NEW_PATH, create_course)
    app.router.add_get(NEW_PATH, creating_page)
