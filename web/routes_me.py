"""GET /me: a student's own environments across every course, in plain words, and their
assignments: where the files are, their deadline, what was kept as theirs, and once collected a
receipt ("collected at 23:59, 14 files, 1.2 MB, receipt 3f2a9c01"); returned grades and comments.

Only the signed-in login's Userlands (spec.user) and their own entries in each Assignment's
status are shown, from the watch cache. Students who are also named staff of a course get links
to those courses. Each course also has its help panel (web/routes_help.py): ask for help, or take
the request back; who of the course's staff has access to the student's environments now (with a
button to end it at once), and who had it.

GET /me/stream keeps the page live (server-sent events, as the class dashboard's stream): it
listens on the notifier (web/notifier.py) of every course for the student's own login (her
environments), the help card's key (a grant or a request of that course: tina joins, alice's
page shows it and the End button) and the course's Assignments (received, collected, feedback
returned), re-renders the page's live part (`_me.html`) and sends it when it differs from what
the page shows. The page's script (static/me.js) swaps only the sections that changed and keeps
what the student is typing.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis.exceptions
from aiohttp import web

from userland.platform.model.grants import MESSAGE_MAX
from userland.web.context import WebContext, identity_of, web_context
from userland.web.help_monitor import HELP_KEY
from userland.web.notifier import EVERYTHING
from userland.web.routes_course import LIVENESS_SECONDS, class_state, stream_quota
from userland.web.routes_help import student_panels
from userland.web.rules import assignments, dashboard, security
from userland.web.rules import help as help_view
from userland.web.rules.courses import course_role
from userland.web.state import ClassState, assignments_channel

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
# The words that age ("for 3 min", "asked 2 min ago") are rendered afresh at least this often.
REFRESH_SECONDS = 30.0


async def me_context(request: web.Request, state: ClassState) -> dict[str, Any]:
    """What `_me.html` (the page's live part) is rendered from."""
    who = identity_of(request)
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
    return {"mine": mine, "staff": staff, "work": work, "when": assignments.when,
            "nav_courses": bool(staff), "now": now, "advice": dashboard.advice,
            "student_reason": dashboard.student_reason, "since_words": dashboard.since_words,
            "help": panels, "clock": help_view.clock, "iso": help_view.iso, "message_max": MESSAGE_MAX,
            "help_down": help_down}


async def me_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    context = await me_context(request, class_state(request))
    return ctx.page(request, "me.html", title="My environments", **context)


def _render_live(ctx: WebContext, request: web.Request, context: dict[str, Any]) -> str:
    who = identity_of(request)
    csrf = security.csrf_token(ctx.settings.identity_secret, who.login, who.session)
    return ctx.templates.get_template("_me.html").render(who=who, csrf=csrf, **context)


def _channels(state: ClassState) -> tuple[str, ...]:
    """Every course's channel and its Assignments' (a course where the student gets her first
    environment while she looks is heard too)."""
    return tuple(c for course in state.courses()
                 for c in (course.namespace, assignments_channel(course.namespace)))


def _concerns(login: str, keys: set[str], heard: set[str]) -> bool:
    """Whether a notice may change her page: her own rows, a whole course, a course's help card,
    or any Assignment of a course (her entry in its status is read when rendering)."""
    if keys & {login, EVERYTHING, HELP_KEY}:
        return True
    return any(channel.endswith("#assignments") for channel in heard)


async def me_stream(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    state = class_state(request)
    quota = stream_quota(ctx)
    if not quota.acquire(who.login):
        log.info("stream refused: too many open", extra={"user": who.login, "limit": quota.limit})
        return ctx.error(request, 429, "Too many live pages open",
                         "Close some tabs of “My environments” and reload this one.")
    try:
        return await _me_stream(request, ctx, state)
    finally:
        quota.release(who.login)


async def _me_stream(request: web.Request, ctx: WebContext, state: ClassState) -> web.StreamResponse:
    login = identity_of(request).login
    response = web.StreamResponse(headers={
        **security.SECURITY_HEADERS, "Content-Type": "text/event-stream", "Cache-Control": "no-store",
        "X-Accel-Buffering": "no"})
    await response.prepare(request)
    await response.write(b"retry: 3000\n: connected\n\n")
    # What the page shows: its own render, as of when it loaded (the first pass below sends
    # anything that changed between the page's render and this stream's start).
    shown = ""
    rendered = 0.0
    quiet = 0.0
    try:
        while True:
            wanted = _channels(state)
            channels = wanted or ("",)  # no course yet: wait for one on an empty channel
            with state.notifier.subscribe(*channels) as subscription:
                due = True  # the first pass renders: anything missed since the page loaded
                while True:
                    if not due:
                        keys = await subscription.next(LIVENESS_SECONDS)
                        if keys is None:
                            return response  # shutting down
                        heard = subscription.take_heard()
                        due = (_concerns(login, keys, heard)
                               or time.monotonic() - rendered >= REFRESH_SECONDS)
                    if request.transport is None or request.transport.is_closing():
                        return response  # the client went away
                    if due:
                        due, quiet = False, 0.0
                        rendered = time.monotonic()
                        html = _render_live(ctx, request, await me_context(request, state))
                        if html != shown:
                            shown = html
                            data = json.dumps({"html": html}, separators=(",", ":"))
                            await response.write(f"event: page\ndata: {data}\n\n".encode())
                    else:
                        quiet += LIVENESS_SECONDS
                        if quiet >= HEARTBEAT_SECONDS:
                            quiet = 0.0
                            await response.write(b": heartbeat\n\n")
                    if _channels(state) != wanted:
                        break  # a course came or went: listen on the new set
    except ConnectionResetError:
        pass  # the student closed the page while it was being written
    return response


def setup_me_routes(app: web.Application) -> None:
    app.router.add_get("/me", me_page)
    app.router.add_get("/me/stream", me_stream)
