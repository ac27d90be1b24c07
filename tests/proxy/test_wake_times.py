"""The gateway's watch times the wakes it sees (proxy/routes_cache.py, proxy/rules/wake_times.py): a
Userland going from asleep to Ready is one wake of its Template, which the waking page's words
then count. Real: the control plane; the Userlands' status written as the operator writes it."""

from __future__ import annotations

from tests.operator.support import template_body, userland_body
from tests.support import eventually
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient
from userland.proxy.routes_cache import RoutingCache
from userland.proxy.rules.wake_times import wake_words


async def _phase(kube: KubeClient, namespace: str, name: str, phase: str, ready: bool) -> None:
    await kube.merge_patch(USERLANDS, namespace, name, {"status": {"phase": phase, "conditions": [{
        "type": "Ready", "status": "True" if ready else "False", "reason": phase, "message": "test",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")


async def test_three_wakes_seen_make_the_waking_page_say_how_long(kube: KubeClient, namespace: str) -> None:
    await kube.create(TEMPLATES, namespace, template_body("ide", displayName="Python IDE",
                                                          routing={"host": "ide.example.edu"}))
    for student in ("ann", "bob", "cy"):
        await kube.create(USERLANDS, namespace, userland_body(student, "ide"))
    routes = RoutingCache(kube, [namespace])
    await routes.start()
    try:
        await routes.wait_synced()
        none_yet = wake_words(routes.wake_times.recent(namespace, "ide"), "Python IDE")
        assert none_yet.startswith("Waking up usually")
        for student in ("ann", "bob", "cy"):
            name = f"ide-{student}"
            await _phase(kube, namespace, name, "Ready", True)  # a first start: no wake
            await _phase(kube, namespace, name, "Idle", False)
            await _phase(kube, namespace, name, "Starting", False)
            await _phase(kube, namespace, name, "Ready", True)
        took = await eventually(lambda: len(routes.wake_times.recent(namespace, "ide")) == 3 and
                                routes.wake_times.recent(namespace, "ide"))
        assert all(seconds >= 0 for seconds in took), took
        assert wake_words(took, "Python IDE").startswith("Waking Python IDE up took ")
    finally:
        await routes.stop()
