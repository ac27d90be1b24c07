"""The informer against the real API server: events, 410 Gone and relist, compact storage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from tests.support import eventually
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import DEPLOYMENTS, Conflict, Gone, KubeClient, Resource
from userland.platform.clients.kubeconfig import cluster_access

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


async def test_a_handler_of_own_writes_sees_each_change_once_whoever_stored_it_first(
        kube: KubeClient, namespace: str) -> None:
    """Issue 26: a change this process wrote and `put()` stored reaches the watch as no change
    (the cache holds it already), so a handler of the watch alone never sees it; one registered
    with `own_writes` sees it from `put()`, and not again from the watch. The watch is stopped
    around our write, so `put()` surely comes first (as it nearly always does: the write's
    response leaves the API server before its watch event)."""
    informer = Informer(kube, CONFIGMAPS, [namespace], compact=True)
    watched: list[tuple[str | None, str | None]] = []
    own: list[tuple[str | None, str | None]] = []

    def record(into: list[tuple[str | None, str | None]]) -> Callable[[dict | None, dict | None], None]:
        def handler(old: dict | None, new: dict | None) -> None:
            values = ((old or {}).get("data", {}).get("v"), (new or {}).get("data", {}).get("v"))
            if values[0] != values[1]:
                into.append(values)
        return handler

    informer.add_handler(record(watched))
    informer.add_handler(record(own), own_writes=True)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await kube.create(CONFIGMAPS, namespace, _configmap("a", "1"))
        await eventually(lambda: _present(informer, namespace, "a"))
        seen = str(informer.get(namespace, "a")["metadata"]["resourceVersion"])  # type: ignore[index]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # Our write, stored at once.
        assert informer.put(await kube.merge_patch(CONFIGMAPS, namespace, "a", {"data": {"v": "2"}}))
        assert own == [(None, "1"), ("1", "2")] and watched == [(None, "1")]
        # The watch, resumed from before our write, brings it: no change, for either.
        task = asyncio.create_task(informer.run(resume_from=seen))
        # Another writer's change: both see it, from the watch.
        await kube.merge_patch(CONFIGMAPS, namespace, "a", {"data": {"v": "3"}})
        await eventually(lambda: _has(watched, ("2", "3")))
        assert own == [(None, "1"), ("1", "2"), ("2", "3")]
        assert watched == [(None, "1"), ("2", "3")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


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
        # Counted for /metrics: the expired watch, and the relist it took.
        assert informer.watch_stats.restarts["expired"] == 1 and informer.watch_stats.relists == 1
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


# --- the two ways a cache went quietly stale ------------------------------------------------


def _deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def _observed(informer: Informer, namespace: str, name: str, generation: int) -> bool:
    obj = informer.get(namespace, name) or {}
    return int((obj.get("status") or {}).get("observedGeneration") or 0) >= generation


async def test_a_write_response_older_than_the_watch_never_rolls_the_cache_back(
        kube: KubeClient, namespace: str) -> None:
    """The cause of the stale Deployment under the 300-student wake bench: a worker's update
    response arrived after the watch had delivered the deployment controller's status write
    that followed it; storing the response rolled the cache back, the watch never repeats
    itself, and the next update from the cache met 409 (for a sleeping environment, for ever).

    The real deployment controller writes this Deployment's status whenever it likes; nothing
    here depends on when: our writes that need no version are patches, and the update from the
    cache is made once the cache holds the server's version (a controller's write in between is
    a 409 that any writer meets and retries from the cache; a rolled-back cache never catches up)."""
    informer = Informer(kube, DEPLOYMENTS, [namespace], compact=True)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await kube.create(DEPLOYMENTS, namespace, _deployment("web"))
        await eventually(lambda: _observed(informer, namespace, "web", 1))
        # Our write (as the operator's wake: scale up); its response is held back, as a busy
        # worker's is while the watch task runs first.
        response = await kube.merge_patch(DEPLOYMENTS, namespace, "web", {"spec": {"replicas": 1}})
        generation = int(response["metadata"]["generation"])
        # The real deployment controller writes status for that generation (always after our
        # write: it observed it); the watch brings it.
        await eventually(lambda: _observed(informer, namespace, "web", generation))
        newer = informer.get(namespace, "web")
        assert newer is not None and int(newer["metadata"]["resourceVersion"]) > int(
            response["metadata"]["resourceVersion"])
        # Now the held-back response arrives.
        assert informer.put(response) is False
        assert informer.stale_puts == 1
        assert informer.get(namespace, "web") == newer
        # An update made from the cache is made from the newest version: it goes through.
        await eventually(lambda: _replace_from_cache(kube, informer, namespace, "web", replicas=0))
        # A newer write of ours is recorded as before (the watch stopped first: nothing newer can
        # reach the cache before it, whoever writes next).
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        labelled = {"metadata": {"labels": {"seen": "1"}}}
        latest = await kube.merge_patch(DEPLOYMENTS, namespace, "web", labelled)
        assert informer.put(latest) is True and informer.get(namespace, "web") == _typed(informer, latest)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _replace_from_cache(kube: KubeClient, informer: Informer, namespace: str, name: str, *,
                              replicas: int) -> bool:
    """Scale `name` by replacing the cached copy, once the cache holds the server's version; False
    (try again) while it does not, or when a controller wrote between the read and the replace."""
    cached = informer.get(namespace, name)
    server = await kube.get(DEPLOYMENTS, namespace, name)
    if cached is None or cached["metadata"]["resourceVersion"] != server["metadata"]["resourceVersion"]:
        return False
    cached["spec"]["replicas"] = replicas
    try:
        await kube.replace(DEPLOYMENTS, namespace, name, cached)
    except Conflict:
        return False
    return True


def _typed(informer: Informer, obj: dict) -> dict:
    return informer._typed(dict(obj))


async def test_a_late_create_response_does_not_bring_back_a_deleted_object(
        kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, [namespace])
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        created = await kube.create(CONFIGMAPS, namespace, _configmap("brief"))
        await eventually(lambda: informer.get(namespace, "brief"))
        await kube.delete(CONFIGMAPS, namespace, "brief")
        await eventually(lambda: informer.get(namespace, "brief") is None)
        assert informer.put(created) is False
        assert informer.get(namespace, "brief") is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class StallingProxy:
    """A TCP proxy in front of the API server that can stall: `stall()` makes every
    connection open at that moment stop passing bytes either way, without closing it (as a
    half-open connection or a stuck middlebox does); connections made afterwards pass."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.server: asyncio.Server | None = None
        self.port = 0
        self.connections: list[asyncio.Event] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    def stall(self) -> None:
        for frozen in self.connections:
            frozen.set()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frozen = asyncio.Event()
        self.connections.append(frozen)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                if frozen.is_set():
                    await asyncio.Event().wait()  # hold the bytes and the connection for ever
                sink.write(data)
                await sink.drain()

        pipes = [asyncio.create_task(pipe(reader, up_writer)), asyncio.create_task(pipe(up_reader, writer))]
        try:
            await asyncio.gather(*pipes)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for task in pipes:
                task.cancel()
            writer.close()
            up_writer.close()


