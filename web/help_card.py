"""The help card of the class dashboard: its data from Redis, rendered for the page and the stream.

Shared by the dashboard page and its live stream (web/routes_course.py) and the help routes
(web/routes_help.py), which own the stores (`HelpServices`).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from userland.platform.clients.grant_store import GrantStore
from userland.web.context import WebContext, identity_of, web_context
from userland.web.help_queue import HelpQueue
from userland.web.rules import help as help_view
from userland.web.rules.courses import Course, CourseRole
from userland.web.rules.dashboard import StudentRow

HELP = "userland.help"  # WebContext.extras key for HelpServices


@dataclass
class HelpServices:
    queue: HelpQueue
    grants: GrantStore


def help_services(request: web.Request) -> HelpServices:
    services: HelpServices = web_context(request).extras[HELP]
    return services


async def queue_view(request: web.Request, course: Course, role: CourseRole,
                     rows: list[StudentRow], now: float) -> help_view.QueueView:
    """The course's help card as the viewer sees it (two Redis reads)."""
    services = help_services(request)
    waiting = await services.queue.waiting(course.namespace)
    grants = await services.grants.live_in(course.namespace, now)
    return help_view.queue_view(course, role, identity_of(request).login, waiting, grants,
                                {r.login: r for r in rows}, now)


def render_card(ctx: WebContext, course: Course, view: help_view.QueueView, csrf: str) -> str:
    return ctx.templates.get_template("_help.html").render(
        course=course, view=view, csrf=csrf, clock=help_view.clock, iso=help_view.iso)
