"""What the web UI's handlers share, kept under one `web.AppKey` (no module globals)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jinja2
import redis.asyncio
from aiohttp import web

from userland.platform.clients.kube import KubeClient
from userland.platform.model.identity import Identity
from userland.platform.model.settings import Settings
from userland.web import render
from userland.web.metrics import WebMetrics
from userland.web.rules.courses import course_role

IDENTITY = web.RequestKey("userland_identity", Identity)  # the verified identity
COURSE_DIRECTORY = "userland.course_directory"  # extras key of the course list (web/access.py DIRECTORY)


@dataclass
class WebContext:
    settings: Settings
    templates: jinja2.Environment
    redis: redis.asyncio.Redis
    kube: KubeClient | None = None  # set while the application runs (cleanup_ctx)
    metrics: WebMetrics = field(default_factory=WebMetrics)
    extras: dict[str, Any] = field(default_factory=dict)

    def page(self, request: web.Request, name: str, *, status: int = 200, **context: Any) -> web.Response:
        who = request.get(IDENTITY)
        if "nav_courses" not in context:
            # Every page keeps the navigation its reader has (error pages too): course staff
            # without a global role still get "Courses".
            context["nav_courses"] = who is not None and self._staff_somewhere(who)
        return render.page(self.templates, name, status=status, who=who,
                           secret=self.settings.identity_secret, public_url=self.settings.public_url,
                           **context)

    def _staff_somewhere(self, who: Identity) -> bool:
        directory = self.extras.get(COURSE_DIRECTORY)
        courses = getattr(directory, "courses", None)
        return callable(courses) and any(course_role(who, course) is not None for course in courses())

    def error(self, request: web.Request, status: int, heading: str, message: str) -> web.Response:
        return self.page(request, "error.html", status=status, title=heading, heading=heading,
                         message=message)


WEB = web.AppKey("userland_web", WebContext)


def web_context(request: web.Request) -> WebContext:
    return request.config_dict[WEB]


def identity_of(request: web.Request) -> Identity:
    """The verified identity (the identity middleware has run for every page handler)."""
    who = request.get(IDENTITY)
    if not isinstance(who, Identity):
        raise RuntimeError("identity middleware did not run for this route")
    return who
