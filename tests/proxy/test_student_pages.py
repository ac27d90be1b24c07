"""Every page the gateway shows a student, for each state of their environment, in plain words.

Real: the gateway (in-process, its watches on the real API server), Redis sessions, and the
statuses the operator's own status code (operator/rules/status.py) writes for each phase, including
the cluster's messages, which must never reach a student. The Template's display name ends in
"environment", as the local demo's does, so "environment environment" would show.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.jargon import jargon_in, visible_text
from tests.support import eventually
from userland.local.ports import free_port
from userland.operator.rules.status import Problem, userland_status
from userland.platform.clients.kube import SERVICES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland

from .conftest import IDE_HOST, GatewayFactory, Origins, origin_cookie, routes_of

HTML = {"Accept": "text/html"}
ALICE = f"alice.{IDE_HOST}"
NAME = "Demo environment"
STUCK = {"status": {"conditions": [{"type": "Progressing", "status": "False",
                                    "reason": "ProgressDeadlineExceeded",
                                    "message": 'ReplicaSet "demo-alice-5d8f" has timed out progressing.'}]}}
REFUSED = Problem("InvalidPodSpec", 'the API server refused it: Deployment.apps "x" is invalid: '
                  "spec.template.spec.containers[0].image: Required value")


def template_body(name: str = "demo", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
            "spec": {"displayName": NAME, "routing": {"host": IDE_HOST}, "port": 8080,
                     "podSpec": {"containers": [{"name": "main", "image": "example/demo:1"}]}, **spec}}


async def alice_userland(kube: KubeClient, namespace: str, template: str = "demo", *,
                         suspended: bool = False, status: dict[str, Any] | None = None) -> None:
    name = naming.userland_name(template, "alice")
    obj = await kube.create(USERLANDS, namespace, {
        "apiVersion": naming.API_VERSION, "kind": "Userland", "metadata": {"name": name},
        "spec": {"user": "alice", "template": template, "suspended": suspended}})
    if status is not None:
        await kube.merge_patch(USERLANDS, namespace, name, {"status": status}, subresource="status")
    assert obj


def operator_status(kube_template: dict[str, Any], deployment: Any, problem: Problem | None,
                    suspended: bool = False) -> dict[str, Any]:
    """What the operator writes for alice's Userland in this situation."""
    userland = Userland.from_object({"metadata": {"name": "demo-alice", "namespace": "c", "generation": 1},
                                     "spec": {"user": "alice", "template": "demo", "suspended": suspended}})
    return userland_status(userland, Template.from_object(kube_template), deployment, problem,
                           public_url="http://userland.test", now="2026-11-23T09:00:00Z")


def assert_plain(body: str) -> None:
    assert jargon_in(body) == [], visible_text(body)
    assert "Traceback" not in body


CASES = [  # (case, phase status or None, suspended, HTTP status, words a student reads)
    ("no status yet", None, False, 200, "Starting your Demo environment"),
    ("starting", "starting", False, 200, "Starting your Demo environment"),
    ("stuck", "stuck", False, 503, "Your Demo environment cannot start right now"),
    ("refused", "refused", False, 503, "Your Demo environment cannot start right now"),
    ("suspended", "suspended", True, 503, "Your Demo environment is paused"),
    ("asleep", "idle", False, 200, "Waking up your Demo environment"),
]


@pytest.mark.parametrize(("case", "state", "suspended", "code", "words"), CASES, ids=[c[0] for c in CASES])
async def test_each_phase_has_a_plain_page(
        kube: KubeClient, namespace: str, gateway_factory: GatewayFactory, origins: Origins,
        case: str, state: str | None, suspended: bool, code: int, words: str) -> None:
    template = await kube.create(TEMPLATES, namespace, template_body())
    status = None
    if state == "starting":
        status = operator_status(template, None, None)
    elif state == "stuck":
        status = operator_status(template, STUCK, None)
    elif state == "refused":
        status = operator_status(template, None, REFUSED)
    elif state == "suspended":
        status = operator_status(template, None, None, suspended=True)
    elif state == "idle":
        status = {"phase": "Idle", "conditions": [{"type": "Ready", "status": "False", "reason": "Idle",
                                                   "message": "scaled to 0 replicas after 2h idle",
                                                   "lastTransitionTime": "2026-11-23T09:00:00Z"}]}
    await alice_userland(kube, namespace, suspended=suspended, status=status)
    gw = await gateway_factory()
    await eventually(lambda: routes_of(gw).userland(namespace, "demo", "alice") is not None
                     and routes_of(gw).userland(namespace, "demo", "alice").phase == (status or {}).get(
                         "phase", "Pending"))
    resp = await gw.get("/", headers={"Host": ALICE, **origin_cookie(await origins.login("alice")), **HTML})
    body = await resp.text()
    assert resp.status == code, body
    assert words in visible_text(body)
    assert_plain(body)


