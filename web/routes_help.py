"""Help in the lab: students ask, staff join, either ends it (platform/model/grants.py says what a grant is).

Students, on "my environments" (web/routes_me.py shows the panel):
- POST /me/help            ask for help in a course where they have an environment (one open
                           request per course; asking again updates the message);
- POST /me/help/cancel     take the request back;
- POST /me/help/end        end a member of staff's access to their environments now.
Staff, on the class dashboard (the help card, live through the dashboard's stream):
- POST /courses/{ns}/help/join   join a student: a grant to their environments in this course,
                                 for the course's limit. A student who asked: any member of
                                 staff; one who did not: only instructors and admins, and only
                                 in a course with `staff-access: instructors`. The request
                                 leaves the queue; pressing Join twice gives one grant; at most
                                 JOINS_PER_WINDOW joins per window (web/help_queue.py), then 429;
- GET  /courses/{ns}/help/{student}   the helping page: the student's environments to open,
                                 the message, the time left, Done;
- POST /courses/{ns}/help/done   end a grant (one's own; instructors and admins: anyone's).
Every grant's start and end is audited (web/help_records.py). Every POST passes the app's
Origin and CSRF checks (web/app.py); Redis failures are the app's 503 page.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web

from userland.platform.clients.grant_store import GrantStore
from userland.platform.model import naming
from userland.web.access import Refused, require_course
from userland.web.context import WEB, identity_of, web_context
from userland.web.help_card import HELP, HelpServices, help_services
from userland.web.help_queue import HelpQueue, TooManyAsks, TooManyJoins
from userland.web.help_records import record_grant
from userland.web.routes_audit import audit_log
from userland.web.routes_course import class_state, course_watch
from userland.web.rules import help as help_view
from userland.web.rules.courses import Course, may_join
from userland.web.rules.dashboard import StudentRow, duration_words

log = logging.getLogger(__name__)

def _field(form: Any, name: str, limit: int = 300) -> str:
    value = form.get(name, "")
    return value[:limit].strip() if isinstance(value, str) else ""


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})


# -- students ---------------------------------------------------------------------------------


async def _student_course(request: web.Request, form: Any) -> tuple[Course, StudentRow]:
    """The course named in the form, where the signed-in student has an environment."""
    ctx = web_context(request)
    who = identity_of(request)
    namespace = _field(form, "course", 63)
    state = class_state(request)
    course = state.course(namespace) if naming.is_valid_dns_label(namespace) else None
    watch = state.watch(namespace) if course is not None else None
    row = watch.row(who.login) if watch is not None else None
    if course is None or row is None:
        raise Refused(ctx.error(request, 404, "No such course",
                                "You have no environment in that course. Go back to your environments "
                                "and ask for help from there."))
    return course, row


async def ask(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    form = await request.post()
    course, _row = await _student_course(request, form)
    try:
        opened = await help_services(request).queue.ask(course.namespace, who.login, _field(form, "message"))
    except TooManyAsks:
        return ctx.error(request, 429, "Too many requests for help",
                         "You asked for help many times in the last few minutes. Wait a few minutes, "
                         "or tell your course's staff in person.")
    log.info("help asked", extra={"event": "help.ask", "course": course.namespace, "login": who.login,
                                  "new": opened})
    if opened:
        ctx.metrics.help_asked(course.namespace)
    return _see_other(f"/me#help-{course.namespace}")


async def cancel(request: web.Request) -> web.StreamResponse:
    who = identity_of(request)
    form = await request.post()
    course, _row = await _student_course(request, form)
    taken = await help_services(request).queue.take(course.namespace, who.login)
    log.info("help cancelled", extra={"event": "help.cancel", "course": course.namespace, "login": who.login,
                                      "was_open": taken is not None})
    return _see_other(f"/me#help-{course.namespace}")


async def student_end(request: web.Request) -> web.StreamResponse:
    """The student ends a member of staff's access to their environments, now."""
    ctx = web_context(request)
    who = identity_of(request)
    form = await request.post()
    course, row = await _student_course(request, form)
    services = help_services(request)
    grant = await services.grants.get(_field(form, "grant", 64))
    if grant is None or grant.student != who.login or grant.course != course.namespace:
        # Already over (ended elsewhere, run out), or not about this student: nothing to end.
        return _see_other(f"/me#help-{course.namespace}")
    ended = await services.grants.end(grant.id, by=who.login, reason="student")
    if ended is not None:
        ctx.metrics.help_ended(course.namespace, "student")
        await record_grant(audit_log(request), ctx.kube, ended, row, actor=who.login, actor_role="student",
                           started=False)
    return _see_other(f"/me#help-{course.namespace}")


async def student_panels(request: web.Request, courses: list[tuple[Course, StudentRow]],
                         now: float) -> dict[str, help_view.StudentHelp]:
    """The help panel of each of the student's courses (two Redis reads per course)."""
    who = identity_of(request)
    services = help_services(request)
    panels = {}
    for course, _row in courses:
        request_ = await services.queue.get(course.namespace, who.login)
        history = await services.grants.history(course.namespace, who.login)
        panels[course.namespace] = help_view.student_help(course, who.login, request_, history, now)
    return panels


