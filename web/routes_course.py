"""Staff pages: GET /courses (my courses), GET /courses/{ns} (the class dashboard) and its live
stream GET /courses/{ns}/stream (server-sent events).

Everything comes from the watch cache (web/state.py): no API call per page or per row. The
stream sends, once per notifier tick, the HTML of the rows that changed (rendered with the same
`_row.html` as the page) and the order of the rows the viewer's query selects, so a row that
enters or leaves a filtered or sorted page moves without a reload. Heartbeat comments keep
proxies from closing an idle stream; shutdown ends every stream cleanly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import redis.exceptions
from aiohttp import web

from userland.web.access import Refused, require_course
from userland.web.context import WEB, WebContext, identity_of, web_context
from userland.web.help_card import queue_view, render_card
from userland.web.help_monitor import HELP_KEY
from userland.web.notifier import UserQuota
from userland.web.routes_lti_sync import lms_sync_view
from userland.web.rules import dashboard, security
from userland.web.rules import help as help_view
from userland.web.rules.courses import Action, Course, CourseRole, course_role, may, may_open_unasked
from userland.web.state import STATE, ClassState, CourseWatch

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
HELP_REFRESH_SECONDS = 30.0
LIVENESS_SECONDS = 1.0
STREAM_QUOTA = "userland.stream_quota"  # WebContext.extras key for the per-user UserQuota
ROW_ACTIONS: tuple[Action, ...] = ("start", "restart", "resume", "suspend", "remove")


def class_state(request: web.Request) -> ClassState:
    state = web_context(request).extras.get(STATE)
    if not isinstance(state, ClassState) or not state.namespaces.synced:
        raise Refused(web_context(request).error(request, 503, "Still starting",
                                                 "The web UI is still loading the courses. Try again "
                                                 "in a few seconds."))
    return state


async def course_watch(request: web.Request, course: Course) -> CourseWatch:
    """The course's cache, waiting briefly for a course that just appeared."""
    ctx = web_context(request)
    state = class_state(request)
    deadline = time.monotonic() + 3.0
    while True:
        watch = state.watch(course.namespace)
        if watch is not None and watch.status in ("ready", "degraded"):
            return watch
        if watch is not None and watch.status == "not_set_up":
            raise Refused(ctx.error(request, 503, "This course is not set up yet",
                                    "The web UI is not allowed to read this course yet. An admin needs "
                                    "to finish setting it up (deploy/course/ in the Userland sources)."))
        if time.monotonic() > deadline:
            raise Refused(ctx.error(request, 503, "Still loading this course",
                                    "The course's students are still being loaded. Try again in a "
                                    "few seconds."))
        await asyncio.sleep(0.05)


def course_summary(state: ClassState, course: Course) -> dict[str, Any]:
    watch = state.watch(course.namespace)
    status = watch.status if watch is not None else "starting"
    rows = watch.rows() if watch is not None and status in ("ready", "degraded") else []
    counts = dashboard.phase_counts(rows)
    return {"course": course, "status": status, "students": len(rows),
            "environments": sum(counts.values()), "counts": counts}


async def courses_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    who = identity_of(request)
    state = class_state(request)
    mine: list[tuple[Course, CourseRole]] = []
    for course in state.courses():
        role = course_role(who, course)
        if role is not None:
            mine.append((course, role))
    summaries = [dict(course_summary(state, c), role=r) for c, r in mine]
    return ctx.page(request, "courses.html", title="Courses", summaries=summaries, nav_courses=True,
                    phase_words=dashboard.PHASE_WORDS, badge_class=dashboard.badge_class)


def _row_context(ctx: WebContext, course: Course, role: CourseRole, now: float) -> dict[str, Any]:
    # Ticking environments of several students is a course-wide run (web/rules/selection.py): an
    # assistant, who helps one student at a time, gets each row's own buttons instead.
    return {"course": course, "role": role, "now": now, "may_select": may(role, "start_all"),
            "allowed": {**{a: may(role, a) for a in ROW_ACTIONS}, "open": may_open_unasked(role, course)},
            "since_words": dashboard.since_words, "ago_words": dashboard.ago_words}


async def dashboard_page(request: web.Request) -> web.Response:
    ctx = web_context(request)
    namespace = request.match_info["ns"]
    course, role = await require_course(request, namespace, "view")
    watch = await course_watch(request, course)
    query = dashboard.Query.from_params(request.query)
    now = time.time()
    rows = watch.rows()
    selection = dashboard.select(rows, query, now)
    bulk = [a for a in ("start", "restart", "resume", "suspend", "remove") if may(role, a)]
    help_card, help_down = None, False
    if may(role, "help"):
        try:
            help_card = await queue_view(request, course, role, rows, now)
        except (redis.exceptions.RedisError, OSError) as err:
            # The class list needs no Redis: it stays usable, and says the queue is missing.
            log.warning("help card unavailable", extra={"course": namespace, "error": type(err).__name__})
            help_down = True
    return ctx.page(request, "dashboard.html", title=course.title, selection=selection, query=query,
                    help_card=help_card, help_down=help_down, clock=help_view.clock, iso=help_view.iso,
                    bulk_actions=bulk, may_add=may(role, "add"), may_audit=may(role, "audit"),
                    course_actions=[a for a in ("start_all", "suspend_all", "remove_all") if may(role, a)],
                    status_filters=dashboard.STATUS_FILTERS, sorts=dashboard.SORTS,
                    phase_words=dashboard.PHASE_WORDS, badge_class=dashboard.badge_class,
                    degraded=watch.status == "degraded",
                    lectures=dashboard.lecture_lines(watch.template_objects()),
                    lms=await lms_sync_view(request, namespace),
                    nav_courses=True, **_row_context(ctx, course, role, now))


