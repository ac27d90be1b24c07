"""Running the gateway: worker processes sharing one port, and a graceful shutdown.

`run_gateway` starts one server in this process (`--workers 1`) or N spawned worker
processes that each bind the same port with SO_REUSEPORT (the kernel spreads connections
over them); the parent then only forwards SIGTERM/SIGINT and restarts a worker that died.
Each server has two listeners: the public one (`--listen`) and the internal one
(`USERLAND_INTERNAL_LISTEN`: /healthz, /metrics, /auth/verify; proxy/app.py
`create_internal_app`), both opened once the routing data has synced.

On SIGTERM a worker: closes its listening socket (new connections are refused), lets in-flight
requests finish and keeps open WebSockets working for up to `grace` seconds, then closes the
WebSockets left with 1001 (going away), closes idle keep-alive connections and exits 0.
uvloop is used when it is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace

from aiohttp import web

from userland.platform.clients.logs import setup_logging
from userland.platform.model.addresses import split_listen
from userland.platform.model.settings import Settings
from userland.proxy.accesslog import ACCESS_LOGGER, BufferedAccessHandler, buffer_access_log
from userland.proxy.app import GATEWAY, RUNNER_KWARGS, create_app, create_internal_app
from userland.proxy.connections import ConnectionLimits, GatewayRunner
from userland.proxy.gateway import Gateway
from userland.proxy.metrics import GatewayMetrics, NullGatewayMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    host: str
    port: int
    kubeconfig: str | None = None
    workers: int = 1
    grace: float = 30.0
    log_level: str = "INFO"
    # The worker's number (the `worker` label of its metrics); False: count nothing per request.
    worker: int = 0
    metrics: bool = True


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen {listen!r}: use host:port, such as 0.0.0.0:8080")
    return host.strip("[]") or "0.0.0.0", int(port)


async def drain(gateway: Gateway, grace: float) -> None:
    """Let in-flight requests finish and open WebSockets go on for up to `grace` seconds,
    then close the WebSockets left with 1001 (going away).

    This runs before aiohttp's own shutdown: that one stops reading from every connection at
    once (open WebSockets and uploads in progress would stall), so it comes only at the end.
    """
    if not gateway.idle.is_set():
        log.info("waiting for requests and websockets to finish", extra={
            "active": gateway.active, "websockets": len(gateway.websockets), "grace_seconds": grace})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gateway.idle.wait(), grace)
    left = list(gateway.websockets)
    if left:
        log.info("closing websockets after the grace period", extra={"open": len(left)})
        await asyncio.gather(*(pair.close_going_away() for pair in left), return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gateway.idle.wait(), 5)


async def serve(settings: Settings, options: ServerOptions, *, reuse_port: bool = False) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    metrics = GatewayMetrics(str(options.worker)) if options.metrics else NullGatewayMetrics()
    app = create_app(settings, kubeconfig=options.kubeconfig, metrics=metrics)
    access = buffer_access_log()
    flusher = asyncio.create_task(_flush_every(access, 0.25)) if access is not None else None
    try:
        return await _serve(app, settings, options, stop, reuse_port=reuse_port)
    finally:
        if flusher is not None and access is not None:
            flusher.cancel()
            access.flush_now()
            logging.getLogger(ACCESS_LOGGER).removeHandler(access)
            access.close()


async def _flush_every(handler: BufferedAccessHandler, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        handler.flush_now()


async def _serve(app: web.Application, settings: Settings, options: ServerOptions, stop: asyncio.Event,
                 *, reuse_port: bool) -> int:
    # Requests still running after the drain get this long before they are cut.
    # GatewayRunner: header size and time limits, idle keep-alive, connections per address.
    runner = GatewayRunner(app, limits=ConnectionLimits.from_settings(settings), handle_signals=False,
                           shutdown_timeout=5.0, **RUNNER_KWARGS)
    setup = asyncio.create_task(runner.setup())  # waits until the watches have synced
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({setup, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not setup.done():
        setup.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await setup
        await runner.cleanup()
        return 0
    setup.result()
    counts = runner.counts
    app[GATEWAY].metrics.attach(connections=lambda: counts)
    # Probes, Prometheus and forward-auth: their own listener, no access log (probes every few
    # seconds would drown it), none of the public listener's routing.
    internal_host, internal_port = split_listen(settings.internal_listen)
    internal = web.AppRunner(create_internal_app(app), handle_signals=False, access_log=None)
    await internal.setup()
    internal_site = web.TCPSite(internal, internal_host, internal_port, reuse_port=reuse_port)
    site = web.TCPSite(runner, options.host, options.port, reuse_port=reuse_port, backlog=2048)
    try:
        # The public listener first: once the internal one answers (a readiness probe, a test),
        # the public one already takes connections (the other order let a probe pass first).
        await site.start()
        await internal_site.start()
    except OSError:
        # End the start-up tasks' connections in order before the error (web/server.py says why).
        await internal.cleanup()
        await runner.cleanup()
        raise
    log.info("gateway listening", extra={"listen": f"{options.host}:{options.port}",
                                         "internal_listen": settings.internal_listen,
                                         "upstream_mode": settings.upstream_mode})
    await stopped
    log.info("gateway draining", extra={"grace_seconds": options.grace})
    await site.stop()  # new connections are refused from here on
    await internal_site.stop()  # and the readiness probe fails: out of the Service at once
    await drain(app[GATEWAY], options.grace)
    await internal.cleanup()
    await runner.cleanup()
    log.info("gateway stopped")
    return 0


def _run(coro: Awaitable[int]) -> int:
    if importlib.util.find_spec("uvloop") is not None:
        uvloop = importlib.import_module("uvloop")
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return asyncio.run(coro)  # type: ignore[arg-type]


def _worker_main(settings: Settings, options: ServerOptions) -> None:
    setup_logging(options.log_level)
    sys.exit(_run(serve(settings, options, reuse_port=True)))


def run_gateway(settings: Settings, options: ServerOptions) -> int:
    if options.workers <= 1:
        return _run(serve(settings, options))
    return _supervise(settings, options)


def _supervise(settings: Settings, options: ServerOptions) -> int:
    """Run `options.workers` processes on one port; forward SIGTERM/SIGINT; restart crashes."""
    if options.port == 0 or split_listen(settings.internal_listen)[1] == 0:
        raise ValueError("--workers > 1 needs fixed ports, for --listen and USERLAND_INTERNAL_LISTEN "
                         "(each worker would pick its own)")
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start(index: int) -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_worker_main, args=(settings, replace(options, worker=index)),
                                  daemon=False)
        process.start()
        return process

    workers = [start(index) for index in range(options.workers)]

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for process in workers:
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stopping:
        for index, process in enumerate(workers):
            if not process.is_alive() and not stopping:
                log.warning("gateway worker exited, restarting", extra={"exitcode": process.exitcode})
                workers[index] = start(index)
        time.sleep(0.5)
    codes = []
    for process in workers:
        process.join()
        codes.append(process.exitcode)
    return 0 if all(code == 0 for code in codes) else 1
