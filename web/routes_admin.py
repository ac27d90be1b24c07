"""Admin pages: every course with its staff and counts, Templates read-only, login bindings.

Admins only (the gateway-signed role); everyone else gets a 403 page. The figures come from
the API server as the web UI's own ServiceAccount sees it: a namespace labelled as a course
whose Userlands the web UI may not list (no RoleBinding there) is shown as "not set up",
which is exactly what an admin needs to fix. The login-to-GitHub-id bindings belong to the
gateway (auth/admin.py); the web UI only links to them (web never imports auth).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from aiohttp import web

from userland.platform.clients.kube import (
    NAMESPACES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    NotFound,
    PermanentError,
)
from userland.platform.model import naming
from userland.web.access import Refused
from userland.web.context import identity_of, web_context
from userland.web.rules import row_status
from userland.web.rules.courses import Course

JSON = dict[str, Any]
BINDINGS_PATH = "/auth/admin/bindings/"  # served by the gateway (auth/routes.py)


def _require_admin(request: web.Request) -> None:
    if identity_of(request).role != "admin":
        ctx = web_context(request)
        raise Refused(ctx.error(request, 403, "Admins only",
                                "This page is for the platform's admins. Ask one if you need something "
                                "here."))


@dataclass
class CourseSummary:
    course: Course
    set_up: bool = True
    students: int = 0
    environments: int = 0
    ready: int = 0
    templates: list[JSON] = field(default_factory=list)
    problem: str = ""


def summarize_course(course: Course, userlands: list[JSON], templates: list[JSON]) -> CourseSummary:
    """Counts for the admin table (pure)."""
    users = {naming.login_of((u.get("spec") or {}).get("user")) for u in userlands}
    ready = sum(1 for u in userlands if row_status.phase_of(u) == "Ready")  # what the rows say
    return CourseSummary(course=course, students=len(users - {""}), environments=len(userlands), ready=ready,
                         templates=[template_view(t) for t in templates])


def template_view(obj: JSON) -> JSON:
    """What the read-only Templates page shows of one Template (pure)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    routing = spec.get("routing") or {}
    pod_spec = spec.get("podSpec") or {}
    images = [str(c.get("image") or "") for key in ("initContainers", "containers")
              for c in (pod_spec.get(key) or []) if isinstance(c, Mapping)]
    ready = next((c for c in status.get("conditions") or []
                  if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    storage = spec.get("storage") if isinstance(spec.get("storage"), Mapping) else None
    return {
        "name": str(meta.get("name") or ""),
        "title": str(spec.get("displayName") or ""),
        "description": str(spec.get("description") or ""),
        "routing": (f"host {routing['host']}" if routing.get("host") else
                    f"path {routing['pathPrefix']}" if routing.get("pathPrefix") else "none"),
        "images": [i for i in images if i],
        "users": int(status.get("userlands") or 0),
        "ready": None if ready is None else str(ready.get("status")) == "True",
        "reason": str((ready or {}).get("reason") or ""),
        "message": str((ready or {}).get("message") or ""),
        "storage": "none" if storage is None else (
            f"{storage.get('size', '?')}, "
            f"{'deleted' if storage.get('reclaimPolicy') == 'Delete' else 'kept'} when a student is removed"),
        "self_service": bool(spec.get("selfService")),
    }


async def _course_summary(kube: KubeClient, course: Course) -> CourseSummary:
    try:
        userlands, templates = await asyncio.gather(kube.list(USERLANDS, course.namespace),
                                                    kube.list(TEMPLATES, course.namespace))
    except NotFound:
        return CourseSummary(course=course, set_up=False, problem="the namespace is being deleted")
    except PermanentError as err:
        if err.status in (401, 403):
            return CourseSummary(course=course, set_up=False, problem="not set up (no RoleBinding)")
        raise
    return summarize_course(course, userlands["items"], templates["items"])


async def _courses(request: web.Request) -> list[CourseSummary]:
    ctx = web_context(request)
    assert ctx.kube is not None
    namespaces = (await ctx.kube.list(NAMESPACES, label_selector=f"{naming.LABEL_COURSE}=true"))["items"]
    courses = sorted((Course.from_namespace(ns) for ns in namespaces), key=lambda c: c.namespace)
    return list(await asyncio.gather(*(_course_summary(ctx.kube, c) for c in courses)))


async def admin_page(request: web.Request) -> web.StreamResponse:
    _require_admin(request)
    ctx = web_context(request)
    summaries = await _courses(request)
    totals = {"courses": len(summaries), "students": sum(s.students for s in summaries),
              "environments": sum(s.environments for s in summaries),
              "ready": sum(s.ready for s in summaries)}
    admins = sorted(ctx.settings.admins)
    who = identity_of(request)
    # The viewer is an admin by their signed sign-in (a team, or the gateway's own list): never
    # "none" to an admin reading the page.
    if who.login.lower() not in {a.lower() for a in admins}:
        admins.append(f"{who.login} (you)")
    return ctx.page(request, "admin.html", title="Admin", summaries=summaries, totals=totals,
                    admins=admins, instructors=sorted(ctx.settings.instructors))


async def admin_templates(request: web.Request) -> web.StreamResponse:
    _require_admin(request)
    ctx = web_context(request)
    summaries = await _courses(request)
    return ctx.page(request, "admin_templates.html", title="Templates", summaries=summaries)


async def binding_lookup(request: web.Request) -> web.StreamResponse:
    """A GET form can't put the login in the gateway's path: check it, then redirect there."""
    _require_admin(request)
    ctx = web_context(request)
    text = request.query.get("login", "").strip().lstrip("@")
    if not naming.is_valid_login(text):
        return ctx.error(request, 400, "Not a GitHub login",
                         "Type a GitHub login: 1-39 letters, digits or single hyphens.")
    raise web.HTTPFound(f"{ctx.settings.public_url}{BINDINGS_PATH}{quote(text.lower())}")


def setup_admin_routes(app: web.Application) -> None:
    app.router.add_get("/admin", admin_page)
    app.router.add_get("/admin/templates", admin_templates)
    app.router.add_get("/admin/bindings", binding_lookup)