# -- staff ------------------------------------------------------------------------------------


async def join(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    course, role = await require_course(request, request.match_info["ns"], "help", "help students")
    form = await request.post()
    student = _field(form, "student", 39).lower()
    watch = await course_watch(request, course)
    row = watch.row(student) if naming.is_valid_login(student) else None
    if row is None:
        return ctx.error(request, 404, "No such student",
                         f"{student or 'That student'} has no environment in {course.title}.")
    if student == who.login:
        return ctx.error(request, 400, "That is you", "You cannot join your own environments as staff.")
    services = help_services(request)
    helping = f"/courses/{course.namespace}/help/{student}"
    if await services.grants.live_for(course.namespace, student, who.login) is not None:
        return _see_other(helping)  # joined already (a second click, another tab)
    if not may_join(role, course, asked=True):
        raise Refused(ctx.error(request, 403, "Not allowed", "You cannot help students of this course."))
    try:
        await services.queue.count_join(course.namespace, who.login)
    except TooManyJoins:
        log.info("help join refused: too many", extra={"event": "help.join_rate", "course": course.namespace,
                                                       "login": who.login})
        return ctx.error(request, 429, "Too many joins",
                         "You joined students of this course many times in the last few minutes. Wait a "
                         "few minutes and try again; the student's request stays in the queue.")
    taken = await services.queue.take(course.namespace, student)
    if taken is None and not may_join(role, course, asked=False):
        others = [g.staff for g in await services.grants.live_in(course.namespace) if g.student == student]
        why = (f"{', '.join(others)} is already helping {student}." if others
               else f"{student} has not asked for help (or took the request back).")
        return ctx.error(request, 403, f"{student} did not ask for help",
                         f"{why} In this course staff open a student's environments only when the student "
                         "asks for help.")
    grant, made = await services.grants.create(
        course=course.namespace, student=student, staff=who.login, role=role,
        basis="request" if taken is not None else "instructors", seconds=course.help.limit_seconds,
        message=taken.message if taken is not None else "", staff_global_role=who.role, staff_teams=who.teams)
    if made:
        log.info("help joined", extra={"event": "help.join", "course": course.namespace, "login": who.login,
                                       "student": student, "basis": grant.basis})
        ctx.metrics.help_granted(course.namespace, grant.basis,
                                 None if taken is None else grant.started - taken.asked)
        await record_grant(audit_log(request), ctx.kube, grant, row, actor=who.login, actor_role=role,
                           started=True)
    return _see_other(helping)


async def helping_page(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    course, role = await require_course(request, request.match_info["ns"], "help", "help students")
    student = request.match_info["student"].lower()
    grant = (await help_services(request).grants.live_for(course.namespace, student, who.login)
             if naming.is_valid_login(student) else None)
    if grant is None:
        return ctx.error(request, 404, f"You are not helping {student}",
                         "Your access has ended, or you have not joined. The help queue is on the class "
                         "dashboard.")
    watch = await course_watch(request, course)
    row = watch.row(student)
    now = time.time()
    return ctx.page(request, "helping.html", title=f"Helping {student} · {course.title}", nav_courses=True,
                    course=course, role=role, grant=grant, row=row, left=duration_words(grant.expires - now),
                    clock=help_view.clock, iso=help_view.iso)


async def done(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    course, role = await require_course(request, request.match_info["ns"], "help", "help students")
    form = await request.post()
    services = help_services(request)
    grant = await services.grants.get(_field(form, "grant", 64))
    dashboard = f"/courses/{course.namespace}#help"
    if grant is None or grant.course != course.namespace:
        return _see_other(dashboard)  # over already
    if grant.staff != who.login and role not in ("instructor", "admin"):
        raise Refused(ctx.error(request, 403, "Not allowed",
                                f"Only {grant.staff} or an instructor can end {grant.staff}'s access."))
    ended = await services.grants.end(grant.id, by=who.login, reason="done" if grant.staff == who.login
                                      else "ended")
    if ended is not None:
        ctx.metrics.help_ended(course.namespace, ended.end_reason)
        watch = await course_watch(request, course)
        await record_grant(audit_log(request), ctx.kube, ended, watch.row(ended.student), actor=who.login,
                           actor_role=role, started=False)
    return _see_other(dashboard)


def setup_help_routes(app: web.Application) -> None:
    ctx = app[WEB]
    ctx.extras[HELP] = HelpServices(queue=HelpQueue(ctx.redis), grants=GrantStore(ctx.redis))
    app.router.add_post("/me/help", ask)
    app.router.add_post("/me/help/cancel", cancel)
    app.router.add_post("/me/help/end", student_end)
    app.router.add_post("/courses/{ns}/help/join", join)
    app.router.add_post("/courses/{ns}/help/done", done)
    app.router.add_get("/courses/{ns}/help/{student}", helping_page)
