"""Assignment pages: a course's assignments, the form to create or edit one, one assignment with
its live table of every student, and one student's page (docs/assignments.md, "In the web UI").

Everything shown comes from the web UI's watch of the course (web/state.py: no API call per
page); the table follows the operator's status writes over server-sent events (a coalesced
channel per course, `state.assignments_channel`). The actions (routes_assignment_actions.py)
write the Assignment; the operator does the work.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from userland.platform.clients.kube import ASSIGNMENTS, AlreadyExists, Invalid
from userland.platform.clients.store_client import StoreClient, StoreError
from userland.platform.model import naming
from userland.platform.model.coursework import size_words
from userland.platform.model.keyspace import repository_checks_key
from userland.web.access import Refused, require_course
from userland.web.context import WebContext, identity_of, web_context
from userland.web.routes_audit import record_action
from userland.web.routes_course import (
    HEARTBEAT_SECONDS,
    LIVENESS_SECONDS,
    class_state,
    course_watch,
    stream_quota,
)
from userland.web.rules import assignments as views
from userland.web.rules import lti_grades, security
from userland.web.rules.courses import Course, CourseRole, course_role, may
from userland.web.rules.grading import BAR_WIDTH, score_histogram
from userland.web.state import CourseWatch, assignments_channel

log = logging.getLogger(__name__)
JSON = dict[str, Any]
STORE = "userland.store_client"  # WebContext.extras key for the StoreClient
# Repository checks a member of staff may ask of the store in a window: a teacher fixing a typo
# needs a few; a loop of them would hold the store's check slots for every course (SECURITY.md).
CHECKS_PER_WINDOW = 20
CHECK_WINDOW_SECONDS = 600
# KEYS: the staff member's check counter. ARGV: window. Returns the count in this window.
_COUNT = """
local checks = redis.call('INCR', KEYS[1])
if checks == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return checks
"""


def templates_of(watch: CourseWatch) -> dict[str, JSON]:
    return watch.template_objects()


def _storage_templates(watch: CourseWatch) -> list[tuple[str, str]]:
    """(name, title) of the course's Templates that keep files (only they can receive work)."""
    found = []
    for name, obj in sorted(templates_of(watch).items()):
        spec = obj.get("spec") or {}
        if spec.get("storage"):
            found.append((name, str(spec.get("displayName") or name)))
    return found


async def assignment_or_404(request: web.Request, watch: CourseWatch, course: Course) -> JSON:
    name = request.match_info["name"]
    obj = watch.assignment(name) if naming.is_valid_dns_label(name) else None
    if obj is None:
        raise Refused(web_context(request).error(
            request, 404, "No such assignment", f"{course.title} has no assignment here. Go back to the "
            "course's "
            "assignments and pick one from the list."))
    return obj


def _permissions(role: CourseRole) -> dict[str, bool]:
    return {a: may(role, a) for a in ("assign", "grade", "download", "audit")}


async def list_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "view")
    watch = await course_watch(request, course)
    return ctx.page(request, "assignments.html", nav_courses=True, title=f"Assignments · {course.title}",
                    course=course, rows=views.list_rows(watch.assignment_objects()),
                    allowed=_permissions(role), done=request.query.get("done", ""),
                    when=views.when, can_receive=bool(_storage_templates(watch)))


def _form_page(request: web.Request, course: Course, watch: CourseWatch, form: views.Form, *, editing: bool,
               status: int = 200, error: str = "", past_due: bool = False) -> web.Response:
    return web_context(request).page(
        request, "assignment_form.html", nav_courses=True, status=status,
        title=f"{'Edit' if editing else 'New'} assignment · {course.title}", course=course, form=form,
        editing=editing, templates=_storage_templates(watch), error=error,
        past_due=past_due or form.collect_past)


