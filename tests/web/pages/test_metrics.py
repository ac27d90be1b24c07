"""The web UI's figures against what happened (docs/metrics.md): pages by route pattern, never a
course's name; live streams open while a dashboard is open; staff actions by course, action and
outcome; served on the internal listener only, never through the public one.

Real parts: the web UI app over HTTP, the control plane, Redis (tests/web/pages/support.py).
"""

from __future__ import annotations

from typing import Any

from tests.support import eventually
from tests.support.metrics import Samples, parse
from tests.support.metrics import value as get
from tests.web.pages.support import INSTRUCTOR, AppFactory, headers, make_course, make_template
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.model import naming
from userland.web.app import create_internal_app


async def scrape(aiohttp_client: Any, app: Any) -> Any:
    return await aiohttp_client(create_internal_app(app))


async def samples(internal: Any) -> Samples:
    response = await internal.get("/metrics")
    assert response.status == 200
    return parse(await response.text())


async def test_pages_streams_and_actions_are_counted(kube: KubeClient, namespace: str, web_ui: AppFactory,
                                                     aiohttp_client: Any) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    for login in ("alice", "bob"):
        await kube.create(USERLANDS, namespace, {
            "apiVersion": naming.API_VERSION, "kind": "Userland",
            "metadata": {"name": naming.userland_name("vscode", login)},
            "spec": {"user": login, "template": "vscode"}})
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    internal = await scrape(aiohttp_client, teacher.client.app)
    assert (await teacher.get(f"/courses/{namespace}"))[0] == 200
    assert (await teacher.get(f"/courses/{namespace}"))[0] == 200
    assert (await teacher.get("/no/such/page"))[0] == 404
    status, _ = await teacher.post(f"/courses/{namespace}/actions",
                                   {"action": "restart", "names": [naming.userland_name("vscode", "alice"),
                                                                   "vscode-nobody"]})
    assert status == 200
    found = await samples(internal)
    dashboard = "/courses/{ns}"
    assert get(found, "userland_web_requests_total", route=dashboard, method="GET", code_class="2xx") == 2
    assert get(found, "userland_web_request_duration_seconds_count", route=dashboard, method="GET") == 2
    assert get(found, "userland_web_requests_total", route="unmatched", method="GET", code_class="4xx") == 1
    assert not any(namespace in value for (_, labels) in found for key, value in labels
                   if key == "route")  # the route's pattern, never the course's name
    for outcome in ("restarted", "missing"):
        done = get(found, "userland_web_actions_total", course=namespace, action="restart", outcome=outcome)
        assert done == 1, outcome
    assert get(found, "userland_web_courses", status="ready") >= 1
    assert get(found, "userland_kube_requests_total", verb="list", resource="Template", code="200",
               component="web") >= 1
    # A live dashboard open: one stream, until it is closed.
    assert get(found, "userland_web_streams_open") == 0
    stream = await teacher.client.get(f"/courses/{namespace}/stream", headers=headers(INSTRUCTOR, "student"))
    assert stream.status == 200
    await stream.content.readuntil(b": connected\n\n")
    assert get(await samples(internal), "userland_web_streams_open") == 1
    stream.close()
    await eventually(lambda: _streams_open(internal, 0), timeout=10)
    # The stream's length is no page latency: counted when it ends, not timed; a closed page is
    # no failure of the web UI (499, as nginx says it).
    found = await eventually(lambda: _stream_counted(internal), timeout=10)
    assert get(found, "userland_web_request_duration_seconds_count", route="/courses/{ns}/stream",
               method="GET") == 0
    # The public listener has no /metrics (the gateway forwards every path of the platform host here).
    assert (await teacher.get("/metrics"))[0] == 404


async def _stream_counted(internal: Any) -> Samples | None:
    found = await samples(internal)
    counted = sum(get(found, "userland_web_requests_total", route="/courses/{ns}/stream", method="GET",
                      code_class=code_class) for code_class in ("2xx", "4xx"))
    failed = get(found, "userland_web_requests_total", route="/courses/{ns}/stream", method="GET",
                 code_class="5xx")
    return found if counted == 1 and failed == 0 else None


async def _streams_open(internal: Any, wanted: float) -> bool:
    return get(await samples(internal), "userland_web_streams_open") == wanted
