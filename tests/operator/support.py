"""Helpers for operator tests: object bodies, polling, and a kubelet stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from userland.operator.controller import Controller
from userland.platform.kube import PODS, TEMPLATES, USERLANDS, KubeClient, NotFound, Resource

JSON = dict[str, Any]


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout: float = 30.0, interval: float = 0.1
) -> Any:
    """Poll `check` until it returns something truthy; fail with its last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(AssertionError):
            last = await check()
            if last:
                return last
        await asyncio.sleep(interval)
    # One last try, letting its assertion (if any) explain the failure.
    last = await check()
    assert last, f"condition not met within {timeout}s (last: {last!r})"
    return last


def template_body(
    name: str, *, image: str = "demo:1", port: int = 8080, storage: JSON | None = None, **spec: Any
) -> JSON:
    body: JSON = {
        "apiVersion": "userland.dev/v1alpha1",
        "kind": "Template",
        "metadata": {"name": name},
        "spec": {
            "displayName": name.title(),
            "routing": {"host": f"{name}.example.edu"},
            "port": port,
            "podSpec": {
                "containers": [
                    {
                        "name": "ide",
                        "image": image,
                        "args": ["--user", "${USER}"],
                        "env": [{"name": "HOME_USER", "value": "/home/${USER}"}],
                        "ports": [{"containerPort": port}],
                    }
                ]
            },
            **spec,
        },
    }
    if storage is not None:
        body["spec"]["storage"] = storage
    return body


def userland_body(user: str, template: str, name: str | None = None, **spec: Any) -> JSON:
    return {
        "apiVersion": "userland.dev/v1alpha1",
        "kind": "Userland",
        "metadata": {"name": name or f"{template}-{user.lower()}"},
        "spec": {"user": user, "template": template, **spec},
    }


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
