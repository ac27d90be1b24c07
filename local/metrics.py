"""/metrics of the local runner (`userland local`), the part that plays the kubelet.

What a node's kubelet metrics would tell an operator, for `make run`: the Pods it runs by state
(ready, starting, unrunnable: their program is not installed here, or the Pod asks for what the
runner cannot give), the containers' restarts, and the platform layer's figures (its API client
and watches). Served on a loopback port of its own; `make run` prints it and its Prometheus
scrapes it (local/prometheus.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from userland.local.runner import LocalRunner
from userland.platform.clients.exposition import PlatformCollector


class RunnerCollector:
    def __init__(self, runner: LocalRunner) -> None:
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        states = {"ready": 0, "starting": 0, "unrunnable": 0}
        restarts = 0
        for worker in list(self.runner.workers.values()):
            state = "unrunnable" if worker.unrunnable is not None else "ready" if worker.ready else "starting"
            states[state] += 1
            status = worker.status()
            restarts += sum(int(c.get("restartCount") or 0)
                            for c in [*(status.get("initContainerStatuses") or []),
                                      *(status.get("containerStatuses") or [])])
        pods = GaugeMetricFamily("userland_runner_pods",
                                 "Pods the local runner runs, by state (ready, starting, unrunnable)",
                                 labels=["state"])
        for state, count in states.items():
            pods.add_metric([state], count)
        yield pods
        gauge = GaugeMetricFamily("userland_runner_container_restarts",
                                  "Restarts of the containers of the Pods running now (kubectl's RESTARTS)")
        gauge.add_metric([], restarts)
        yield gauge


def metrics_app(runner: LocalRunner) -> web.Application:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(RunnerCollector(runner))  # type: ignore[arg-type]
    registry.register(PlatformCollector(kube=lambda: (runner.kube,),  # type: ignore[arg-type]
                                        informers=lambda: (runner.pods, runner.services),
                                        labels={"component": "runner"}))

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", page)
    return app
