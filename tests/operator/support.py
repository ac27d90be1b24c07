"""Helpers for operator tests: a kubelet stand-in, and knowing (not guessing) what the operator
has seen and done: `reconciled_since` waits until it has reconciled a given version of an
object, `caught_up` until its caches hold what the API server holds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from tests.support import eventually
from tests.support.objects import template_body, userland_body
from userland.operator.controller import Controller
from userland.operator.indexes import USERLAND
from userland.platform.clients.informer import version_number
from userland.platform.clients.kube import PODS, TEMPLATES, USERLANDS, KubeClient, NotFound, Resource
from userland.platform.model.settings import Settings

JSON = dict[str, Any]
__all__ = [
    "Cluster",
    "OperatorRunner",
    "caught_up",
    "eventually",
    "exists",
    "get_or_none",
    "gone",
    "reconciled_since",
    "running_controller",
    "template_body",
    "userland_body",
]


class Cluster:
    """Small helpers over the admin client for one test namespace."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace

    async def create_template(self, name: str, **kwargs: Any) -> JSON:
        return await self.kube.create(TEMPLATES, self.ns, template_body(name, **kwargs))

    async def create_userland(self, user: str, template: str, **kwargs: Any) -> JSON:
        return await self.kube.create(USERLANDS, self.ns, userland_body(user, template, **kwargs))

    async def userland_status(self, name: str) -> JSON:
        obj = await self.kube.get(USERLANDS, self.ns, name)
        status: JSON = obj.get("status") or {}
        return status

    async def ready_condition(self, name: str) -> JSON:
        status = await self.userland_status(name)
        return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})

    async def make_pods_ready(self, selector: str) -> int:
        """Do what a kubelet would: mark the selected Pods Running and Ready."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        pods = (await self.kube.list(PODS, self.ns, label_selector=selector))["items"]
        for pod in pods:
            await self.kube.merge_patch(
                PODS,
                self.ns,
                pod["metadata"]["name"],
                {
                    "status": {
                        "phase": "Running",
                        "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": now},
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                        ],
                    }
                },
                subresource="status",
            )
        return len(pods)


OperatorRunner = Callable[..., contextlib.AbstractAsyncContextManager[Controller]]


async def get_or_none(kube: KubeClient, resource: Resource, ns: str, name: str) -> JSON | None:
    try:
        return await kube.get(resource, ns, name)
    except NotFound:
        return None


async def exists(kube: KubeClient, resource: Resource, ns: str, name: str) -> bool:
    return await get_or_none(kube, resource, ns, name) is not None


async def gone(kube: KubeClient, resource: Resource, ns: str, name: str) -> bool:
    return await get_or_none(kube, resource, ns, name) is None


async def reconciled_since(controller: Controller, namespace: str, name: str, version: str | int,
                           kind: str = USERLAND, timeout: float = 30.0) -> None:
    """Until a reconcile of `kind namespace/name` has finished that started from `version` of
    the object or a later one (a write's resourceVersion: "the operator has looked at it")."""
    wanted = int(version)

    def done() -> bool:
        return controller.loop.reconciled.get((kind, namespace, name), 0) >= wanted

    await eventually(done, timeout=timeout, interval=0.02)


async def caught_up(controller: Controller, kube: KubeClient, namespace: str) -> None:
    """Until every cache of the operator holds exactly the versions the API server has now
    (so no watch event of an earlier write is still on its way), and nothing is queued."""

    async def same() -> bool:
        for informer in controller.informers:
            listing = await kube.list(informer.resource, namespace, label_selector=informer.label_selector)
            served = {item["metadata"]["name"]: version_number(item) for item in listing["items"]}
            cached = {name: version_number(informer.get(ns, name))
                      for ns, name in informer.object_keys() if ns == namespace}
            if served != cached:
                return False
        return controller.queue.depth == 0 and not controller.queue._active

    await eventually(same, interval=0.05)


@contextlib.asynccontextmanager
async def running_controller(kubeconfig: str, settings: Settings, **kwargs: Any) -> AsyncIterator[Controller]:
    """The project's Controller in this process, leading, as `kubeconfig`'s identity; stopped
    (its last Events flushed) on the way out."""
    client = await KubeClient.connect(kubeconfig)
    controller = Controller(client, settings, **{"workers": 4, **kwargs})
    tasks = [asyncio.create_task(controller.run_informers()), asyncio.create_task(controller.lead())]
    try:
        await asyncio.wait_for(controller.wait_synced(), 30)
        yield controller
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.wait_for(controller.events.flush(), 10)
        await controller.events.close()
        await controller.close()
        controller.queue.close()
        await client.close()
