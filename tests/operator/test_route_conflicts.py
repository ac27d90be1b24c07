"""Two Templates claiming one route: reported on both, on the unrouted one's Userlands, and the
gateway's routing table agrees (platform/model/routes.py decides for both). Real: the API server, the
operator's Controller and the gateway's RoutingCache watching it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.operator.support import Cluster, OperatorRunner
from tests.support import eventually
from tests.support.objects import template_body, userland_body
from userland.platform.clients.kube import EVENTS, NAMESPACES, TEMPLATES, USERLANDS, KubeClient
from userland.proxy.routes_cache import RoutingCache
from userland.proxy.rules.routing import route_for

JSON = dict[str, Any]


@pytest.fixture
async def other_namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACES, None, name)


async def _ready(kube: KubeClient, resource: Any, ns: str, name: str) -> JSON:
    obj = await kube.get(resource, ns, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


def _reason(reason: str, kube: KubeClient, resource: Any, ns: str, name: str) -> Any:
    async def check() -> JSON | None:
        ready = await _ready(kube, resource, ns, name)
        return ready if ready.get("reason") == reason else None
    return check


async def test_a_host_claimed_in_two_namespaces_is_reported_on_both_and_routed_to_the_older(
    cluster: Cluster, kube: KubeClient, namespace: str, other_namespace: str, run_operator: OperatorRunner
) -> None:
    older, newer = (namespace, "ide"), (other_namespace, "ide2")
    await kube.create(TEMPLATES, namespace, template_body("ide", routing={"host": "ide.example.edu"}))
    await asyncio.sleep(1.1)  # creationTimestamps have one-second resolution: make the order plain
    await kube.create(TEMPLATES, other_namespace, template_body(
        "ide2", displayName="Python IDE", routing={"host": "IDE.example.edu"}))
    await kube.create(USERLANDS, namespace, userland_body("ann", "ide"))
    await kube.create(USERLANDS, other_namespace, userland_body("bob", "ide2"))
    routes = RoutingCache(kube, [namespace, other_namespace], platform_host="userland.example.edu")
    await routes.start()
    try:
        async with run_operator(namespaces=(namespace, other_namespace)):
            kept = await eventually(_reason("RouteConflict", kube, TEMPLATES, *older))
            lost = await eventually(_reason("RouteConflict", kube, TEMPLATES, *newer))
            assert kept["status"] == lost["status"] == "False"
            assert f"Template {other_namespace}/ide2 also claims its host ide.example.edu" in kept["message"]
            assert "keeps it" in kept["message"]
            assert f"already used by Template {namespace}/ide" in lost["message"]
            # The unrouted Template's students are told, in words an instructor can pass on.
            bob = await eventually(_reason("RouteConflict", kube, USERLANDS, other_namespace, "ide2-bob"))
            assert bob["message"].startswith("Python IDE cannot be opened: its address is also used by "
                                             f"{namespace}/ide")
            assert (await kube.get(USERLANDS, other_namespace, "ide2-bob"))["status"]["phase"] == "Failed"
            # The older Template's students are not affected.
            assert (await _ready(kube, USERLANDS, namespace, "ide-ann"))["reason"] == "Starting"

            # The gateway routes exactly as the operator reports.
            await routes.wait_synced()
            table = routes.routes
            route = route_for("ide.example.edu", "/", table)
            assert route is not None and (route.namespace, route.template) == older
            assert [r.key for r in table.routed_out] == [f"{other_namespace}/ide2"]

            # Fixing the newer Template's host clears it everywhere, by itself.
            await kube.merge_patch(TEMPLATES, other_namespace, "ide2",
                                   {"spec": {"routing": {"host": "ide2.example.edu"}}})
            await eventually(_reason("Valid", kube, TEMPLATES, *older))
            await eventually(_reason("Valid", kube, TEMPLATES, *newer))
            await eventually(_reason("Starting", kube, USERLANDS, other_namespace, "ide2-bob"))

            async def both_routed() -> bool:
                table = routes.routes
                return route_for("ide2.example.edu", "/", table) is not None and table.routed_out == ()

            await eventually(both_routed)
    finally:
        await routes.stop()
    for ns, kind, name in ((namespace, "Template", "ide"), (other_namespace, "Template", "ide2"),
                           (other_namespace, "Userland", "ide2-bob")):
        events = (await kube.list(EVENTS, ns))["items"]
        assert any(e["reason"] == "RouteConflict" and e["type"] == "Warning"
                   and e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
                   for e in events), (kind, name)


async def test_one_path_prefix_twice_in_a_namespace(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await kube.create(TEMPLATES, namespace, template_body("nb", routing={"pathPrefix": "/nb/"}))
    await asyncio.sleep(1.1)
    await kube.create(TEMPLATES, namespace, template_body("lab", routing={"pathPrefix": "/nb"}))
    await cluster.create_userland("cy", "lab")
    async with run_operator():
        lost = await eventually(_reason("RouteConflict", kube, TEMPLATES, namespace, "lab"))
        assert f"its path /nb/ is already used by Template {namespace}/nb" in lost["message"]
        kept = await eventually(_reason("RouteConflict", kube, TEMPLATES, namespace, "nb"))
        assert f"Template {namespace}/lab also claims its path /nb/" in kept["message"]
        await eventually(_reason("RouteConflict", kube, USERLANDS, namespace, "lab-cy"))
        # Deleting the older one frees the path for the other.
        await kube.delete(TEMPLATES, namespace, "nb")
        await eventually(_reason("Valid", kube, TEMPLATES, namespace, "lab"))
        await eventually(_reason("Starting", kube, USERLANDS, namespace, "lab-cy"))
