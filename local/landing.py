"""A landing page for the platform's own host in the local setup, where the web UI would be.

The gateway forwards the public host's non-/auth/ paths to USERLAND_WEB_URL; locally that is
this small page: who you are signed in as (from the gateway's `X-User`, for display only),
the Templates with their links, and every student's environment with its phase. It reads
the API server on each request (the local setup has a handful of objects) and decides
nothing: access is the gateway's business.
"""

from __future__ import annotations

import html
import logging

from aiohttp import web

from userland.platform.kube import TEMPLATES, USERLANDS, KubeClient, KubeError

log = logging.getLogger(__name__)

KUBE = web.AppKey("kube", KubeClient)
NAMESPACE = web.AppKey("namespace", str)

_STYLE = """body { font-family: system-ui, sans-serif; max-width: 44rem; margin: 2rem auto; padding: 0 1rem;
color: #1d2330; } table { border-collapse: collapse; } th, td { text-align: left;
padding: .3rem 1rem .3rem 0; } .muted { color: #666; font-size: .9rem; }"""


async def index(request: web.Request) -> web.Response:
    kube, namespace = request.app[KUBE], request.app[NAMESPACE]
    esc = html.escape
    user = request.headers.get("X-User")
    try:
        templates = (await kube.list(TEMPLATES, namespace))["items"]
        userlands = (await kube.list(USERLANDS, namespace))["items"]
    except KubeError as err:
        log.warning("landing page could not list objects", extra={"error": str(err)})
        return web.Response(status=503, text="The API server is not answering; try again shortly.\n")
    rows = []
    for template in sorted(templates, key=lambda t: t["metadata"]["name"]):
        spec = template.get("spec") or {}
        prefix = (spec.get("routing") or {}).get("pathPrefix")
        name = esc(spec.get("displayName") or template["metadata"]["name"])
        link = f'<a href="{esc(prefix.lstrip("/"))}">{name}</a>' if prefix else name
        rows.append(f"<tr><td>{link}</td><td>{esc(spec.get('description') or '')}</td></tr>")
    students = []
    for item in sorted(userlands, key=lambda u: (u["spec"]["template"], u["spec"]["user"])):
        phase = (item.get("status") or {}).get("phase") or "Pending"
        students.append(f"<tr><td>{esc(item['spec']['user'])}</td><td>{esc(item['spec']['template'])}</td>"
                        f"<td>{esc(phase)}</td></tr>")
    who = (f"Signed in as <strong>{esc(user)}</strong> (<a href=\"auth/logout\">sign out</a>)" if user
           else '<a href="auth/login">Sign in</a>')
    body = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Userland (local)</title>
<style>{_STYLE}</style></head><body>
<h1>Userland, running on this machine</h1><p>{who}</p>
<h2>Environments</h2><table>{"".join(rows) or "<tr><td>No Templates yet.</td></tr>"}</table>
<h2>Students</h2><table><tr><th>Student</th><th>Template</th><th>Phase</th></tr>{"".join(students)}</table>
<p class="muted">This page stands in for the instructor web UI in the local setup. Add students
with kubectl (see the terminal where <code>make run</code> is running).</p>
</body></html>"""
    return web.Response(text=body, content_type="text/html", headers={"Cache-Control": "no-store"})


def create_app(kube: KubeClient, namespace: str) -> web.Application:
    app = web.Application()
    app[KUBE] = kube
    app[NAMESPACE] = namespace
    app.router.add_get("/", index)
    return app
