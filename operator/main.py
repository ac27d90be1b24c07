"""`userland operator`: wires the controller, leader election, and the health server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys

from aiohttp import web

from userland.operator.assignments import discover_image
from userland.operator.controller import Controller
from userland.operator.leader import LeaderElector
from userland.operator.metrics import OperatorMetrics, health_app
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.kubeconfig import KubeConfigError
from userland.platform.model.settings import Settings

log = logging.getLogger("userland.operator")


async def run_operator(settings: Settings, args: argparse.Namespace) -> int:
    """`args.listen_address`: (host, port), parsed by the command line (cli/main.py)."""
    try:
        client = await KubeClient.connect(args.kubeconfig, pool_size=max(32, args.workers * 3))
    except KubeConfigError as err:
        print(f"userland operator: {err}", file=sys.stderr)
        return 2
    metrics = OperatorMetrics()
    image = settings.worker_image
    if not image and os.environ.get("POD_NAME") and os.environ.get("POD_NAMESPACE"):
        # Worker Pods run the operator's own image (whatever an overlay renamed it to).
        image = await discover_image(client, os.environ["POD_NAMESPACE"], os.environ["POD_NAME"])
    controller = Controller(
        client, settings, workers=args.workers, metrics=metrics, resync_seconds=args.resync,
        start_timeout=args.start_timeout, worker_image=image,
    )
    identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"
    elector = (
        None
        if args.no_leader_election
        else LeaderElector(
            client,
            settings.lease_namespace,
            settings.lease_name,
            identity,
            lease_duration=args.lease_duration,
            renew_deadline=args.lease_duration * 2 / 3,
            retry_period=max(0.5, args.lease_duration / 7.5),
        )
    )

    def refresh_metrics() -> None:
        metrics.queue_depth.set(controller.queue.depth)
        metrics.is_leader = elector is None or elector.is_leader
        metrics.leader.set(1 if metrics.is_leader else 0)
        for kind, size in controller.cache_sizes().items():
            metrics.objects.labels(kind).set(size)

    runner = web.AppRunner(health_app(metrics, controller.health, refresh_metrics), access_log=None)
    await runner.setup()
    host, port = args.listen_address
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as err:
        print(f"userland operator: cannot serve /healthz and /metrics on {args.listen}: "
              f"{err.strerror or err}", file=sys.stderr)
        await runner.cleanup()
        await client.close()
        return 2
    log.info(
        "operator started",
        extra={
            "identity": identity,
            "listen": args.listen,
            "namespaces": list(settings.namespaces) or "all",
            "leader_election": elector is not None,
        },
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    informers = asyncio.create_task(controller.run_informers())
    acting = asyncio.create_task(elector.run(controller.lead) if elector else controller.lead())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({informers, acting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for task in (informers, acting, stopping):
        task.cancel()
    results = await asyncio.gather(informers, acting, stopping, return_exceptions=True)
    failure = next(
        (r for r in results if isinstance(r, Exception) and not isinstance(r, asyncio.CancelledError)), None
    )
    if elector is not None:
        await elector.release()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(controller.events.flush(), 5)  # the last Events, if the API answers
    await controller.events.close()
    await controller.close()
    controller.queue.close()
    with contextlib.suppress(Exception):
        await runner.cleanup()
    await client.close()
    if failure is not None:
        log.error("operator stopped on an error", extra={"error": repr(failure)})
        return 1
    log.info("operator stopped")
    return 0