async def check_source(request: web.Request, course: Course, name: str, spec: JSON) -> None:
    """FormProblem when the repository or its branch or tag cannot be had, asked of the store (the
    web UI fetches no address itself; the store is where the files come from). A private
    repository (its token is in a Secret the web UI does not read) and a store that does not
    answer are not checked: the operator says what is wrong then, on the assignment's page."""
    client = web_context(request).extras.get(STORE)
    source = spec.get("source") or {}
    if not isinstance(client, StoreClient) or source.get("tokenSecret"):
        return
    counter = web_context(request).redis.register_script(_COUNT)
    checks = await counter(keys=[repository_checks_key(identity_of(request).login)],
                           args=[CHECK_WINDOW_SECONDS])
    if int(checks) > CHECKS_PER_WINDOW:
        window = CHECK_WINDOW_SECONDS // 60
        raise views.FormProblem(f"You have checked many repositories in the last {window} minutes: wait a "
                                "few minutes, then save again.")
    try:
        problem = await client.check(course.namespace, name, url=str(source.get("url") or ""),
                                     ref=str(source.get("ref") or ""))
    except StoreError as err:
        log.warning("repository not checked", extra={"course": course.namespace, "error": err.message})
        return
    if problem is not None:
        reason, message = problem
        hint = {"UnknownRef": " Check the branch or tag.", "Busy": ""}.get(reason, " Check its address.")
        raise views.FormProblem(message[:1].upper() + message[1:] + "." + hint)


async def new_form(request: web.Request) -> web.Response:
    course, _ = await require_course(request, request.match_info["ns"], "assign", why="create assignments")
    watch = await course_watch(request, course)
    templates = _storage_templates(watch)
    form = views.Form(templates=[templates[0][0]] if len(templates) == 1 else [], ref="main")
    return _form_page(request, course, watch, form, editing=False)


def _text(form: Any, key: str, limit: int = 2000) -> str:
    value = form.get(key, "")
    return value[:limit] if isinstance(value, str) else ""


def form_from_post(post: Any) -> views.Form:
    return views.Form(
        name=_text(post, "name", 100).strip().lower(), title=_text(post, "title", 300),
        templates=[t for t in post.getall("templates", []) if isinstance(t, str)][:20],
        url=_text(post, "url", 2100), ref=_text(post, "ref", 300), sub_path=_text(post, "sub_path", 300),
        secret=_text(post, "secret", 300), path=_text(post, "path", 300), release=_text(post, "release", 40),
        due=_text(post, "due", 40), zone=_text(post, "zone", 80) or "UTC",
        students=_text(post, "students", 100_000), collect_past=_text(post, "collect_past", 10) == "yes")


class NameTaken(views.FormProblem):
    """The course has an assignment of that short name already."""


async def create_assignment(request: web.Request, course: Course, role: CourseRole, watch: CourseWatch,
                            form: views.Form) -> str:
    """The Assignment the form describes, checked and created (its name); FormProblem in words
    when it cannot be (PastDue, NameTaken). The one way the web UI creates an Assignment: the
    assignment form and the LMS content picker (web/lti_deep_link.py) both come here."""
    ctx = web_context(request)
    spec = views.spec_from_form(form, [name for name, _ in _storage_templates(watch)], now=datetime.now(UTC))
    name = form.name or views.slug(form.title)
    if not views.is_name(name):
        raise views.FormProblem(f"The short name {name[:60]!r} must be up to {views.MAX_NAME} lowercase "
                                "letters, digits and '-' (it is part of the assignment's address).")
    if watch.assignment(name) is None:
        await check_source(request, course, name, spec)
    await ctx.redis.ping()  # the audit log must be able to record it (else 503, nothing done)
    assert ctx.kube is not None
    body = {"apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": name},
            "spec": spec}
    try:
        await ctx.kube.create(ASSIGNMENTS, course.namespace, body)
    except AlreadyExists:
        form.name = name
        raise NameTaken(f"This course already has an assignment called {name!r}: choose another "
                        "short name.") from None
    except Invalid as err:
        raise views.FormProblem(err.message) from None
    await record_action(request, course, role, "assignment_create", [spec["title"]], f"created {name}")
    return name


def storage_templates(watch: CourseWatch) -> list[tuple[str, str]]:
    """(name, title) of the course's Templates that can receive assignments."""
    return _storage_templates(watch)


