"""Running the web UI: one process, uvloop when installed, a clean SIGTERM.

Several replicas can run side by side: the web UI keeps no per-user state of its own (the
identity comes signed with each request, CSRF tokens are stateless, the audit log is in Redis,
and every replica keeps its own watches).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from dataclasses import dataclass

from aiohttp import web

from userland.platform.model.addresses import split_listen
from userland.platform.model.settings import Settings
from userland.web.app import create_app, create_internal_app

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebOptions:
    host: str
    port: int
    kubeconfig: str | None = None


async def serve(settings: Settings, options: WebOptions) -> None:
    app = create_app(settings, kubeconfig=options.kubeconfig)
    runner = web.AppRunner(app, access_log=None, handle_signals=True)
    await runner.setup()
    site = web.TCPSite(runner, options.host, options.port, reuse_address=True)
    try:
        await site.start()
    except OSError:
        # The app's start-up tasks (watches, the roster sync) already hold connections to the API
        # server: end them in order, or asyncio.run's teardown cuts their TLS connections and
        # logs "Fatal error on SSL protocol" beside the one clear line cli/main.py prints.
        await runner.cleanup()
        raise
    # Probes and Prometheus: a listener of their own, which the gateway never forwards to.
    internal = web.AppRunner(create_internal_app(app), access_log=None, handle_signals=False)
    await internal.setup()
    internal_host, internal_port = split_listen(settings.internal_listen)
    try:
        await web.TCPSite(internal, internal_host, internal_port, reuse_address=True).start()
    except OSError as err:  # said as the address it is (cli/main.py prints it)
        await internal.cleanup()
        await runner.cleanup()
        where = f"{settings.internal_listen} (USERLAND_INTERNAL_LISTEN)"
        raise OSError(err.errno, err.strerror, where) from None
    log.info("web UI listening", extra={"address": f"{options.host}:{options.port}",
                                        "internal_listen": settings.internal_listen})
    try:
        await asyncio.Event().wait()
    finally:
        await internal.cleanup()
        await runner.cleanup()


def run_web(settings: Settings, options: WebOptions) -> int:
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.install()
    try:
        asyncio.run(serve(settings, options))
    except (KeyboardInterrupt, web.GracefulExit):
        pass
    return 0
