"""Self-service Templates: a student without an environment of one gets a page with a button, and
the environment is created when they press it.

Created only by the form's POST, with the request's session's form token: never by a GET (a
cross-site image tag would otherwise create environments). Another replica or an earlier request
may have made it already (409 is fine: the watch brings it soon); an API error is a 503 page.
"""

from __future__ import annotations

import hmac
import logging

from aiohttp import web

from userland.platform.clients.kube import USERLANDS, AlreadyExists, KubeClient, KubeError
from userland.platform.model import naming
from userland.platform.model.bodies import userland_body
from userland.proxy.pages import Pages
from userland.proxy.rules.routing import TemplateRoute

log = logging.getLogger(__name__)


async def self_service(request: web.Request, route: TemplateRoute, login: str, csrf: str, *,
                       pages: Pages, kube: KubeClient) -> web.StreamResponse:
    """The offer (GET) or the creation (its POST); `csrf`: the form token of the request's session."""
    name = route.display_name or route.template
    if request.method != "POST":
        return pages.offer(name, login, csrf, request.path)
    form = await request.post()
    if not hmac.compare_digest(str(form.get("csrf") or ""), csrf):
        return pages.error(403, "Form expired", "This form has expired. Please try again.",
                           link_url=request.path, link_text="Back")
    created = await create_userland(route, login, pages=pages, kube=kube)
    if created is not None:
        return created
    return web.Response(status=303, headers={"Location": request.path, "Cache-Control": "no-store"})


async def create_userland(route: TemplateRoute, login: str, *, pages: Pages,
                          kube: KubeClient) -> web.StreamResponse | None:
    """Create the Userland; None when done (or already there), else an error page."""
    name = naming.userland_name(route.template, login)
    body = userland_body(route.template, login, namespace=route.namespace)
    try:
        await kube.create(USERLANDS, route.namespace, body)
        log.info("self-service userland created", extra={"userland": f"{route.namespace}/{name}",
                                                         "user": login})
    except AlreadyExists:
        pass  # another replica or an earlier request made it; the watch brings it soon
    except KubeError as err:
        log.warning("self-service userland not created", extra={
            "userland": f"{route.namespace}/{name}", "error": str(err)})
        return pages.error(503, "Your environment could not be created",
                           "Try again in a moment; if this lasts, ask your instructor.", retry=True)
    return None