async def create(request: web.Request) -> web.StreamResponse:
    course, role = await require_course(request, request.match_info["ns"], "assign", why="create assignments")
    watch = await course_watch(request, course)
    form = form_from_post(await request.post())
    try:
        name = await create_assignment(request, course, role, watch, form)
    except views.FormProblem as problem:
        return _form_page(request, course, watch, form, editing=False,
                          status=409 if isinstance(problem, NameTaken) else 400, error=str(problem),
                          past_due=isinstance(problem, views.PastDue))
    raise web.HTTPSeeOther(f"/courses/{course.namespace}/assignments/{name}")


async def edit_form(request: web.Request) -> web.Response:
    course, _ = await require_course(request, request.match_info["ns"], "assign", why="edit assignments")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    zone = request.query.get("zone", "UTC")
    form = views.Form.from_spec(request.match_info["name"], obj.get("spec") or {}, zone)
    return _form_page(request, course, watch, form, editing=True)


async def update(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "assign", why="edit assignments")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    name = request.match_info["name"]
    form = form_from_post(await request.post())
    form.name = name
    current = obj.get("spec") or {}
    try:
        spec = views.spec_from_form(form, [n for n, _ in _storage_templates(watch)], now=datetime.now(UTC),
                                    current_due=current.get("due"))
        before = current.get("source") or {}
        if (before.get("url"), before.get("ref") or "") != (spec["source"]["url"], spec["source"]["ref"]):
            await check_source(request, course, name, spec)
    except views.FormProblem as problem:
        return _form_page(request, course, watch, form, editing=True, status=400, error=str(problem),
                          past_due=isinstance(problem, views.PastDue))
    # A merge patch: fields the form has no say in (grades, extensions) are kept; fields it
    # cleared are removed (null).
    patch: JSON = {key: spec.get(key) for key in ("title", "templates", "source", "path", "release", "due",
                                                 "students")}
    patch["source"] = {**{k: None for k in (current.get("source") or {})}, **spec["source"]}
    await ctx.redis.ping()
    assert ctx.kube is not None
    try:
        await ctx.kube.merge_patch(ASSIGNMENTS, course.namespace, name, {"spec": patch})
    except Invalid as err:
        return _form_page(request, course, watch, form, editing=True, status=400, error=err.message)
    await record_action(request, course, role, "assignment_edit", [spec["title"]], f"edited {name}")
    raise web.HTTPSeeOther(f"/courses/{course.namespace}/assignments/{name}")


def _detail_context(course: Course, role: CourseRole, obj: JSON, watch: CourseWatch) -> dict[str, Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ready: JSON = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    students = views.student_views(obj, templates_of(watch))
    phase = str(status.get("phase") or "")
    words, badge = views.phase_words(status)
    return {"course": course, "asg": (obj.get("metadata") or {}).get("name"), "spec": spec, "summary": status,
            "ready": ready, "students": students, "allowed": _permissions(role), "when": views.when,
            "phase_words": words, "phase_badge": badge, "phase": phase,
            "message": views.teacher_words(str(ready.get("message") or "")),
            "several": len(spec.get("templates") or []) > 1, "source": status.get("source") or {},
            "problems": status.get("problems") or [], "size_words": size_words,
            # The grader's scores, ten ranges (docs/grading.md, "In the web UI").
            "histogram": score_histogram(status.get("students"), _max_score(status)),
            "histogram_width": BAR_WIDTH, "lms_counts": lti_grades.summary(status)}


def _max_score(status: JSON) -> float | None:
    most = (status.get("grading") or {}).get("maxScore")
    return float(most) if isinstance(most, int | float) and not isinstance(most, bool) else None


async def detail(request: web.Request) -> web.Response:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "view")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    context = _detail_context(course, role, obj, watch)
    context["done"] = request.query.get("done", "")
    return ctx.page(request, "assignment.html", nav_courses=True, title=f"{context['spec'].get('title')} · "
                    f"{course.title}", **context)


