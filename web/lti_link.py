"""`/lms/course`: an LMS course linked to a Userland course, and LMS staff given their course role.

The gateway sends an Instructor's or TeachingAssistant's launch here with the id of what it
kept of the launch (Redis, `lti_course_key`, 30 minutes; only for the login it names). The
decision is web/rules/lti_link.py; this module reads the courses, writes the namespace's
annotations (platform/model/lti_links.py) and records the audit entry:

- GET: the LMS course linked already -> the launcher's staff role written in the course(s) it
  feeds (`userland.dev/lti-instructors` or `lti-assistants`), then its class dashboard; not
  linked -> the choice of courses the instructor teaches (or why there is none);
- POST (CSRF-checked by the app's middleware): the chosen course and Template linked
  (`userland.dev/lti-links`) and the instructor made its instructor by the LMS.

Writes are merge patches carrying the namespace's resourceVersion, so two instructors linking
at once cannot lose each other's link (a conflict is read again and retried).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web

from userland.platform.clients.kube import NAMESPACES, TEMPLATES, Conflict, KubeError
from userland.platform.model import naming
from userland.platform.model.keyspace import lti_course_key
from userland.platform.model.lti_links import (
    ANNOTATION_LINKS,
    LmsLink,
    StaffRole,
    course_links,
    linked_courses,
    links_value,
    staff_patch,
    with_link,
)
from userland.web.audit import AuditEntry, AuditLog
from userland.web.context import WebContext, identity_of, web_context
from userland.web.routes_audit import AUDIT
from userland.web.rules.courses import Course, course_role
from userland.web.rules.lti_link import Decision, LaunchCourse, decide, may_link, namespace_annotations
from userland.web.rules.new_course import offer

log = logging.getLogger(__name__)
PATH = "/lms/course"
DEEP_LINK_PATH = "/lms/deep-link"  # web/lti_deep_link.py
AGAIN = "Open Userland again from your LMS course."


async def read_launch(ctx: WebContext, launch_id: str) -> LaunchCourse | None:
    if not launch_id or len(launch_id) > 100:
        return None
    raw = await ctx.redis.get(lti_course_key(launch_id))
    if raw is None:
        return None
    try:
        return LaunchCourse.parse(json.loads(raw))
    except ValueError:
        return None


async def _courses(ctx: WebContext) -> list[dict[str, Any]]:
    assert ctx.kube is not None
    found = await ctx.kube.list(NAMESPACES, label_selector=f"{naming.LABEL_COURSE}=true")
    # A course being deleted is offered nothing and feeds nothing.
    return [o for o in found.get("items") or [] if not o["metadata"].get("deletionTimestamp")]


async def decide_launch(request: web.Request, launch_id: str) -> tuple[LaunchCourse | None, Decision,
                                                                  dict[str, dict[str, Any]]]:
    ctx = web_context(request)
    who = identity_of(request)
    launch = await read_launch(ctx, launch_id)
    namespaces = await _courses(ctx)
    by_name = {str(o["metadata"]["name"]): o for o in namespaces}
    linked = ([ns for ns, _ in linked_courses(namespaces, launch.registration, launch.context)]
              if launch is not None else [])
    courses = [Course.from_namespace(o) for o in namespaces]
    templates: dict[str, list[str]] = {}
    if launch is not None and launch.login == who.login and launch.role == "instructor" and not linked:
        assert ctx.kube is not None
        for course in courses:
            if course_role(who, course) not in ("instructor", "admin"):
                continue
            try:
                items = (await ctx.kube.list(TEMPLATES, course.namespace)).get("items") or []
            except KubeError:  # a course the web UI may not read yet (not set up): not offered
                continue
            templates[course.namespace] = [str(t["metadata"]["name"]) for t in items]
    return launch, decide(launch, who, linked, courses, templates), by_name


async def write_namespace(ctx: WebContext, namespace: str,
                 change: Any) -> dict[str, Any]:
    """Merge-patch the namespace's annotations `change(annotations)` gives, guarded by its
    resourceVersion; read again and retry on a conflict."""
    assert ctx.kube is not None
    for attempt in range(5):
        obj = await ctx.kube.get(NAMESPACES, None, namespace)
        annotations: dict[str, str] = change(namespace_annotations(obj))
        if not annotations:
            return obj
        try:
            patched = await ctx.kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
                "resourceVersion": obj["metadata"]["resourceVersion"], "annotations": annotations}})
        except Conflict:
            if attempt == 4:
                raise
            continue
        directory = ctx.extras.get("userland.course_directory")
        informer = getattr(directory, "namespaces", None)
        if informer is not None:  # the dashboard's gate reads the watch: let it see this at once
            informer.put(patched)
        return patched
    raise AssertionError("unreachable")


def grant(launch: LaunchCourse, role: StaffRole, link: LmsLink | None) -> Any:
    def change(annotations: Mapping[str, Any]) -> dict[str, str]:
        patch = staff_patch(annotations, launch.login, role)
        links = course_links({"metadata": {"annotations": annotations}})
        updated = with_link(links, link) if link is not None else links
        if updated != links:
            patch[ANNOTATION_LINKS] = links_value(updated)
        return patch
    return change


async def audit_lms(request: web.Request, course: str, action: str, result: str) -> None:
    who = identity_of(request)
    audit: AuditLog | None = web_context(request).extras.get(AUDIT)
    if audit is not None:
        await audit.record(AuditEntry(time=time.time(), actor=who.login, role="lms", action=action,
                                      course=course, targets=(), result=result))


def _dashboard(namespaces: tuple[str, ...]) -> str:
    return f"/courses/{quote(namespaces[0])}" if len(namespaces) == 1 else "/courses"


async def course_page(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    launch, decision, _ = await decide_launch(request, request.query.get("launch", ""))
    if decision.outcome == "linked" and launch is not None and decision.role is not None:
        for namespace in decision.linked:
            # A newer launch may carry newer service URLs: the link keeps them.
            await write_namespace(ctx, namespace, grant(launch, decision.role, launch.link("-")))
            where = launch.title or launch.context
            await audit_lms(request, namespace, "lms-role",
                         f"{launch.login} is {decision.role} here, as in LMS course {where}")
        raise web.HTTPSeeOther(_dashboard(decision.linked))
    return _render(request, launch, decision, request.query.get("launch", ""))


def _render(request: web.Request, launch: LaunchCourse | None, decision: Decision,
            launch_id: str) -> web.Response:
    ctx = web_context(request)
    if decision.outcome == "expired":
        return ctx.error(request, 404, "This link has expired",
                         "The link from your LMS course is used up or too old. " + AGAIN)
    if decision.outcome == "not-yours":
        return ctx.error(request, 403, "This link is someone else's",
                         "It was opened for another account than the one you are signed in with. " + AGAIN)
    if decision.outcome == "not-staff":
        return ctx.error(request, 403, "Only your course's teachers can do this",
                         "Linking an LMS course to Userland is for its instructors. As a student, "
                         "open Userland from your course's link: it takes you to your own environment.")
    assert launch is not None
    # Admins may also ask for a new course (web/lti_new_course.py): its form, if any.
    new_course = offer(identity_of(request).role == "admin", launch, decision)
    return ctx.page(request, "lms_course.html", title="Link your LMS course", launch=launch,
                    decision=decision, request_launch=launch_id, new_course=new_course)


async def link_course(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    form = await request.post()
    launch_id = str(form.get("launch") or "")
    namespace, _, template = str(form.get("choice") or "").partition("/")
    launch, decision, _ = await decide_launch(request, launch_id)
    if decision.outcome != "choose" or launch is None:
        if decision.outcome == "linked":  # linked a moment ago (another instructor, a second tab)
            raise web.HTTPSeeOther(f"{PATH}?launch={quote(launch_id)}")
        return _render(request, launch, decision, launch_id)
    if not may_link(decision, namespace, template):
        return ctx.error(request, 403, "You cannot link this course",
                         "Choose one of the courses the page offers: those you teach.")
    await write_namespace(ctx, namespace, grant(launch, "instructor", launch.link(template)))
    await audit_lms(request, namespace, "lms-link",
                 f"LMS course {launch.title or launch.context} linked; its students get {template}")
    log.info("LMS course linked", extra={"event": "lti.course_linked", "course": namespace,
                                         "template": template, "registration": launch.registration,
                                         "login": launch.login})
    if launch.picker:  # a deep-linking launch: on to choose what the LMS's link opens
        raise web.HTTPSeeOther(f"{DEEP_LINK_PATH}?launch={quote(launch_id)}")
    raise web.HTTPSeeOther(f"/courses/{quote(namespace)}")


def setup_lti_link_routes(app: web.Application) -> None:
    app.router.add_get(PATH, course_page)
    app.router.add_post(PATH, link_course)
