"""The informer against the real API server: events, 410 Gone and relist, compact storage."""

from __future__ import annotations

import asyncio

from tests.operator.support import eventually
from userland.platform.informer import Informer
from userland.platform.kube import Gone, KubeClient, Resource

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")


def _configmap(name: str, value: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


async def test_handlers_see_adds_changes_and_deletes(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, [namespace], compact=True)
    seen: list[tuple[str | None, str | None]] = []

    def handler(old: dict | None, new: dict | None) -> None:
        seen.append(((old or {}).get("data", {}).get("v"), (new or {}).get("data", {}).get("v")))

    informer.add_handler(handler)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await kube.create(CONFIGMAPS, namespace, _configmap("a", "1"))
        await kube.merge_patch(CONFIGMAPS, namespace, "a", {"data": {"v": "2"}})
        await kube.delete(CONFIGMAPS, namespace, "a")
        await eventually(lambda: _has(seen, ("2", None)))
        assert [s for s in seen if s in {(None, "1"), ("1", "2"), ("2", None)}] == [
            (None, "1"), ("1", "2"), ("2", None)]
        assert informer.get(namespace, "a") is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _has(seen: list, item: tuple) -> bool:
    return item in seen


async def test_a_watch_from_an_expired_version_relists_and_loses_nothing(
        kube: KubeClient, namespace: str) -> None:
    start = (await kube.list(CONFIGMAPS, namespace))["metadata"]["resourceVersion"]
    for i in range(0, 150, 10):
        await asyncio.gather(*(kube.create(CONFIGMAPS, namespace, _configmap(f"cm-{j}"))
                               for j in range(i, i + 10)))
    # The test control plane compacts etcd every 2 s and serves ConfigMap watches from etcd:
    # soon `start` is too old, as happens to any watch that was down for long enough.
    await eventually(lambda: _expired(kube, namespace, start), timeout=30, interval=0.5)
    informer = Informer(kube, CONFIGMAPS, [namespace], compact=True)
    task = asyncio.create_task(informer.run(resume_from=start))
    try:
        await asyncio.wait_for(informer.wait_synced(), 20)
        assert informer.relists == 1
        names = {name for (_, name) in informer.object_keys()}
        assert {f"cm-{j}" for j in range(150)} <= names
        # Watching resumed after the relist: a new object still arrives.
        await kube.create(CONFIGMAPS, namespace, _configmap("after"))
        await eventually(lambda: _present(informer, namespace, "after"))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _expired(kube: KubeClient, namespace: str, version: str) -> bool:
    try:
        async for _ in kube.watch(CONFIGMAPS, namespace, version, timeout_seconds=1):
            pass
    except Gone:
        return True
    return False


async def _present(informer: Informer, namespace: str, name: str) -> bool:
    return informer.get(namespace, name) is not None


async def test_compact_reads_are_private_copies(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, [namespace], compact=True)
    informer.put({**_configmap("x"), "metadata": {"name": "x", "namespace": namespace}})
    first = informer.get(namespace, "x")
    assert first is not None
    first["data"]["v"] = "changed by a reader"
    assert informer.get(namespace, "x")["data"]["v"] == "1"  # type: ignore[index]
