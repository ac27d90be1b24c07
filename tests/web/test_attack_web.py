"""Attack review of the web UI (issue 6 follow-up), against the real application: its watches on
the real kube-apiserver, a real Redis, identities signed as the gateway signs them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.web.test_course_pages import Client, courses, eventually_page, headers, settings
from userland.platform.clients.kube import KubeClient
from userland.platform.model.settings import Settings
from userland.web.app import create_app

__all__ = ["courses"]  # the fixture, used by name below

STREAM_LIMIT = 3


async def _client(aiohttp_client: Callable[[web.Application], Awaitable[Client]], kube: KubeClient,
                  redis_url: str, courses: tuple[str, str], config: Settings) -> AsyncIterator[Client]:
    conn = redis.asyncio.Redis.from_url(redis_url)
    test_client: TestClient[web.Request, web.Application] = await aiohttp_client(
        create_app(config, kube=kube, redis_client=conn))
    deadline = time.monotonic() + 20
    while (await test_client.get("/healthz")).status != 200:
        assert time.monotonic() < deadline, "healthz never became ready"
        await asyncio.sleep(0.05)
    page = await eventually_page(test_client, f"/courses/{courses[0]}", headers("root", "admin"), "bob")
    assert "bob" in page
    yield test_client
    # The app first (its help monitor and sessions use the connection until it stops), then the
    # connection: closed under a running app, the monitor's channel broke and the app's cleanup
    # could hang until pytest's timeout on a loaded machine.
    await test_client.close()
    await conn.aclose()


@pytest.fixture
async def limited(aiohttp_client: Callable[[web.Application], Awaitable[Client]], kube: KubeClient,
                  redis_url: str, courses: tuple[str, str]) -> AsyncIterator[Client]:
    config = Settings(**{**settings(redis_url).__dict__, "max_streams_per_user": STREAM_LIMIT})
    async for client in _client(aiohttp_client, kube, redis_url, courses, config):
        yield client


async def test_live_streams_are_capped_per_user(limited: Client, courses: tuple[str, str]) -> None:
    """One signed-in user opening streams without end (each holds a connection through the
    gateway and a subscription here) gets a 429 page past the cap; others are unaffected."""
    cs = courses[0]
    held = []
    for _ in range(STREAM_LIMIT):
        response = await limited.get(f"/courses/{cs}/stream", headers=headers("teacher"))
        assert response.status == 200
        assert (await response.content.readline()).startswith(b"retry:")
        held.append(response)
    refused = await limited.get(f"/courses/{cs}/stream", headers=headers("teacher"))
    assert refused.status == 429
    assert refused.headers["Content-Type"].startswith("text/html")
    assert "Traceback" not in await refused.text()
    # The same user's other course counts too (the cap is per user, not per course).
    other = await limited.get(f"/courses/{courses[1]}/stream", headers=headers("teacher", "instructor"))
    assert other.status == 429
    # Another member of staff is not affected.
    ta = await limited.get(f"/courses/{cs}/stream", headers=headers("ta1"))
    assert ta.status == 200
    ta.close()
    # Closing one makes room again (the server notices the closed connection).
    held.pop().close()
    deadline = time.monotonic() + 20
    while True:
        again = await limited.get(f"/courses/{cs}/stream", headers=headers("teacher"))
        if again.status == 200:
            break
        again.close()
        assert time.monotonic() < deadline, "a closed stream never freed its place"
        await asyncio.sleep(0.2)
    again.close()
    for response in held:
        response.close()


async def test_a_students_live_pages_are_capped_too(limited: Client) -> None:
    """A student's "My environments" stream (GET /me/stream) holds the same resources as a
    dashboard's: the same per-user cap, and a closed one frees its place."""
    held = []
    for _ in range(STREAM_LIMIT):
        response = await limited.get("/me/stream", headers=headers("alice"))
        assert response.status == 200
        assert (await response.content.readline()).startswith(b"retry:")
        held.append(response)
    refused = await limited.get("/me/stream", headers=headers("alice"))
    assert refused.status == 429 and "Traceback" not in await refused.text()
    bob = await limited.get("/me/stream", headers=headers("bob"))  # another student: unaffected
    assert bob.status == 200
    bob.close()
    held.pop().close()
    deadline = time.monotonic() + 20
    while True:
        again = await limited.get("/me/stream", headers=headers("alice"))
        if again.status == 200:
            break
        again.close()
        assert time.monotonic() < deadline, "a closed stream never freed its place"
        await asyncio.sleep(0.2)
    again.close()
    for response in held:
        response.close()
