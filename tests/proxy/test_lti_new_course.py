"""An admin creates a new course from an unlinked LMS course, end to end: a real LTI platform
launches into the real gateway, which sends the admin to the real web UI's linking page; the web
UI (as its own ServiceAccount, deploy/rbac/ applied: it may only ask, with a CourseRequest) posts
the request, and the real operator (as its own ServiceAccount) makes the course and links it.
The test namespace is the LTI namespace (registrations, CourseRequests) and the course whose
environment is copied; the web UI's Role there is deploy/rbac/web.yaml's userland-web-lti.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.operator.support import running_controller
from tests.support import MUST_COMPLETE, eventually
from tests.support.lti_launch_platform import INSTRUCTOR, LaunchSpec, LtiTestPlatform
from tests.web.course_support import REPO, apply_rbac, make_course, web_client
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import (
    COURSE_REQUESTS,
    NAMESPACES,
    TEMPLATES,
    KubeClient,
    NotFound,
    Resource,
)
from userland.platform.model import identity
from userland.platform.model.lti_links import ANNOTATION_LINKS
from userland.platform.model.settings import Settings
from userland.web.rules import security

from .conftest import PUBLIC_URL, SECRET, GatewayFactory, template_body
from .lti_flow import HOST, LtiFlow, ready_condition, register, started_web_ui

Client = TestClient[web.Request, web.Application]
SESSION = "5e55" * 8
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_TEMPLATE = re.compile(r'name="template" value="([^"]+)"')
_NAME = re.compile(r'name="name" value="([^"]+)"')


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


def web_lti_role() -> dict[str, Any]:
    """deploy/rbac/web.yaml's Role in the LTI namespace, as written there."""
    docs = yaml.safe_load_all((REPO / "deploy" / "rbac" / "web.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "Role" and d["metadata"]["name"] == "userland-web-lti")


@pytest.fixture
async def course(rbac: ControlPlane, namespace: str, kube: KubeClient) -> str:
    make_course(rbac, namespace, only=("Namespace", "RoleBinding"))
    await kube.create(TEMPLATES, namespace, template_body("lab", host="lab.test"))
    await kube.create(ROLES, namespace, {"metadata": {"name": "userland-web-lti"},
                                         "rules": web_lti_role()["rules"]})
    await kube.create(ROLE_BINDINGS, namespace, {
        "metadata": {"name": "userland-web-lti"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "userland-web-lti"},
        "subjects": [{"kind": "ServiceAccount", "name": "userland-web", "namespace": "userland-system"}]})
    return namespace


@pytest.fixture
async def new_name(kube: KubeClient, course: str) -> AsyncIterator[str]:
    name = f"{course}-db"
    yield name
    with contextlib.suppress(NotFound):
        await kube.delete(NAMESPACES, None, name)


@pytest.fixture
async def operator(rbac: ControlPlane, course: str, tmp_path: Path) -> AsyncIterator[None]:
    kubeconfig = rbac.write_kubeconfig(tmp_path / "operator.kubeconfig", "operator-token")
    settings = Settings(namespaces=(course,), public_url=PUBLIC_URL, lti_namespace=course,
                        gateway_namespace="userland-system", image_pull_wait_seconds=0)
    async with running_controller(str(kubeconfig), settings, workers=2):
        yield


@pytest.fixture
async def web_ui(aiohttp_client: Callable[[web.Application], Awaitable[Client]], rbac: ControlPlane,
                 course: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    conn = redis.asyncio.Redis.from_url(redis_url)
    settings = Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC_URL,
                        cookie_secure=False, lti_namespace=course, lti_sync_minutes=60)
    async with web_client(rbac, tmp_path) as kube:
        yield await started_web_ui(aiohttp_client, kube, conn, settings)
    await conn.aclose()


@pytest.fixture
async def flow(gateway_factory: GatewayFactory, kube: KubeClient, course: str,
               redis_url: str) -> AsyncIterator[LtiFlow]:
    rdb = redis.asyncio.Redis.from_url(redis_url)
    await rdb.flushdb()
    await rdb.aclose()
    lms = await LtiTestPlatform(PUBLIC_URL).start()
    await register(kube, course, f"lms-{course}", lms.spec())
    gateway = await gateway_factory(lti_namespace=course)

    async def ready() -> bool:
        condition = await ready_condition(kube, course, f"lms-{course}")
        return condition.get("status") == "True" and (
            await gateway.get("/lti/jwks", headers=HOST)).status == 200

    await eventually(ready, timeout=MUST_COMPLETE)
    async with aiohttp.ClientSession() as http:
        yield LtiFlow(gateway, lms, http)
    await lms.close()


def signed(login: str, role: str = "student") -> dict[str, str]:
    ident = identity.for_audience(login, "web", role=role, session=SESSION)
    return {**dict(identity.identity_headers(ident, SECRET)), "Origin": PUBLIC_URL}


def admin() -> dict[str, str]:
    return signed("root", "admin")  # signed now: the signature is timed


async def launch(flow: LtiFlow, login: str, context: str = "course-9") -> str:
    spec = LaunchSpec(user_id=f"u-{login}", roles=[INSTRUCTOR], email=f"{login}@uni.example.edu",
                      name=login.title(), context_id=context, context_title="Databases 101 (2026)")
    _, location = await flow.launch(flow.platform.add_launch(spec))
    assert location.startswith("/lms/course?launch="), location
    return location.split("=", 1)[1]


async def requests_made(kube: KubeClient, course: str) -> list[str]:
    return [r["metadata"]["name"] for r in (await kube.list(COURSE_REQUESTS, course))["items"]]


async def test_an_admin_creates_the_course_and_lands_on_its_dashboard(
        flow: LtiFlow, web_ui: Client, operator: None, kube: KubeClient, course: str, new_name: str) -> None:
    launch_id = await launch(flow, "root")
    page = await web_ui.get(f"/lms/course?launch={launch_id}", headers=admin())
    text = await page.text()
    assert page.status == 200 and "Create this course" in text, text
    assert _NAME.findall(text) == ["databases-101-2026"]  # from the LMS course's title, editable
    assert f"{course}/lab" in _TEMPLATE.findall(text)
    resp = await web_ui.post("/lms/course/new", headers=admin(), allow_redirects=False, data={
        "csrf": _CSRF.findall(text)[0], "launch": launch_id, "name": new_name,
        "title": "Databases 101", "template": f"{course}/lab"})
    assert resp.status == 303, await resp.text()
    waiting = resp.headers["Location"]
    assert waiting.startswith("/lms/course/new?")
    seen: list[str] = []

    async def lands() -> bool:
        answer = await web_ui.get(waiting, headers=admin(), allow_redirects=False)
        if answer.status == 200:
            seen.append(await answer.text())
        return answer.status == 303 and answer.headers["Location"] == f"/courses/{new_name}"

    await eventually(lands, timeout=MUST_COMPLETE)
    assert not seen or "is being created" in seen[0]
    made = await kube.get(NAMESPACES, None, new_name)
    (link,) = json.loads(made["metadata"]["annotations"][ANNOTATION_LINKS])
    assert (link["registration"], link["context"], link["template"]) == (f"lms-{course}", "course-9", "lab")
    assert (await web_ui.get(f"/courses/{new_name}", headers=admin())).status == 200
    # The LMS course is linked now: the admin's next launch goes straight to the new course.
    again = await web_ui.get(f"/lms/course?launch={await launch(flow, 'root')}", headers=admin(),
                             allow_redirects=False)
    assert again.status == 303 and again.headers["Location"] == f"/courses/{new_name}"


async def test_an_instructor_who_is_not_an_admin_gets_403(
        flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str, new_name: str) -> None:
    # `teacher` teaches the course (deploy/course's overlay), so the page offers them its
    # environment to link: but not a new course, and a forged POST is refused.
    launch_id = await launch(flow, "teacher")
    text = await (await web_ui.get(f"/lms/course?launch={launch_id}", headers=signed("teacher"))).text()
    assert "Link this LMS course" in text and "Create this course" not in text
    csrf = security.csrf_token(SECRET, "teacher", SESSION)
    resp = await web_ui.post("/lms/course/new", headers=signed("teacher"), allow_redirects=False, data={
        "csrf": csrf, "launch": launch_id, "name": new_name, "title": "Mine", "template": f"{course}/lab"})
    assert resp.status == 403 and "Only Userland admins can create courses" in await resp.text()
    assert await requests_made(kube, course) == []
    status = await web_ui.get(f"/lms/course/new?launch={launch_id}&request={new_name}",
                              headers=signed("teacher"))
    assert status.status == 403


async def test_a_taken_or_bad_name_gets_a_clear_error(
        flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str, new_name: str) -> None:
    launch_id = await launch(flow, "root")
    csrf = security.csrf_token(SECRET, "root", SESSION)
    form = {"csrf": csrf, "launch": launch_id, "title": "Databases", "template": f"{course}/lab"}
    await kube.create(NAMESPACES, None, {"metadata": {"name": new_name}})
    before = await kube.get(NAMESPACES, None, new_name)
    taken = await web_ui.post("/lms/course/new", headers=admin(), data={**form, "name": new_name})
    assert taken.status == 400 and "is already used" in await taken.text()
    bad = await web_ui.post("/lms/course/new", headers=admin(), data={**form, "name": "Databases_101"})
    assert bad.status == 400 and "only lower-case letters" in await bad.text()
    forged = await web_ui.post("/lms/course/new", headers=admin(), data={**form, "name": "x1",
                                                                       "template": "kube-system/lab"})
    assert forged.status == 403
    assert await requests_made(kube, course) == []
    assert (await kube.get(NAMESPACES, None, new_name))["metadata"] == before["metadata"]
