"""Retired assignments and their retention: the operator says which assignments of a namespace
exist, the folders of all others are retired, and removed once `StoreOptions.retention` is
over (at once, and by the sweep every minute)."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from userland.coursework.store_requests import OPTIONS, STORE, json_body, signed
from userland.platform.model import naming

log = logging.getLogger("userland.store")


async def put_live(request: web.Request) -> web.Response:
    """The operator: every Assignment of a namespace that exists (name: uid); the folders of all
    others are retired, and removed after the retention."""
    raw = await signed(request, "operator")
    namespace = request.match_info["ns"]
    if not naming.is_valid_dns_label(namespace):
        raise web.HTTPNotFound()
    try:
        live = {str(k): str(v) for k, v in json_body(raw)["assignments"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise web.HTTPBadRequest(text="assignments?\n") from None
    files, options = request.app[STORE], request.app[OPTIONS]
    retired = await asyncio.to_thread(files.retire_others, namespace, live)
    for ref in retired:
        log.info("assignment retired", extra={"assignment": f"{ref.namespace}/{ref.name}", "uid": ref.uid,
                                              "removed_in": options.retention})
    removed = await asyncio.to_thread(files.remove_retired, options.retention)
    return web.json_response({"retired": len(retired), "removed": len(removed)})


async def sweep(app: web.Application) -> None:
    """Remove retired assignments' folders once their retention is over (every minute)."""
    files, options = app[STORE], app[OPTIONS]
    while True:
        try:
            for ref in await asyncio.to_thread(files.remove_retired, options.retention):
                log.info("assignment removed", extra={"assignment": f"{ref.namespace}/{ref.name}",
                                                      "uid": ref.uid})
        except OSError:
            log.exception("sweeping retired assignments failed")
        await asyncio.sleep(60)