async def test_pages_without_an_environment_and_errors_are_plain(
        kube: KubeClient, namespace: str, gateway_factory: GatewayFactory, origins: Origins) -> None:
    await kube.create(TEMPLATES, namespace, template_body())
    await kube.create(TEMPLATES, namespace, template_body("lab", routing={"host": "lab.test"},
                                                         selfService=True))
    # Ready, but its address answers nothing: the 502 page.
    await alice_userland(kube, namespace, status={"phase": "Ready", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Available", "message": "Demo environment is running",
         "lastTransitionTime": "2026-11-23T09:00:00Z"}]})
    await kube.create(SERVICES, namespace, {"metadata": {
        "name": naming.service_name("demo", "alice"), "labels": {naming.LABEL_USER: "alice"},
        "annotations": {naming.ANNOTATION_UPSTREAM: f"http://127.0.0.1:{free_port()}"}},
        "spec": {"ports": [{"port": 8080}]}})
    gw = await gateway_factory()
    await eventually(lambda: routes_of(gw).service(namespace, naming.service_name("demo", "alice")))
    pages = {}
    alice = origin_cookie(await origins.login("alice"))
    pages["not answering"] = await gw.get("/", headers={"Host": ALICE, **alice, **HTML})
    bob = origin_cookie(await origins.login("bob"))
    pages["no environment"] = await gw.get("/", headers={"Host": f"bob.{IDE_HOST}", **bob, **HTML})
    pages["not yours"] = await gw.get("/", headers={"Host": ALICE, **bob, **HTML})
    bob_lab = origin_cookie(await origins.login("bob", "http://bob.lab.test"))
    pages["self-service"] = await gw.get("/", headers={"Host": "bob.lab.test", **bob_lab, **HTML})
    expected = {"not answering": (502, "Your environment is not answering"),
                "no environment": (403, "No Demo environment for you here yet"),
                "not yours": (403, "Open your own environment"),
                "self-service": (200, "Create my Demo environment")}
    for case, response in pages.items():
        body = await response.text()
        code, words = expected[case]
        assert (response.status, words in visible_text(body)) == (code, True), (case, body)
        assert_plain(body)


async def test_a_student_of_a_template_that_lost_its_route_is_told_so(
        kube: KubeClient, namespace: str, gateway_factory: GatewayFactory, origins: Origins) -> None:
    await kube.create(TEMPLATES, namespace, template_body("first"))
    await asyncio.sleep(1.1)  # creationTimestamp has one-second resolution: "first" is older
    await kube.create(TEMPLATES, namespace, template_body("second", displayName="Python"))
    await alice_userland(kube, namespace, "second")
    gw = await gateway_factory()
    await eventually(lambda: routes_of(gw).userland(namespace, "second", "alice") is not None
                     and len(routes_of(gw).routes.routed_out) == 1)
    resp = await gw.get("/", headers={"Host": ALICE, **origin_cookie(await origins.login("alice")), **HTML})
    body = await resp.text()
    assert resp.status == 503
    assert "Your Python cannot be opened here right now" in visible_text(body)
    assert_plain(body)
    # Someone with no environment in either still gets the plain 403.
    resp = await gw.get("/", headers={"Host": f"bob.{IDE_HOST}",
                                      **origin_cookie(await origins.login("bob")), **HTML})
    assert resp.status == 403


def test_the_jargon_check_itself_catches_what_the_old_pages_said() -> None:
    old = ("<p>Your <strong>Demo environment</strong> environment is starting.</p>"
           "<p class=muted>waiting for the environment's Deployment to become available</p>")
    assert jargon_in(old) == ["Deployment", "environment environment"]
