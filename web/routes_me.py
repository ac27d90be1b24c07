"""GET /me: a student's own environments across every course, in plain words.

Only the signed-in login's Userlands (spec.user) are shown, from the watch cache. Each one
says its state, links to it when ready, and says what to do when it is missing or failing.
Students who are also named staff of a course get links to those courses.
"""

from __future__ import annotations

import time

from aiohttp import web

from userland.web import dashboard
from userland.web.context import identity_of, web_context
from userland.web.courses import course_role
from userland.web.routes_course import class_state


async def me_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    who = identity_of(request)
    state = class_state(request)
    mine = state.environments_of(who.login)
    staff = [(c, r) for c in state.courses() if (r := course_role(who, c)) is not None]
    return ctx.page(request, "me.html", title="My environments", mine=mine, staff=staff,
                    nav_courses=bool(staff), now=time.time(), advice=dashboard.advice,
                    student_reason=dashboard.student_reason,
                    since_words=dashboard.since_words)


def setup_me_routes(app: web.Application) -> None:
    app.router.add_get("/me", me_page)
