"""The class dashboard at 600 students renders from the web UI's watch cache: no API call per
page, per row, per filter (issue 16: filtering by environment must not change that).

Real: the web UI app over HTTP with its watches on the real API server, 600 Userlands in a mix
of states. The client is the project's KubeClient, counting the requests it makes (list, get,
patch ...; watches are streams of their own and are not counted).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import redis.asyncio
from aiohttp.test_utils import TestClient

from tests.web.support import make_course
from tests.web.test_course_pages import PUBLIC, SECRET, SESSION, headers, settings
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.clients.kubeconfig import cluster_access
from userland.web.app import create_app
from userland.web.rules import security

STUDENTS = 600
PHASES = ("Ready", "Ready", "Idle", "Starting", "Failed", "Pending")


class CountingKube(KubeClient):
    """The real client, counting every request it makes that is not a watch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: Counter[str] = Counter()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.requests[f"{method} {path}"] += 1
        return await super().request(method, path, **kwargs)


async def _students(kube: KubeClient, namespace: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    limit = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        login, phase = f"s{i:03d}", PHASES[i % len(PHASES)]
        async with limit:
            await kube.create(USERLANDS, namespace, {
                "apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
                "metadata": {"name": f"ide-{login}"},
                "spec": {"user": login, "template": "ide", "suspended": i % 10 == 0}})
            await kube.merge_patch(USERLANDS, namespace, f"ide-{login}", {"status": {
                "phase": phase, "url": f"http://{login}.ide.example.edu/", "conditions": [{
                    "type": "Ready", "status": "True" if phase == "Ready" else "False", "reason": phase,
                    "message": "m", "lastTransitionTime": now}]}}, subresource="status")

    await asyncio.gather(*(one(i) for i in range(STUDENTS)))


async def test_600_students_render_with_no_api_call_per_row_or_filter(
        aiohttp_client: Any, kube: KubeClient, namespace: str, redis_url: str,
        control_plane: Any) -> None:
    await make_course(kube, namespace, title="Big class")
    await _students(kube, namespace)
    counting = CountingKube(await cluster_access(str(control_plane.kubeconfig)))
    conn = redis.asyncio.Redis.from_url(redis_url)
    try:
        client: TestClient[Any, Any] = await aiohttp_client(create_app(settings(redis_url), kube=counting,
                                                                        redis_client=conn))
        deadline = time.monotonic() + 30
        while True:  # loaded: the page lists the last student
            response = await client.get(f"/courses/{namespace}?q=s599", headers=headers("teacher"))
            if response.status == 200 and 'data-name="ide-s599"' in await response.text():
                break
            assert time.monotonic() < deadline, "the course never loaded"
            await asyncio.sleep(0.1)
        before = counting.requests.copy()
        for query in ("", "?phase=ready", "?phase=suspended", "?phase=asleep&sort=phase", "?q=s5&page=2",
                      "?sort=activity&page=12", "?phase=failed&q=s1"):
            response = await client.get(f"/courses/{namespace}{query}", headers=headers("teacher"))
            assert response.status == 200, query
            assert "Showing" in await response.text()
        assert counting.requests == before, counting.requests - before
        # A course-wide confirmation lists its environments from the same cache: one list of the
        # course's Templates (their titles and storage), nothing per row.
        response = await client.post(f"/courses/{namespace}/actions",
                                     headers={**headers("teacher"), "Origin": PUBLIC},
                                     data={"action": "suspend", "scope": "all", "phase": "ready", "q": "",
                                           "csrf": security.csrf_token(SECRET, "teacher", SESSION)})
        page = await response.text()
        assert response.status == 200 and "Suspend 180 environments" in page, page[-800:]
        assert sum((counting.requests - before).values()) == 1, counting.requests - before
    finally:
        await counting.close()
        await conn.aclose()

