"""Pages: jinja2 templates (autoescape on, undefined is an error) rendered into responses.

Every page gets the signed-in identity, a CSRF token for its forms, and the navigation it
may show; every response is `no-store` (pages show live, per-user data).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import jinja2
import markupsafe
from aiohttp import web

from userland.platform.model.identity import Identity
from userland.web.rules import security


def make_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("userland.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["address"] = address
    env.filters["address_breaks"] = address_breaks
    return env


def address(url: str) -> str:
    """An environment's URL as a person reads it out: `alice.ide.example.edu` (no scheme, no
    lone trailing slash), or `u.example.edu/db/` for a path route."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url
    path = "" if parts.path in ("", "/") else parts.path
    return parts.netloc + path


def address_breaks(url: str) -> markupsafe.Markup:
    """`address` with a line-break opportunity after each dot (long hosts wrap at their parts,
    not mid-word)."""
    # Escaped once; an escaped text has no dots but the address's own.
    return markupsafe.Markup(str(markupsafe.escape(address(url))).replace(".", ".<wbr>"))


def page(env: jinja2.Environment, name: str, *, status: int = 200, who: Identity | None = None,
         secret: str = "", **context: Any) -> web.Response:
    context.setdefault("title", "")
    context["who"] = who
    # Bound to the gateway session too: signing out ends every form of that session.
    context["csrf"] = (security.csrf_token(secret, who.login, who.session)
                       if who is not None and secret else "")
    body = env.get_template(name).render(**context)
    response = web.Response(text=body, status=status, content_type="text/html")
    response.headers["Cache-Control"] = "no-store"
    return response
