"""Where the gateway sends a student's traffic, from the Services its watch holds (real API server).

`clusterip` (the default): the ClusterIP the API server gave the Service, so no DNS lookup
happens per connection and a cluster without DNS works (the real node's suite in
tests/cluster/ carries the bytes that way). A headless Service falls back to its DNS name.
`dns`: the DNS name. `local`: the local runner's annotation, which the other modes ignore.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.conftest import IDE_HOST, GatewayFactory, World, routes_of
from tests.support import eventually
from userland.platform.clients.kube import SERVICES, KubeClient
from userland.platform.model import naming
from userland.platform.model.settings import Settings
from userland.proxy.app import GATEWAY
from userland.proxy.gateway import Gateway


def _gateway(client: Any) -> Gateway:
    gateway: Gateway = client.app[GATEWAY]
    return gateway


async def _environment_url(client: Any, template: str, login: str) -> str | None:
    gateway = _gateway(client)
    namespace = gateway.settings.namespaces[0]
    await eventually(lambda: IDE_HOST in routes_of(client).routes.by_host
                     and gateway.routes.service(namespace, naming.service_name(template, login)) is not None)
    return gateway.environment_url(routes_of(client).routes.by_host[IDE_HOST], login)


async def test_clusterip_is_the_default_mode() -> None:
    assert Settings().upstream_mode == "clusterip"
    assert Settings.from_env({"USERLAND_UPSTREAM_MODE": "ClusterIP"}).upstream_mode == "clusterip"


async def test_clusterip_mode_uses_the_ip_the_api_server_assigned(
        world: World, kube: KubeClient, namespace: str, gateway_factory: GatewayFactory) -> None:
    await world.template("ide", host=IDE_HOST)
    await world.userland("ide", "alice")
    # An annotation pointing elsewhere must change nothing outside the local mode.
    await world.service("ide", "alice", upstream="http://127.0.0.1:1", port=8443)
    client = await gateway_factory(upstream_mode="clusterip")
    service = await kube.get(SERVICES, namespace, naming.service_name("ide", "alice"))
    cluster_ip = service["spec"]["clusterIP"]
    assert cluster_ip and cluster_ip != "None"
    assert await _environment_url(client, "ide", "alice") == f"http://{cluster_ip}:8443"


async def test_clusterip_mode_falls_back_to_dns_for_a_headless_service(
        world: World, kube: KubeClient, namespace: str, gateway_factory: GatewayFactory) -> None:
    await world.template("ide", host=IDE_HOST)
    await world.userland("ide", "bob")
    await kube.create(SERVICES, namespace, {
        "metadata": {"name": naming.service_name("ide", "bob"),
                     "labels": {naming.LABEL_USER: "bob", naming.LABEL_TEMPLATE: "ide"}},
        "spec": {"clusterIP": "None", "ports": [{"port": 8080}], "selector": {"app": "x"}}})
    client = await gateway_factory(upstream_mode="clusterip")
    assert await _environment_url(client, "ide", "bob") == (
        f"http://ide-bob-svc.{namespace}.svc.cluster.local:8080")


@pytest.mark.parametrize(("mode", "expected"), [
    ("dns", "http://ide-carol-svc.{namespace}.svc.cluster.local:8080"),
    ("local", "http://127.0.0.1:40123"),
])
async def test_dns_and_local_modes_are_unchanged(world: World, namespace: str,
                                                 gateway_factory: GatewayFactory,
                                                 mode: str, expected: str) -> None:
    await world.template("ide", host=IDE_HOST)
    await world.userland("ide", "carol")
    await world.service("ide", "carol", upstream="http://127.0.0.1:40123/")
    client = await gateway_factory(upstream_mode=mode)
    assert await _environment_url(client, "ide", "carol") == expected.format(namespace=namespace)


async def test_another_users_service_is_never_a_target(world: World, kube: KubeClient, namespace: str,
                                                       gateway_factory: GatewayFactory) -> None:
    # A Service named like dave's but labelled for someone else (defence in depth).
    await world.template("ide", host=IDE_HOST)
    await world.userland("ide", "dave")
    await kube.create(SERVICES, namespace, {
        "metadata": {"name": naming.service_name("ide", "dave"),
                     "labels": {naming.LABEL_USER: "mallory", naming.LABEL_TEMPLATE: "ide"}},
        "spec": {"ports": [{"port": 8080}], "selector": {"app": "x"}}})
    client = await gateway_factory(upstream_mode="clusterip")
    assert await _environment_url(client, "ide", "dave") is None
