"""Linking an LMS course to a Userland course, end to end: a real LTI platform (lti1p3platform
over aiohttp, tests/support/lti_launch_platform.py) launches into the real gateway; the
gateway sends the instructor to the real web UI (`create_app`), which talks to the real
control plane as its own ServiceAccount (deploy/rbac/ applied, the test namespace made a course
from deploy/course/), so Kubernetes RBAC is the fence for every write.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support import MUST_COMPLETE, eventually
from tests.support.lti_launch_platform import (
    INSTRUCTOR,
    LEARNER,
    TEACHING_ASSISTANT,
    LaunchSpec,
    LtiTestPlatform,
)
from tests.web.course_support import apply_rbac, make_course, web_client
from userland.auth.lti_store import LtiStore
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import NAMESPACES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import identity
from userland.platform.model.lti_links import (
    ANNOTATION_LINKS,
    ANNOTATION_LTI_ASSISTANTS,
    ANNOTATION_LTI_INSTRUCTORS,
)
from userland.platform.model.settings import Settings
from userland.web.rules import security

from .conftest import PUBLIC_URL, SECRET, GatewayFactory, template_body
from .lti_flow import HOST, LtiFlow, ready_condition, register, started_web_ui

Client = TestClient[web.Request, web.Application]
SESSION = "5e55" * 8
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_CHOICE = re.compile(r'name="choice" value="([^"]+)"')


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


@pytest.fixture
async def course(rbac: ControlPlane, namespace: str, kube: KubeClient) -> str:
    """The test namespace as a course taught by `teacher` (assistant ta1), with a Template."""
    make_course(rbac, namespace, only=("Namespace", "RoleBinding"))
    await kube.create(TEMPLATES, namespace, template_body("lab", host="lab.test"))
    return namespace


@pytest.fixture
async def web_ui(aiohttp_client: Callable[[web.Application], Awaitable[Client]], rbac: ControlPlane,
                 redis_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    conn = redis.asyncio.Redis.from_url(redis_url)
    settings = Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC_URL,
                        cookie_secure=False)
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
    # One LTI namespace holds every registration, so its names are unique: here, per test.
    await register(kube, course, registration(course), lms.spec())
    gateway = await gateway_factory(lti_namespace=course)

    async def ready() -> bool:
        condition = await ready_condition(kube, course, registration(course))
        return condition.get("status") == "True" and (
            await gateway.get("/lti/jwks", headers=HOST)).status == 200

    await eventually(ready, timeout=MUST_COMPLETE)
    async with aiohttp.ClientSession() as http:
        yield LtiFlow(gateway, lms, http)
    await lms.close()


def registration(course: str) -> str:
    return f"lms-{course}"


def signed(login: str) -> dict[str, str]:
    """The identity the gateway signs for the web UI (an LMS user's session is role student)."""
    ident = identity.for_audience(login, "web", role="student", session=SESSION)
    return {**dict(identity.identity_headers(ident, SECRET)), "Origin": PUBLIC_URL}


def person(user_id: str, email: str, role: str, context: str = "course-1") -> LaunchSpec:
    return LaunchSpec(user_id=user_id, roles=[role], email=email, name=email.split("@")[0].title(),
                      context_id=context, context_title="Databases 101")


async def launch_to_web(flow: LtiFlow, spec: LaunchSpec) -> str:
    _, location = await flow.launch(flow.platform.add_launch(spec))
    assert location.startswith("/lms/course?launch="), location
    return location


async def annotations(kube: KubeClient, namespace: str) -> dict[str, str]:
    obj = await kube.get(NAMESPACES, None, namespace)
    return dict(obj["metadata"].get("annotations") or {})


async def link(web_ui: Client, location: str, login: str, course: str) -> tuple[str, str]:
    """The instructor's page and its form: (csrf, this course's choice). Other tests' courses
    that `teacher` teaches may be offered too (one control plane for the session)."""
    page = await web_ui.get(location, headers=signed(login), allow_redirects=False)
    text = await page.text()
    assert page.status == 200, text
    assert "Link this LMS course" in text and "Databases 101" in text
    choice = f"{course}/lab"
    assert choice in _CHOICE.findall(text)
    return _CSRF.findall(text)[0], choice


async def test_an_instructor_links_the_lms_course_and_its_learners_land_in_their_environments(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str
) -> None:
    location = await launch_to_web(flow, person("t-1", "teacher@uni.example.edu", INSTRUCTOR))
    csrf, choice = await link(web_ui, location, "teacher", course)
    assert choice == f"{course}/lab"
    launch = location.split("=", 1)[1]
    resp = await web_ui.post("/lms/course", data={"csrf": csrf, "launch": launch, "choice": choice},
                             headers=signed("teacher"), allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert resp.headers["Location"] == f"/courses/{course}"
    stored = await annotations(kube, course)
    (entry,) = json.loads(stored[ANNOTATION_LINKS])
    assert (entry["registration"], entry["context"], entry["template"], entry["title"]) == (
        registration(course), "course-1", "lab", "Databases 101")
    assert stored[ANNOTATION_LTI_INSTRUCTORS] == "teacher"
    # The class dashboard is theirs at once.
    dashboard = await web_ui.get(f"/courses/{course}", headers=signed("teacher"))
    assert dashboard.status == 200
    # A Learner of the LMS course now lands in their own environment of the chosen Template.
    learner_launch = flow.platform.add_launch(person("s-1", "sam@uni.example.edu", LEARNER))

    async def lands() -> bool:
        _, where = await flow.launch(learner_launch)
        return where == "http://lab.test/"

    await eventually(lands, timeout=MUST_COMPLETE)
    names = [u["metadata"]["name"] for u in (await kube.list(USERLANDS, course))["items"]]
    assert names == ["lab-sam"]


async def test_staff_of_a_linked_lms_course_get_their_role_there_and_nowhere_else(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str, rbac: ControlPlane
) -> None:
    location = await launch_to_web(flow, person("t-1", "teacher@uni.example.edu", INSTRUCTOR))
    csrf, choice = await link(web_ui, location, "teacher", course)
    await web_ui.post("/lms/course", data={"csrf": csrf, "launch": location.split("=", 1)[1],
                                           "choice": choice}, headers=signed("teacher"))
    # A TeachingAssistant of the linked LMS course: assistant of this course, on to its dashboard.
    location = await launch_to_web(flow, person("a-1", "tim@uni.example.edu", TEACHING_ASSISTANT))
    resp = await web_ui.get(location, headers=signed("tim"), allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == f"/courses/{course}"
    assert (await annotations(kube, course))[ANNOTATION_LTI_ASSISTANTS] == "tim"
    page = await web_ui.get(f"/courses/{course}", headers=signed("tim"))
    assert page.status == 200
    # An Instructor of another, unlinked LMS course teaches nothing here: offered nothing, given nothing.
    location = await launch_to_web(flow, person("t-2", "uma@uni.example.edu", INSTRUCTOR, "course-2"))
    resp = await web_ui.get(location, headers=signed("uma"), allow_redirects=False)
    text = await resp.text()
    assert resp.status == 200 and "You do not teach a course in Userland yet" in text
    assert 'name="choice"' not in text
    stored = await annotations(kube, course)
    assert "uma" not in stored[ANNOTATION_LTI_INSTRUCTORS] and "uma" not in stored[ANNOTATION_LTI_ASSISTANTS]
    assert (await web_ui.get(f"/courses/{course}", headers=signed("uma"))).status == 404
    # A TA of an unlinked LMS course is told to wait for its instructor.
    location = await launch_to_web(flow, person("a-2", "val@uni.example.edu", TEACHING_ASSISTANT, "course-2"))
    text = await (await web_ui.get(location, headers=signed("val"))).text()
    assert "One of its instructors links it" in text


async def test_a_learner_reaching_the_linking_page_gets_a_clear_403(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str, redis_url: str
) -> None:
    before = await annotations(kube, course)
    # The staff launch's page, opened by a Learner: it is not theirs.
    location = await launch_to_web(flow, person("t-1", "teacher@uni.example.edu", INSTRUCTOR))
    resp = await web_ui.get(location, headers=signed("sam"))
    assert resp.status == 403 and "someone else" in await resp.text()
    # A Learner's own launch, as the gateway keeps it (it never sends a Learner here; they came anyway).
    conn = redis.asyncio.Redis.from_url(redis_url)
    launch = await LtiStore(conn).remember_course({"login": "sam", "registration": registration(course),
                                                   "context": "course-1", "title": "Databases 101",
                                                   "role": "student"})
    await conn.aclose()
    resp = await web_ui.get(f"/lms/course?launch={launch}", headers=signed("sam"))
    text = await resp.text()
    assert resp.status == 403 and "Only your course&#39;s teachers can do this" in text, text
    csrf = security.csrf_token(SECRET, "sam", SESSION)  # a valid token: the role refuses it
    resp = await web_ui.post("/lms/course", headers=signed("sam"),
                             data={"csrf": csrf, "launch": launch, "choice": f"{course}/lab"})
    assert resp.status == 403 and "Only your course&#39;s teachers can do this" in await resp.text()
    assert await annotations(kube, course) == before


async def test_the_form_needs_its_csrf_token_and_an_offered_course(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str
) -> None:
    before = await annotations(kube, course)
    location = await launch_to_web(flow, person("t-1", "teacher@uni.example.edu", INSTRUCTOR))
    csrf, _ = await link(web_ui, location, "teacher", course)
    launch = location.split("=", 1)[1]
    no_token = await web_ui.post("/lms/course", data={"launch": launch, "choice": f"{course}/lab"},
                                 headers=signed("teacher"))
    assert no_token.status == 403 and "This form has expired" in await no_token.text()
    forged = await web_ui.post("/lms/course", data={"csrf": csrf, "launch": launch,
                                                    "choice": "kube-system/lab"}, headers=signed("teacher"))
    assert forged.status == 403 and "You cannot link this course" in await forged.text()
    assert await annotations(kube, course) == before


async def test_an_expired_launch_says_so(web_ui: Client, course: str) -> None:
    resp = await web_ui.get("/lms/course?launch=nothing-like-this", headers=signed("teacher"))
    assert resp.status == 404 and "This link has expired" in await resp.text()


def _no_jargon(text: str) -> None:
    for word in ("namespace", "Kubernetes", "Template", "annotation", "kubectl"):
        assert word not in text, word


async def test_the_linking_pages_speak_plainly(flow: LtiFlow, web_ui: Client, course: str) -> None:
    location = await launch_to_web(flow, person("t-1", "teacher@uni.example.edu", INSTRUCTOR))
    text = await (await web_ui.get(location, headers=signed("teacher"))).text()
    body = text.split("<body", 1)[1]
    _no_jargon(re.sub(r"<[^>]+>", " ", body))



NRPS = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


def with_services(version: int) -> Callable[[dict[str, object]], dict[str, object]]:
    """The launch's roster and gradebook claims, as an LMS with NRPS and AGS sends them."""
    def tamper(claims: dict[str, object]) -> dict[str, object]:
        return {**claims,
                NRPS: {"context_memberships_url": f"http://lms.test/v{version}/c1/members",
                       "service_versions": ["2.0"]},
                AGS: {"lineitems": f"http://lms.test/v{version}/c1/lineitems",
                      "scope": ["https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"]}}
    return tamper


async def test_the_link_keeps_the_roster_and_gradebook_urls_the_launch_carried(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str
) -> None:
    spec = person("t-1", "teacher@uni.example.edu", INSTRUCTOR)
    location = await launch_to_web(flow, LaunchSpec(**{**spec.__dict__, "tamper": with_services(1)}))
    csrf, choice = await link(web_ui, location, "teacher", course)
    await web_ui.post("/lms/course", data={"csrf": csrf, "launch": location.split("=", 1)[1],
                                           "choice": choice}, headers=signed("teacher"))
    (entry,) = json.loads((await annotations(kube, course))[ANNOTATION_LINKS])
    assert (entry["memberships"], entry["lineitems"]) == ("http://lms.test/v1/c1/members",
                                                         "http://lms.test/v1/c1/lineitems")
    # A later staff launch carrying new service URLs updates them; the chosen Template stays.
    spec = person("a-1", "tim@uni.example.edu", TEACHING_ASSISTANT)
    location = await launch_to_web(flow, LaunchSpec(**{**spec.__dict__, "tamper": with_services(2)}))
    resp = await web_ui.get(location, headers=signed("tim"), allow_redirects=False)
    assert resp.status == 303
    (entry,) = json.loads((await annotations(kube, course))[ANNOTATION_LINKS])
    assert (entry["memberships"], entry["template"]) == ("http://lms.test/v2/c1/members", "lab")