def stream_quota(ctx: WebContext) -> UserQuota:
    quota = ctx.extras.get(STREAM_QUOTA)
    if not isinstance(quota, UserQuota):
        quota = ctx.extras[STREAM_QUOTA] = UserQuota(ctx.settings.max_streams_per_user)
    return quota


def render_row(ctx: WebContext, row: dashboard.StudentRow, context: dict[str, Any], csrf: str) -> str:
    return ctx.templates.get_template("_row.html").render(row=row, csrf=csrf, **context)


async def stream(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    namespace = request.match_info["ns"]
    course, role = await require_course(request, namespace, "view")
    watch = await course_watch(request, course)
    state = class_state(request)
    csrf = security.csrf_token(ctx.settings.identity_secret, who.login, who.session)
    quota = stream_quota(ctx)
    if not quota.acquire(who.login):
        log.info("stream refused: too many open", extra={"user": who.login, "limit": quota.limit})
        return ctx.error(request, 429, "Too many live pages open",
                         "Close some tabs of the class dashboard and reload this one.")
    try:
        return await _stream(request, ctx, course, role, watch, state, csrf)
    finally:
        quota.release(who.login)


async def _stream(request: web.Request, ctx: WebContext, course: Course, role: CourseRole,
                  watch: CourseWatch, state: ClassState, csrf: str) -> web.StreamResponse:
    who = identity_of(request)
    namespace = course.namespace
    query = dashboard.Query.from_params(request.query)
    response = web.StreamResponse(headers={
        **security.SECURITY_HEADERS, "Content-Type": "text/event-stream", "Cache-Control": "no-store",
        "X-Accel-Buffering": "no"})
    await response.prepare(request)
    visible = [r.login for r in dashboard.select(watch.rows(), query).rows]
    helps = may(role, "help")
    help_shown = time.monotonic()  # the page rendered the card just now
    help_waiting = True  # whether the card shows anyone waiting (their waited time ages)
    try:
        with state.notifier.subscribe(namespace) as subscription:
            await response.write(b"retry: 3000\n: connected\n\n")
            quiet = 0.0
            # The first pass sends every row as it is now: a change between the page's render and
            # this subscription would otherwise never reach the page (its row stuck as rendered).
            first: set[str] | None = {"*"}
            while True:
                # Woken at least every LIVENESS_SECONDS: a client that went away frees its place in
                # the per-user quota within that time, not at the next heartbeat's failed write.
                keys, first = (first, None) if first else (await subscription.next(LIVENESS_SECONDS), None)
                if keys is None:
                    break  # shutting down
                if request.transport is None or request.transport.is_closing():
                    break  # the client went away
                if helps and (HELP_KEY in keys or "*" in keys or (
                        help_waiting and time.monotonic() - help_shown >= HELP_REFRESH_SECONDS)):
                    # The card changed (any replica announces it), or its "waiting 4 min" has aged.
                    card_course = state.course(namespace) or course
                    help_shown = time.monotonic()
                    try:
                        view = await queue_view(request, card_course, role, watch.rows(), time.time())
                    except (redis.exceptions.RedisError, OSError) as err:
                        log.warning("help card not updated", extra={"course": namespace,
                                                                    "error": type(err).__name__})
                    else:
                        card = render_card(ctx, card_course, view, csrf)
                        await response.write(f"event: help\ndata: {json.dumps({'html': card})}\n\n".encode())
                        help_waiting = bool(view.waiting)
                    keys = keys - {HELP_KEY}
                    if not keys:
                        continue
                if not keys:
                    quiet += LIVENESS_SECONDS
                    if quiet >= HEARTBEAT_SECONDS:
                        quiet = 0.0
                        await response.write(b": heartbeat\n\n")
                    continue
                current = state.watch(namespace)
                now_course = state.course(namespace)
                # The course is gone, or the viewer is no longer its staff: the stream ends here.
                if current is None or now_course is None or course_role(who, now_course) is None:
                    await response.write(b"event: gone\ndata: {}\n\n")
                    break
                watch = current
                now = time.time()
                selection = dashboard.select(watch.rows(), query, now)
                order = [r.login for r in selection.rows]
                context = _row_context(ctx, course, role, now)
                send = {r.login: r for r in selection.rows
                        if "*" in keys or r.login in keys or r.login not in visible}
                rows = {login: render_row(ctx, row, context, csrf) for login, row in send.items()}
                visible = order
                payload = {"rows": rows, "order": order, "matched": selection.matched,
                           "total": selection.total, "environments": selection.shown_environments,
                           "matched_environments": selection.matched_environments,
                           "filtered": query.filtered,
                           "counts": [[dashboard.badge_class(k), dashboard.PHASE_WORDS.get(k, k), v]
                                      for k, v in sorted(selection.counts.items())]}
                data = json.dumps(payload, separators=(",", ":"))
                await response.write(f"event: rows\ndata: {data}\n\n".encode())
    except ConnectionResetError:
        # The viewer closed the page while a row was being written: the stream simply ends (not
        # a failure of the web UI, which /metrics and the logs would otherwise count).
        pass
    return response


async def _close_streams(app: web.Application) -> None:
    state = app[WEB].extras.get(STATE)
    if isinstance(state, ClassState):
        state.notifier.close_all()


def setup_course_routes(app: web.Application) -> None:
    app.router.add_get("/courses", courses_page)
    app.router.add_get("/courses/{ns}", dashboard_page)
    app.router.add_get("/courses/{ns}/stream", stream)
    app.on_shutdown.append(_close_streams)
