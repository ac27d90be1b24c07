"""HTML pages for the login flow: jinja2 templates with autoescape, never tracebacks."""

from __future__ import annotations

import jinja2
from aiohttp import web

from userland.platform.model import look

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("userland.auth", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
NO_STORE = {"Cache-Control": "no-store"}


def render(template: str, *, status: int = 200, **context: object) -> web.Response:
    # The look every Userland page shares (platform/model/look.py); the gateway's CSP allows exactly it.
    body = _ENV.get_template(template).render(style=look.GATEWAY_STYLE, **context)
    return web.Response(status=status, text=body, content_type="text/html", headers=NO_STORE)


def error_page(status: int, title: str, message: str, *, retry_url: str | None = None) -> web.Response:
    return render("error.html", status=status, title=title, message=message, retry_url=retry_url)


def busy_page() -> web.Response:
    """This process could not get to the session store in time (a flood, from this network or
    another): this one request is refused; nothing is down."""
    response = error_page(429, "Too many requests right now",
                          "This site is very busy at the moment, or your network sent a great many "
                          "requests. Please try again in a moment.")
    response.headers["Retry-After"] = "2"
    return response


def unavailable_page() -> web.Response:
    """The 503 every protected request gets while the session store is unreachable."""
    response = error_page(503, "Temporarily unavailable",
                          "Sign-in is unavailable for a moment. Please try again shortly.")
    response.headers["Retry-After"] = "5"
    return response
