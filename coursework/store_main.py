"""Running the assignment store: one process over one folder (a ReadWriteOnce volume in a
cluster: one replica, strategy Recreate), a clean SIGTERM (an upload in progress is dropped and
its worker takes the copy again; nothing half-written is ever kept)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from userland.coursework.store_app import create_internal_app, create_store_app
from userland.coursework.store_files import Quotas
from userland.coursework.store_requests import StoreOptions
from userland.coursework.trees import Limits
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.store")
MIB = 1024 * 1024


@dataclass(frozen=True)
class ServeOptions:
    host: str
    port: int
    data: Path
    # /healthz and /metrics on a listener of their own ("": none, as under make run).
    internal: tuple[str, int] | None = None


def store_options(settings: Settings, data: Path) -> StoreOptions:
    return StoreOptions(
        data=data, secret=settings.store_secret,
        source_limits=Limits(settings.source_max_files, settings.source_max_mb * MIB),
        copy_limits=Limits(settings.folder_max_files, settings.folder_max_mb * MIB),
        quotas=Quotas(assignment=settings.store_assignment_quota_mb * MIB,
                      course=settings.store_course_quota_mb * MIB),
        retention=settings.store_retention_hours * 3600.0, git_urls=settings.store_git_urls)


async def serve(settings: Settings, options: ServeOptions) -> None:
    if shutil.which("git") is None:
        raise SystemExit("userland store: git is not installed (the store fetches sources with it)")
    options.data.mkdir(parents=True, exist_ok=True)
    app = create_store_app(store_options(settings, options.data))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, options.host, options.port, reuse_address=True).start()
    internal = web.AppRunner(create_internal_app(app), access_log=None)
    await internal.setup()
    if options.internal is not None:
        await web.TCPSite(internal, *options.internal, reuse_address=True).start()
    log.info("store listening", extra={"address": f"{options.host}:{options.port}",
                                       "data": str(options.data)})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await internal.cleanup()
        await runner.cleanup()


def run_store(settings: Settings, options: ServeOptions) -> int:
    asyncio.run(serve(settings, options))
    return 0
