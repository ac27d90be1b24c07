"""The small test environment the cluster suite runs as a student's Pod (image userland-testenv).

Stands in for an IDE until the real apps have images: it says whose environment it is and
what the gateway sent (`X-User`, whether a signature came along), echoes over a WebSocket, and
reads and writes files in the student's volume, so storage can be checked through the gateway.

    GET  /healthz            ok (the readiness probe)
    GET  /whoami             {"owner", "x_user", "signed", "pod"}
    GET  /ws                 WebSocket echo
    PUT  /files/NAME         writes the body to $DATA_DIR/NAME
    GET  /files/NAME         reads it back (404 when missing)

Only aiohttp and the standard library: it runs on the project's own image.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from aiohttp import WSMsgType, web

DATA_DIR = Path(os.environ.get("DATA_DIR", "/data"))
NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def whoami(request: web.Request) -> web.Response:
    return web.json_response({
        "owner": os.environ.get("STUDENT", ""),
        "x_user": request.headers.get("X-User"),
        "signed": "X-User-Signature" in request.headers,
        "pod": socket.gethostname(),
    })


async def echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == WSMsgType.TEXT:
            await ws.send_str(msg.data)
    return ws


def _path(request: web.Request) -> Path:
    name = request.match_info["name"]
    if not NAME.match(name) or name.startswith("."):
        raise web.HTTPBadRequest(text="bad file name\n")
    return DATA_DIR / name


async def put_file(request: web.Request) -> web.Response:
    _path(request).write_bytes(await request.read())
    return web.Response(status=201, text="stored\n")


async def get_file(request: web.Request) -> web.Response:
    path = _path(request)
    if not path.is_file():
        raise web.HTTPNotFound(text="no such file\n")
    return web.Response(body=path.read_bytes())


def create_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/whoami", whoami)
    app.router.add_get("/ws", echo)
    app.router.add_put("/files/{name}", put_file)
    app.router.add_get("/files/{name}", get_file)
    return app


if __name__ == "__main__":
    web.run_app(create_app(), host="0.0.0.0", port=int(os.environ.get("PORT", "8080")), print=None)
