"""The gateway's own pages tell the truth and look like the web UI (issue 16).

Real: the gateway in-process with its watches on the real API server, real Redis sessions, a
real local port that refuses connections as the web UI that is down. The pages' words about
files come from platform/model/storage_words.py, the web UI's source too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.jargon import visible_text
from tests.support import eventually
from userland.local.ports import free_port
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import look, naming, storage_words
from userland.proxy.pages import CONTENT_SECURITY_POLICY, SIGNED_OUT_MESSAGE, Pages

from .conftest import IDE_HOST, PUBLIC_HOST, GatewayFactory, Origins, origin_cookie, routes_of

HTML = {"Accept": "text/html"}
ALICE = f"alice.{IDE_HOST}"
STORAGE = {"none": None, "retain": {"size": "1Gi", "mountPath": "/home/x"},
           "delete": {"size": "1Gi", "mountPath": "/home/x", "reclaimPolicy": "Delete"}}
ASLEEP = {"phase": "Idle", "conditions": [{"type": "Ready", "status": "False", "reason": "Idle",
                                           "message": "asleep",
                                           "lastTransitionTime": "2026-11-23T09:00:00Z"}]}


def template_body(storage: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"displayName": "Notebook", "routing": {"host": IDE_HOST}, "port": 8080,
                            "podSpec": {"containers": [{"name": "main", "image": "example/nb:1"}]}}
    if storage is not None:
        spec["storage"] = storage
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": "nb"}, "spec": spec}


@pytest.mark.parametrize("kind", list(STORAGE))
@pytest.mark.parametrize("state", ["asleep", "suspended"])
async def test_waking_and_paused_pages_say_what_happens_to_the_files(
        kube: KubeClient, namespace: str, gateway_factory: GatewayFactory, origins: Origins,
        kind: storage_words.Storage, state: str) -> None:
    """The waking page said "with all your files kept" for a Template that keeps no files."""
    await kube.create(TEMPLATES, namespace, template_body(STORAGE[kind]))
    name = naming.userland_name("nb", "alice")
    await kube.create(USERLANDS, namespace, {"apiVersion": naming.API_VERSION, "kind": "Userland",
                                             "metadata": {"name": name},
                                             "spec": {"user": "alice", "template": "nb",
                                                      "suspended": state == "suspended"}})
    if state == "asleep":
        await kube.merge_patch(USERLANDS, namespace, name, {"status": ASLEEP}, subresource="status")
    gw = await gateway_factory()
    phase = "Idle" if state == "asleep" else "Pending"
    await eventually(lambda: (u := routes_of(gw).userland(namespace, "nb", "alice")) is not None
                     and u.phase == phase)
    # A student's visit would wake it: ask as a tab's background poll would not, a page does.
    resp = await gw.get("/", headers={"Host": ALICE, **origin_cookie(await origins.login("alice")), **HTML})
    text = visible_text(await resp.text())
    sentence = storage_words.for_student("asleep" if state == "asleep" else "suspended", kind)
    assert sentence in text, text
    kept = any(phrase in text for phrase in storage_words.KEPT_PHRASES)
    assert kept == (kind != "none"), text


async def test_the_platform_hosts_own_unavailable_page_speaks_to_whoever_is_signed_in(
        gateway_factory: GatewayFactory, sessions: Any) -> None:
    """The web UI down for a moment: a teacher on a course page was told "Your environment is not
    answering ... tell your instructor"."""
    gw = await gateway_factory(web_url=f"http://127.0.0.1:{free_port()}")  # nothing listens there
    teacher = await sessions("teacher")
    resp = await gw.get("/courses/cs101", headers={
        "Host": PUBLIC_HOST, "Cookie": f"userland_session={teacher}", **HTML})
    body = await resp.text()
    text = visible_text(body)
    assert resp.status == 502
    assert "Userland's pages are not answering" in text and "teacher" in text
    assert "Your environment" not in text and "tell your instructor" not in text
    assert 'http-equiv="refresh"' in body  # it tries again by itself
    anonymous = await gw.get("/", headers={"Host": PUBLIC_HOST, **HTML})
    assert "Userland's pages are not answering" in visible_text(await anonymous.text())


def test_gateway_pages_wear_the_web_uis_look_allowed_by_their_csp() -> None:
    page = Pages("http://userland.test").waking("Notebook", "alice", steps=(), waking=True, storage="none")
    body = page.text or ""
    assert look.CSS in body and 'class="topbar"' in body and 'class="card narrow"' in body
    assert look.style_hash(look.GATEWAY_STYLE) in CONTENT_SECURITY_POLICY
    assert 'href="http://userland.test/me"' in body  # the way back to one's environments


async def test_a_tab_left_open_after_sign_out_is_told_so_in_words_its_app_shows(
        kube: KubeClient, namespace: str, gateway_factory: GatewayFactory) -> None:
    """A background request (fetch/XHR: Sec-Fetch-Mode cors or same-origin) without a session on a
    student's origin: 503 + Retry-After and a JSON `message` (JupyterLab shows it, and keeps its
    kernel instead of "Kernel died unexpectedly" on a 401); a navigation still goes to the
    handoff, anything else (scripts, curl) still gets 401."""
    await kube.create(TEMPLATES, namespace, template_body(None))
    gw = await gateway_factory()
    await eventually(lambda: IDE_HOST in routes_of(gw).routes.hosts)
    for mode in ("cors", "same-origin"):
        resp = await gw.get("/api/kernels/abc", headers={"Host": ALICE, "Sec-Fetch-Mode": mode,
                                                          "Accept": "application/json"})
        assert (resp.status, resp.headers["Retry-After"]) == (503, "10")
        assert (await resp.json())["message"] == SIGNED_OUT_MESSAGE
    plain = await gw.get("/api/kernels/abc", headers={"Host": ALICE})
    assert plain.status == 401
    page = await gw.get("/lab", headers={"Host": ALICE, "Sec-Fetch-Mode": "navigate", **HTML},
                        allow_redirects=False)
    assert page.status == 302 and "/auth/handoff?" in page.headers["Location"]
