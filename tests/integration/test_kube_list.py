"""KubeClient.list against the real API server: pages, and a continue token that expired.

The API server under test compacts etcd every 2 s (tests/conftest.py), so a continue token
expires within seconds once something is written. A relay between the client and the API
server (a real local HTTP server, not a patch of our code) holds the client's first `continue`
request until the API server itself refuses that token with 410, then passes it on: the
client meets the real 410 "The provided continue parameter is too old" at the real moment.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from userland.local.controlplane import ADMIN_TOKEN, ControlPlane
from userland.platform.clients.kube import KubeClient, Resource
from userland.platform.clients.kubeconfig import ClusterAccess

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class ExpiringRelay:
    """Forwards every request to the API server; the first one carrying a continue token is
    held until that token has expired (writes advance etcd's revision, the API server's
    compactor does the rest), so the forwarded request gets the API server's own 410."""

    def __init__(self, upstream: str, namespace: str) -> None:
        self.upstream = upstream
        self.namespace = namespace
        self.seen: list[tuple[dict[str, str], int]] = []  # (query, status) per forwarded request
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False))
        self.held = False

    async def _expire(self, request: web.Request) -> None:
        for i in range(60):
            await self.session.post(
                f"{self.upstream}/api/v1/namespaces/{self.namespace}/configmaps", headers=AUTH,
                json={"metadata": {"name": f"bump-{i}-{uuid.uuid4().hex[:6]}"}})
            async with self.session.get(self.upstream + request.path_qs, headers=AUTH) as probe:
                if probe.status == 410:
                    return
            await asyncio.sleep(1)
        raise AssertionError("the continue token never expired")

    async def handle(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        if "continue" in query and not self.held:
            self.held = True
            await self._expire(request)
        async with self.session.request(request.method, self.upstream + request.path_qs,
                                        headers={"Authorization": request.headers.get("Authorization", "")},
                                        data=await request.read()) as resp:
            body = await resp.read()
            self.seen.append((query, resp.status))
            return web.Response(status=resp.status, body=body, content_type="application/json")


def _client_via(server_url: str) -> KubeClient:
    async def authorization() -> str | None:
        return f"Bearer {ADMIN_TOKEN}"

    return KubeClient(ClusterAccess(server_url, ssl.create_default_context(), authorization))


async def test_list_follows_pages(kube: KubeClient, namespace: str) -> None:
    for i in range(5):
        await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": f"cm-{i}", "labels": {"set": "a"}}})
    listing = await kube.list(CONFIGMAPS, namespace, label_selector="set=a", limit=2)
    assert sorted(item["metadata"]["name"] for item in listing["items"]) == [f"cm-{i}" for i in range(5)]
    assert listing["metadata"]["resourceVersion"]


async def test_list_restarts_in_full_when_the_continue_token_expired(
        control_plane: ControlPlane, namespace: str, kube: KubeClient) -> None:
    for i in range(5):
        await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": f"cm-{i}", "labels": {"set": "a"}}})
    relay = ExpiringRelay(control_plane.url, namespace)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = _client_via(str(server.make_url("")).rstrip("/"))
    try:
        listing = await client.list(CONFIGMAPS, namespace, label_selector="set=a", limit=2)
    finally:
        await client.close()
        await server.close()
        await relay.session.close()
    # First page, then the expired continue token (the API server's own 410), then one
    # unpaginated list that replaces the pages read so far.
    (first, _), (expired, expired_status), (full, full_status) = relay.seen
    assert first.get("limit") == "2" and "continue" not in first
    assert "continue" in expired and expired_status == 410
    assert "continue" not in full and "limit" not in full and full.get("labelSelector") == "set=a"
    assert full_status == 200
    assert len(relay.seen) == 3
    assert sorted(item["metadata"]["name"] for item in listing["items"]) == [f"cm-{i}" for i in range(5)]
    assert listing["metadata"]["resourceVersion"]

