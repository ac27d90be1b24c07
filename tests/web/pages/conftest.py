"""Fixtures of the web UI's page tests (what is real: see tests/web/pages/support.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.support import eventually
from tests.web.course_support import apply_rbac, web_client
from tests.web.pages import class_states
from tests.web.pages.support import (
    PAGES_TEST_DB,
    ROLEBINDINGS,
    AppFactory,
    Browserless,
    settings,
    wait_for_access,
)
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import KubeClient
from userland.web.app import create_app


@pytest.fixture
async def pages_redis(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url.rsplit("/", 1)[0] + f"/{PAGES_TEST_DB}")
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="session")
def web_rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


@pytest.fixture
async def web_kube(web_rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    """The web UI's own ServiceAccount (deploy/rbac/ applied)."""
    async with web_client(web_rbac, tmp_path) as client:
        yield client


@pytest.fixture
def web_ui(aiohttp_client: Any, kube: KubeClient, web_kube: KubeClient, namespace: str,
           pages_redis: redis.asyncio.Redis) -> AppFactory:
    """`await web_ui()` -> `as_user(login, role)`; keyword args: `kube=`, `redis_client=`,
    `settings_extra=` (more settings, such as the assignment store's).

    The app talks as the web UI's ServiceAccount unless `kube=` says otherwise; when the test's
    namespace is a bound course, this waits until the API server lets the ServiceAccount in.
    Then, as a Deployment's readiness probe does before it sends the web UI any traffic, it
    waits until /healthz answers 200 (the course list and every course loaded): a page asked
    before that is a 503 "still loading" by design, which a loaded machine can take longer than
    the page's own short wait to get past. A `kube=` of the test's own (a dead API server) is
    never ready: no wait then.
    """

    async def start(**kwargs: Any) -> Callable[[str, str], Browserless]:
        client_kube = kwargs.get("kube", web_kube)
        if client_kube is web_kube and (await kube.list(ROLEBINDINGS, namespace))["items"]:
            await wait_for_access(web_kube, namespace)
        app = create_app(settings(**kwargs.get("settings_extra", {})), kube=client_kube,
                         redis_client=kwargs.get("redis_client", pages_redis))
        client = await aiohttp_client(app)
        if "kube" not in kwargs:
            await eventually(lambda: _ready(client), timeout=60,
                             explain=lambda: "its /healthz never answered 200 (the courses did not load)")

        def as_user(login: str, role: str = "student") -> Browserless:
            return Browserless(client=client, login=login, role=role)

        return as_user

    return start


async def _ready(client: Any) -> bool:
    async with client.get("/healthz") as response:
        return bool(response.status == 200)


@pytest.fixture
async def mixed_class(kube: KubeClient, namespace: str, web_ui: AppFactory) -> AsyncIterator[Browserless]:
    """The test's namespace as a course with one environment in every state (class_states.CLASS),
    and its instructor's requests, once the web UI's cache has all of it."""
    async for teacher in class_states.mixed_class(kube, namespace, web_ui):
        yield teacher