async def test_a_watch_that_stops_delivering_without_closing_is_noticed_and_relisted(
        control_plane: Any, kube: KubeClient, namespace: str) -> None:
    access = await cluster_access(str(control_plane.kubeconfig))
    parts = urlsplit(access.host)
    proxy = StallingProxy((parts.hostname or "127.0.0.1", parts.port or 443))
    await proxy.start()
    access.host = f"https://{parts.hostname}:{proxy.port}"
    # Its idle connections last 1 s, under this test's stall bound as 15 s are under the real one
    # (75 s): the proxy stalls every connection open at that moment, idle pooled ones too.
    through_proxy = KubeClient(access, keepalive_timeout=1.0)
    # Quiet for at most 2 s (the watch's own timeout) + 5 s of grace: then it is stalled (a grace
    # of 1 s took a watch's ordinary end, delivered late on a loaded machine, for a stall).
    informer = Informer(through_proxy, CONFIGMAPS, [namespace], watch_timeout=2, stall_grace=5)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await kube.create(CONFIGMAPS, namespace, _configmap("before"))
        await eventually(lambda: informer.get(namespace, "before"))
        proxy.stall()
        await kube.create(CONFIGMAPS, namespace, _configmap("during"))
        # Noticed as a stall (quiet past its bound, 7 s) and relisted: the object the stalled
        # watch held back is there. (Before, the watch's read timeout was its timeout + 30 s, then
        # a resume: no stall counted, no relist. How soon it is noticed is the bound's to say, not
        # this test's clock.)
        await eventually(lambda: informer.get(namespace, "during"), timeout=60, interval=0.05)
        assert informer.stalls == 1 and informer.relists == 2
        # And it watches again afterwards, through a fresh connection.
        await kube.create(CONFIGMAPS, namespace, _configmap("after"))
        await eventually(lambda: informer.get(namespace, "after"), timeout=10)
        assert informer.healthy
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await through_proxy.close()
        await proxy.close()
