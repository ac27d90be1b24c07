"""Dead dependencies: a clear 503 page, never a traceback, and nothing changed or lost.

Real parts: the web UI app over HTTP, the control plane, Redis. The dead API server is a
real client aimed at a closed loopback port; the dead Redis likewise.
"""

from __future__ import annotations

import ssl

import redis.asyncio

from tests.web.pages.support import (
    INSTRUCTOR,
    AppFactory,
    make_course,
    make_template,
)
from userland.local.ports import free_port
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.clients.kubeconfig import ClusterAccess


async def _no_token() -> str | None:
    return None


def dead_kube() -> KubeClient:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return KubeClient(ClusterAccess(host=f"https://127.0.0.1:{free_port()}", ssl_context=context,
                                    authorization=_no_token))


async def test_dead_api_server_gives_503_pages(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    dead = dead_kube()
    try:
        as_user = await web_ui(kube=dead)
        teacher = as_user(INSTRUCTOR)
        for status, page in (await teacher.get(f"/courses/{namespace}/add"),
                             await teacher.post(f"/courses/{namespace}/add", {"login": "alice",
                                                                              "template": "vscode"}),
                             await teacher.post(f"/courses/{namespace}/actions", {"action": "restart",
                                                                                  "names": "vscode-alice"}),
                             await as_user("root", "admin").get("/admin"),
                             await teacher.get(f"/courses/{namespace}/audit")):
            assert status == 503, page
            assert "not answering" in page and "Nothing was changed" in page and "Traceback" not in page
    finally:
        await dead.close()


async def test_dead_redis_gives_503_and_adds_nobody(kube: KubeClient, namespace: str,
                                                    web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    dead = redis.asyncio.Redis(host="127.0.0.1", port=free_port(), socket_timeout=1, socket_connect_timeout=1)
    try:
        as_user = await web_ui(redis_client=dead)
        teacher = as_user(INSTRUCTOR)
        status, page = await teacher.post(f"/courses/{namespace}/add",
                                          {"login": "alice", "template": "vscode"})
        assert status == 503 and "Nothing was changed" in page
        assert (await kube.list(USERLANDS, namespace))["items"] == []  # no unaudited change
        await kube.create(USERLANDS, namespace, {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
                                                 "metadata": {"name": "vscode-bob"},
                                                 "spec": {"user": "bob", "template": "vscode"}})
        status, page = await teacher.post(f"/courses/{namespace}/actions", {
            "action": "remove", "names": "vscode-bob", "confirmed": "yes"})
        assert status == 503
        assert len((await kube.list(USERLANDS, namespace))["items"]) == 1
        status, page = await teacher.get(f"/courses/{namespace}/audit")
        assert status == 503 and "Traceback" not in page
    finally:
        await dead.aclose()
