"""The gateway's own pages: starting, suspended, no environment (403), and error pages.

Rendered from jinja2 templates in `proxy/templates/` with autoescape on; every page is a
complete response (status, Cache-Control: no-store), never a traceback.
"""

from __future__ import annotations

from typing import Any

import jinja2
from aiohttp import web

RETRY_SECONDS = 5


class Pages:
    def __init__(self) -> None:
        self._env = jinja2.Environment(
            loader=jinja2.PackageLoader("userland.proxy", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    def render(self, name: str, *, status: int, headers: dict[str, str] | None = None,
               **context: Any) -> web.Response:
        context.setdefault("refresh", None)
        body = self._env.get_template(name).render(**context)
        response = web.Response(text=body, status=status, content_type="text/html")
        response.headers["Cache-Control"] = "no-store"
        for key, value in (headers or {}).items():
            response.headers[key] = value
        return response

    def starting(self, template_name: str, user: str, detail: str = "") -> web.Response:
        return self.render("starting.html", status=503, title="Starting your environment",
                           template_name=template_name, user=user, detail=detail,
                           refresh=RETRY_SECONDS, headers={"Retry-After": str(RETRY_SECONDS)})

    def suspended(self, template_name: str, user: str) -> web.Response:
        return self.render("suspended.html", status=503, title="Environment suspended",
                           template_name=template_name, user=user, refresh=30,
                           headers={"Retry-After": "30"})

    def forbidden(self, template_name: str, user: str, logout_url: str) -> web.Response:
        return self.render("forbidden.html", status=403, title="No environment",
                           template_name=template_name, user=user, logout_url=logout_url)

    def error(self, status: int, title: str, message: str, *, retry: bool = False) -> web.Response:
        headers = {"Retry-After": str(RETRY_SECONDS)} if retry else None
        return self.render("error.html", status=status, title=title, message=message,
                           refresh=RETRY_SECONDS if retry else None, headers=headers)

    def bad_gateway(self) -> web.Response:
        return self.error(502, "Your environment is not answering",
                          "The gateway could not reach your environment. It may be restarting; "
                          "if this lasts, ask your instructor.", retry=True)

    def gateway_timeout(self) -> web.Response:
        return self.error(504, "Your environment took too long to answer",
                          "Try again in a moment.", retry=True)

    def unavailable(self) -> web.Response:
        return self.error(503, "Login service unavailable",
                          "The login service cannot be reached right now. Try again in a moment.",
                          retry=True)

    def not_found(self) -> web.Response:
        return self.error(404, "Not found", "Nothing is served at this address.")
