"""What the Kubernetes client counts for /metrics (platform/model/telemetry.py KubeStats), against the
real API server: every request by verb, resource kind and answer, with its latency; a watch
counted when it starts; no answer at all counted as `none`. Watches end on their timeout and
are counted as such by the informer."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from tests.support import eventually, free_port
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    AlreadyExists,
    KubeClient,
    NotFound,
    Resource,
    TemporaryError,
)
from userland.platform.clients.kubeconfig import cluster_access

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")


def _configmap(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": {"a": "b"}}


async def test_requests_are_counted_by_verb_kind_and_answer(control_plane: object, namespace: str) -> None:
    access = await cluster_access(str(control_plane.kubeconfig))  # type: ignore[attr-defined]
    async with KubeClient(access) as kube:
        await kube.create(CONFIGMAPS, namespace, _configmap("one"))
        with pytest.raises(AlreadyExists):
            await kube.create(CONFIGMAPS, namespace, _configmap("one"))
        with pytest.raises(NotFound):
            await kube.get(CONFIGMAPS, namespace, "none")
        await kube.merge_patch(CONFIGMAPS, namespace, "one", {"data": {"c": "d"}})
        await kube.list(CONFIGMAPS, namespace)
        await kube.delete(CONFIGMAPS, namespace, "one")
        requests = kube.stats.requests
        assert requests[("create", "ConfigMap", "201")] == 1
        assert requests[("create", "ConfigMap", "409")] == 1
        assert requests[("get", "ConfigMap", "404")] == 1
        assert requests[("patch", "ConfigMap", "200")] == 1
        assert requests[("list", "ConfigMap", "200")] == 1
        assert requests[("delete", "ConfigMap", "200")] == 1
        # Every request timed, by verb.
        assert kube.stats.latency["create"].count == 2 and kube.stats.latency["list"].count == 1
        assert 0 < kube.stats.latency["get"].sum < 30


async def test_a_request_nobody_answers_is_counted_as_none() -> None:
    from userland.platform.clients.kubeconfig import ClusterAccess

    async def no_token() -> None:
        return None

    port = free_port()  # nothing listens there
    access = ClusterAccess(host=f"http://127.0.0.1:{port}", authorization=no_token,
                           ssl_context=ssl.create_default_context())
    async with KubeClient(access) as kube:
        with pytest.raises(TemporaryError):
            await kube.get(CONFIGMAPS, "default", "x")
        assert kube.stats.requests[("get", "ConfigMap", "none")] == 1


async def test_watches_are_counted_when_they_start_and_end(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, [namespace], watch_timeout=1)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 20)
        # The server ends each watch on its timeout (about a second here): a normal restart.
        await eventually(lambda: informer.watch_stats.restarts["timeout"] >= 2, timeout=20)
        assert kube.stats.requests[("watch", "ConfigMap", "200")] >= 2
        assert informer.watch_stats.relists == 1 and informer.healthy
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_watches_never_take_the_connections_requests_need(control_plane: object,
                                                                namespace: str) -> None:
    """More watches than the request pool has connections: lists and writes still go through (the
    operator watches 7 kinds per namespace; at 8 namespaces they had taken its whole pool and
    every list waited for a connection until it timed out)."""
    access = await cluster_access(str(control_plane.kubeconfig))  # type: ignore[attr-defined]
    async with KubeClient(access, pool_size=2) as kube:
        informers = [Informer(kube, CONFIGMAPS, [namespace], watch_timeout=60) for _ in range(4)]
        tasks = [asyncio.create_task(i.run()) for i in informers]
        try:
            await asyncio.wait_for(asyncio.gather(*(i.wait_synced() for i in informers)), 20)
            await eventually(lambda: kube.stats.requests[("watch", "ConfigMap", "200")] == 4, timeout=20)
            # Four watches hold four connections; the two of the pool are free for requests.
            await asyncio.wait_for(kube.create(CONFIGMAPS, namespace, _configmap("while-watched")), 10)
            assert len((await asyncio.wait_for(kube.list(CONFIGMAPS, namespace), 10))["items"]) == 1
            await eventually(lambda: all(i.get(namespace, "while-watched") for i in informers), timeout=20)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
