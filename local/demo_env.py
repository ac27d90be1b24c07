"""The built-in demo environment: what a student's "IDE" is in the local setup.

`python -m userland.local.demo_env --port N --user LOGIN --template NAME` serves a small page
that says whose environment this is and what the gateway sent it (`X-User`, whether an
`X-User-Signature` came along, the path), plus a WebSocket echo at `<anything>/ws` that the
page's script uses, and `<anything>/clock`, a WebSocket that only the server talks on (the
time, every second: like an app's live updates, which are not the student using it). Every
URL on the page is relative, so it works behind a path prefix such as `/demo/` (the gateway
forwards the full path unchanged).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import logging
import sys
import time
from collections.abc import Sequence

from aiohttp import WSMsgType, web

from userland.platform.clients.logs import setup_logging

log = logging.getLogger("userland.local.demo_env")

OWNER = web.AppKey("owner", str)
TEMPLATE = web.AppKey("template", str)

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
  body {{ font-family: system-ui, sans-serif; max-width: 44rem; margin: 2rem auto; padding: 0 1rem;
         color: #1d2330; }}
  h1 {{ font-size: 1.6rem; }}
  table {{ border-collapse: collapse; margin: 1rem 0; }}
  th, td {{ text-align: left; padding: .3rem .8rem .3rem 0; vertical-align: top; }}
  code {{ background: #f1f3f6; padding: .1rem .3rem; border-radius: 3px; }}
  .warn {{ color: #a33; }}
  #log {{ background: #f7f8fa; border: 1px solid #dde1e7; padding: .5rem; min-height: 3rem;
          white-space: pre-wrap; font-family: ui-monospace, monospace; }}
</style>
</head>
<body>
<h1>Hello {user_display}! This is your environment.</h1>
<p>A demo environment of the <strong>{template}</strong> template, started by the local runner
for <strong>{owner}</strong>. In a cluster this would be the student's own IDE in their own pod.</p>
<table>
  <tr><th>Environment of</th><td><code id="owner">{owner}</code></td></tr>
  <tr><th>X-User received</th><td>X-User: <code id="x-user">{x_user}</code> {mismatch}</td></tr>
  <tr><th>X-User-Signature</th><td id="signature">{signature}</td></tr>
  <tr><th>Request path</th><td><code id="path">{path}</code></td></tr>
</table>
<h2>WebSocket echo</h2>
<p>Through the gateway to this environment and back.</p>
<form id="echo"><input id="message" value="hello from {owner}" size="30">
<button type="submit">Send</button></form>
<div id="log"></div>
<script>
(function () {{
  // Relative to this page, so it works under any path prefix (/demo/ -> /demo/ws).
  var url = new URL("ws", window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  var log = document.getElementById("log");
  function say(text) {{ log.textContent += text + "\\n"; }}
  var socket = new WebSocket(url.href);
  socket.onopen = function () {{ say("connected to " + url.pathname); }};
  socket.onmessage = function (event) {{ say("echo: " + event.data); }};
  socket.onclose = function (event) {{ say("closed (" + event.code + ")"); }};
  document.getElementById("echo").onsubmit = function (event) {{
    event.preventDefault();
    var text = document.getElementById("message").value;
    if (socket.readyState === WebSocket.OPEN) {{ socket.send(text); say("sent: " + text); }}
  }};
}})();
</script>
</body>
</html>
"""


def render_page(*, owner: str, template: str, x_user: str | None, signed: bool, path: str) -> str:
    esc = html.escape
    mismatch = ""
    if x_user is None:
        mismatch = '<span class="warn">(none: this request did not come through the gateway)</span>'
    elif x_user != owner:
        mismatch = '<span class="warn">(not the owner of this environment!)</span>'
    return _PAGE.format(
        title=esc(f"{owner}'s {template} environment"),
        user_display=esc(x_user or owner),
        owner=esc(owner),
        template=esc(template),
        x_user=esc(x_user if x_user is not None else "(missing)"),
        mismatch=mismatch,
        signature="present" if signed else '<span class="warn">missing</span>',
        path=esc(path),
    )


async def websocket_echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    async for message in ws:
        if message.type == WSMsgType.TEXT:
            await ws.send_str(message.data)
        elif message.type == WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    return ws


async def websocket_clock(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    while not ws.closed:
        await ws.send_str(time.strftime("%H:%M:%S"))
        with contextlib.suppress(TimeoutError):
            await ws.receive(timeout=1.0)  # reads the close frame, when it comes
    return ws


async def page(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() == "websocket" and request.path.endswith("/ws"):
        return await websocket_echo(request)
    if request.headers.get("Upgrade", "").lower() == "websocket" and request.path.endswith("/clock"):
        return await websocket_clock(request)
    body = render_page(
        owner=request.app[OWNER],
        template=request.app[TEMPLATE],
        x_user=request.headers.get("X-User"),
        signed=bool(request.headers.get("X-User-Signature")),
        path=request.path,
    )
    return web.Response(text=body, content_type="text/html", headers={"Cache-Control": "no-store"})


def create_app(user: str, template: str) -> web.Application:
    app = web.Application()
    app[OWNER] = user
    app[TEMPLATE] = template
    # Any path: the gateway forwards the full path, prefix included.
    app.router.add_route("GET", "/{tail:.*}", page)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m userland.local.demo_env", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--user", required=True, help="the student's login")
    parser.add_argument("--template", default="demo")
    args = parser.parse_args(argv)
    setup_logging("INFO")
    log.info("demo environment starting", extra={"user": args.user, "template": args.template,
                                                  "listen": f"{args.host}:{args.port}"})
    web.run_app(create_app(args.user, args.template), host=args.host, port=args.port,
                print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
