"""A student asking again and again for a course that does not exist costs the API server one
namespace GET every few seconds, not one per request (issue 25: 600 requests were 600 GETs).

Real: the web UI app over HTTP with its watches on the real API server; the client is the
project's KubeClient counting the requests it makes (tests/web/test_dashboard_scale.py)."""

from __future__ import annotations

import math
import time
from typing import Any

import redis.asyncio
from aiohttp.test_utils import TestClient

from tests.web.support import make_course
from tests.web.test_course_pages import headers, settings
from tests.web.test_dashboard_scale import CountingKube
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.kubeconfig import cluster_access
from userland.web.access import MISS_SECONDS, Misses
from userland.web.app import create_app

REQUESTS = 300


async def test_a_made_up_course_asked_for_again_and_again_costs_one_get_per_few_seconds(
        aiohttp_client: Any, kube: KubeClient, namespace: str, redis_url: str, control_plane: Any) -> None:
    await make_course(kube, namespace, title="Real class")
    counting = CountingKube(await cluster_access(str(control_plane.kubeconfig)))
    conn = redis.asyncio.Redis.from_url(redis_url)
    try:
        client: TestClient[Any, Any] = await aiohttp_client(create_app(settings(redis_url), kube=counting,
                                                                        redis_client=conn))
        # "default" exists and is not a course; "made-up-course" does not exist at all.
        for name in ("made-up-course", "default"):
            before = counting.requests.copy()
            started = time.monotonic()
            for _ in range(REQUESTS):
                response = await client.get(f"/courses/{name}", headers=headers("mallory"))
                assert response.status == 404
            elapsed = time.monotonic() - started
            gets = (counting.requests - before)[f"GET /api/v1/namespaces/{name}"]
            # One GET, and one more each time the remembered miss ran out while the requests went on.
            assert 1 <= gets <= 1 + math.ceil(elapsed / MISS_SECONDS), (name, gets, elapsed)
        # A real course is never taken for a miss.
        response = await client.get(f"/courses/{namespace}", headers=headers("teacher"))
        assert response.status == 200 and "Real class" in await response.text()
    finally:
        await counting.close()
        await conn.aclose()


def test_misses_are_remembered_for_a_while_and_bounded() -> None:
    misses = Misses(seconds=5.0, most=3)
    misses.remember("a", now=100.0)
    assert misses.known("a", now=104.9) and not misses.known("a", now=105.0)
    assert not misses.known("a", now=105.1)  # forgotten once it ran out
    for name in ("b", "c", "d", "e"):
        misses.remember(name, now=200.0)
    assert [misses.known(n, now=201.0) for n in ("b", "c", "d", "e")] == [False, True, True, True]
