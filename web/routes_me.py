"""GET /me: a student's own environments across every course, in plain words, and their
assignments: where the files are, their deadline, what was kept as theirs, and once collected a
receipt ("collected at 23:59, 14 files, 1.2 MB, receipt 3f2a9c01"); returned grades and comments.

Only the signed-in login's Userlands (spec.user) and their own entries in each Assignment's
status are shown, from the watch cache. Students who are also named staff of a course get links
to those courses. Each course also has its help panel (web/routes_help.py): ask for help, or take
the request back; who of the course's staff has access to the student's environments now (with a
button to end it at once), and who had it.
"""

from __future__ import annotations

import logging
import time

import redis.exceptions
from aiohttp import web

from userland.platform.grants import MESSAGE_MAX
from userland.web import assignments, dashboard
from userland.web import help as help_view
from userland.web.context import identity_of, web_context
from userland.web.courses import course_role
from userland.web.routes_course import class_state
from userland.web.routes_help import student_panels

log = logging.getLogger(__name__)


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
    now = time.time()
    try:
        panels, help_down = await student_panels(request, mine, now), False
    except (redis.exceptions.RedisError, OSError) as err:
        # The student's environments need no Redis: the page stays, without the help panels.
        log.warning("help panels unavailable", extra={"error": type(err).__name__})
        panels, help_down = {}, bool(mine)
    return ctx.page(request, "me.html", title="My environments", mine=mine, staff=staff, work=work,
                    when=assignments.when,
                    nav_courses=bool(staff), now=now, advice=dashboard.advice,
                    student_reason=dashboard.student_reason,
                    since_words=dashboard.since_words, help=panels, clock=help_view.clock,
                    iso=help_view.iso, message_max=MESSAGE_MAX, help_down=help_down)


def setup_me_routes(app: web.Application) -> None:
    app.router.add_get("/me", me_page)