def render_table(ctx: WebContext, context: dict[str, Any], csrf: str) -> str:
    return ctx.templates.get_template("_assignment_rows.html").render(csrf=csrf, **context)


async def stream(request: web.Request) -> web.StreamResponse:
    """The table's body and the summary, again whenever the Assignment changes (coalesced)."""
    ctx = web_context(request)
    who = identity_of(request)
    course, role = await require_course(request, request.match_info["ns"], "view")
    watch = await course_watch(request, course)
    name = (await assignment_or_404(request, watch, course))["metadata"]["name"]
    quota = stream_quota(ctx)
    if not quota.acquire(who.login):
        return ctx.error(request, 429, "Too many live pages open",
                         "Close some tabs of this course and reload.")
    csrf = security.csrf_token(ctx.settings.identity_secret, who.login, who.session)
    response = web.StreamResponse(headers={**security.SECURITY_HEADERS, "Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store", "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
        with watch.notifier.subscribe(assignments_channel(course.namespace)) as subscription:
            await response.write(b"retry: 3000\n: connected\n\n")
            quiet = 0.0
            # The first pass sends the Assignment as it is now: a change between the page's render
            # and this subscription would otherwise never reach the page (a CI run's page said
            # "New" for 3 minutes of a status long "Failed").
            first: set[str] | None = {name}
            while True:
                keys, first = (first, None) if first else (await subscription.next(LIVENESS_SECONDS), None)
                if keys is None or request.transport is None or request.transport.is_closing():
                    break
                if name not in keys:
                    quiet += LIVENESS_SECONDS
                    if quiet >= HEARTBEAT_SECONDS:
                        quiet = 0.0
                        await response.write(b": heartbeat\n\n")
                    continue
                obj = watch.assignment(name)
                now_course = class_state(request).course(course.namespace)
                if obj is None or now_course is None or course_role(who, now_course) is None:
                    await response.write(b"event: gone\ndata: {}\n\n")
                    break
                context = _detail_context(course, role, obj, watch)
                status = context["summary"]
                payload = {"rows": render_table(ctx, context, csrf),
                           "handedOut": status.get("handedOut") or "",
                           "collected": status.get("collected") or "", "phase": context["phase_words"],
                           "badge": context["phase_badge"], "message": context["message"],
                           "graded": status.get("graded") or "",
                           "histogram": ctx.templates.get_template("_score_histogram.html").render(**context)}
                data = json.dumps(payload, separators=(",", ":"))
                await response.write(f"event: table\ndata: {data}\n\n".encode())
    finally:
        quota.release(who.login)
    return response


async def student_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "view")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    login = request.match_info["login"].lower()
    views_of = [v for v in views.student_views(obj, templates_of(watch)) if v.login == login]
    if not views_of:
        raise Refused(ctx.error(request, 404, "Not in this assignment",
                                f"{login[:39]} does not receive this assignment. Go back to its table."))
    spec = obj.get("spec") or {}
    grade = (spec.get("grades") or {}).get(login) or {}
    zone = request.query.get("zone", "UTC")
    extension = (spec.get("extensions") or {}).get(login)
    return ctx.page(request, "assignment_student.html", nav_courses=True,
                    title=f"{login} · {spec.get('title')} · {course.title}", course=course,
                    asg=obj["metadata"]["name"], spec=spec, login=login, entries=views_of, grade=grade,
                    extension=extension, extension_input=views.local_input(extension or spec.get("due"),
                                                                           zone),
                    allowed=_permissions(role), when=views.when, done=request.query.get("done", ""))


def setup_assignment_routes(app: web.Application) -> None:
    base = "/courses/{ns}/assignments"
    app.router.add_get(base, list_page)
    app.router.add_post(base, create)
    app.router.add_get(f"{base}/new", new_form)
    app.router.add_get(base + "/{name}", detail)
    app.router.add_get(base + "/{name}/stream", stream)
    app.router.add_get(base + "/{name}/edit", edit_form)
    app.router.add_post(base + "/{name}/edit", update)
    app.router.add_get(base + "/{name}/students/{login}", student_page)
