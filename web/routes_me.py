"""GET /me: a student's own environments across every course, in plain words, and their
assignments: where the files are, their deadline, what was kept as theirs, and once collected a
receipt ("collected at 23:59, 14 files, 1.2 MB, receipt 3f2a9c01"); returned grades and comments.

Only the signed-in login's Userlands (spec.user) and their own entries in each Assignment's
status are shown, from the watch cache. Students who are also named staff of a course get links
to those courses.
"""

from __future__ import annotations

import time

from aiohttp import web

from userland.web import assignments, dashboard
from userland.web.context import identity_of, web_context
from userland.web.courses import course_role
from userland.web.routes_course import class_state


async def me_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    who = identity_of(request)
    state = class_state(request)
    mine = state.environments_of(who.login)
    staff = [(c, r) for c in state.courses() if (r := course_role(who, c)) is not None]
    work = []
    for course in state.courses():
        watch = state.watch(course.namespace)
        if watch is not None and watch.status in ("ready", "degraded"):
            found = assignments.my_assignments(watch.assignment_objects(), who.login,
                                               watch.template_objects())
            if found:
                work.append((course, found))
    return ctx.page(request, "me.html", title="My environments", mine=mine, staff=staff, work=work,
                    when=assignments.when,
                    nav_courses=bool(staff), now=time.time(), advice=dashboard.advice,
                    student_reason=dashboard.student_reason,
                    since_words=dashboard.since_words)


def setup_me_routes(app: web.Application) -> None:
    app.router.add_get("/me", me_page)
