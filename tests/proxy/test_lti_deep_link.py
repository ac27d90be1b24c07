# ruff: noqa: F811  (the fixtures imported from test_lti_link are parameters here)
"""Deep linking end to end: a teacher adds Userland to an LMS module and picks what the link opens.

Real: the LTI platform (lti1p3platform over aiohttp, tests/support/lti_launch_platform.py) makes
the deep-linking launch and checks the answer at its `deep_link_return_url` against the tool's
key set as the gateway publishes it (/lti/jwks); the gateway checks the launch and hands it to the
real web UI (`create_app`), which talks to the real control plane as its own ServiceAccount
(deploy/rbac/ applied; the LTI namespace's Role userland-web-lti bound in the test's namespace,
its LTI namespace here), reads the tool's key from the Secret the gateway made, and signs.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support.lti_launch_platform import (
    INSTRUCTOR,
    LEARNER,
    TEACHING_ASSISTANT,
    LaunchSpec,
)
from tests.web.course_support import make_course, web_client
from userland.auth.lti_store import LtiStore
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import ASSIGNMENTS, TEMPLATES, KubeClient, Resource
from userland.platform.model import keyspace, naming
from userland.platform.model.settings import Settings
from userland.web.rules import lti_grades, security

from .conftest import PUBLIC_URL, SECRET, template_body
from .lti_flow import HOST, LtiFlow, started_web_ui
from .test_lti_link import flow, rbac, registration, signed  # noqa: F401  (fixtures)

Client = TestClient[web.Request, web.Application]
SESSION = "5e55" * 8
DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"
LTI = "https://purl.imsglobal.org/spec/lti/claim/"
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
STORAGE = {"size": "1Gi", "mountPath": "/home/student", "reclaimPolicy": "Delete"}
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_CHOICE = re.compile(r'name="choice" value="([^"]+)"')
_JWT = re.compile(r'name="JWT" value="([^"]+)"')
_ACTION = re.compile(r'<form method="post" action="([^"]+)" id="deep-link-answer"')


@pytest.fixture
async def course(rbac: ControlPlane, namespace: str, kube: KubeClient) -> str:
    """The test namespace as a course taught by `teacher` (assistant ta1), with a Template that
    keeps files, and as the LTI namespace (the web UI may read its registrations and key there,
    as deploy/rbac/web.yaml grants in USERLAND_LTI_NAMESPACE)."""
    make_course(rbac, namespace, only=("Namespace", "RoleBinding"))
    body = template_body("lab", host="lab.test")
    body["spec"]["storage"] = STORAGE
    await kube.create(TEMPLATES, namespace, body)
    await kube.create(ROLES, namespace, {"metadata": {"name": "userland-web-lti"}, "rules": [
        {"apiGroups": [naming.GROUP], "resources": ["ltiregistrations"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["userland-lti-keys"],
         "verbs": ["get"]}]})
    await kube.create(ROLE_BINDINGS, namespace, {
        "metadata": {"name": "userland-web-lti"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "userland-web-lti"},
        "subjects": [{"kind": "ServiceAccount", "name": "userland-web", "namespace": "userland-system"}]})
    return namespace


@pytest.fixture
async def web_ui(aiohttp_client: Callable[[web.Application], Awaitable[Client]], rbac: ControlPlane,
                 course: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    """The web UI with LTI on: this test's namespace is its LTI namespace."""
    conn = redis.asyncio.Redis.from_url(redis_url)
    settings = Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC_URL,
                        cookie_secure=False, lti_namespace=course, lti_sync_minutes=60)
    async with web_client(rbac, tmp_path) as kube:
        yield await started_web_ui(aiohttp_client, kube, conn, settings)
    await conn.aclose()


@pytest.fixture(autouse=True)
async def lms_reads_the_tool_keys(flow: LtiFlow) -> None:
    """The LMS checks answers against the tool's key set exactly as the gateway publishes it."""
    flow.platform.tool_jwks = await (await flow.gateway.get("/lti/jwks", headers=HOST)).json()


def person(user_id: str, email: str, role: str, *, deep_linking: bool = False) -> LaunchSpec:
    return LaunchSpec(user_id=user_id, roles=[role], email=email, name=email.split("@")[0].title(),
                      context_id="course-1", context_title="Databases 101", deep_linking=deep_linking)


TEACHER = ("t-1", "teacher@uni.example.edu", INSTRUCTOR)


async def launch_to(flow: LtiFlow, spec: LaunchSpec, page: str) -> str:
    _, location = await flow.launch(flow.platform.add_launch(spec))
    assert location.startswith(f"{page}?launch="), location
    return location.split("=", 1)[1]


async def link_course(flow: LtiFlow, web_ui: Client, course: str) -> None:
    """The instructor's first launch links the LMS course (the linking page, as a teacher would)."""
    launch = await launch_to(flow, person(*TEACHER), "/lms/course")
    page = await (await web_ui.get(f"/lms/course?launch={launch}", headers=signed("teacher"))).text()
    resp = await web_ui.post("/lms/course", headers=signed("teacher"), allow_redirects=False, data={
        "csrf": _CSRF.findall(page)[0], "launch": launch, "choice": f"{course}/lab"})
    assert resp.status == 303, await resp.text()


async def assignment(kube: KubeClient, course: str, name: str = "week-1") -> dict[str, Any]:
    return await kube.create(ASSIGNMENTS, course, {
        "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": name},
        "spec": {"title": "Week 1: SQL", "templates": ["lab"], "path": "week1",
                 "source": {"url": "https://git.example.edu/db/week1.git", "ref": "main"},
                 "due": "2030-12-07T23:59:00Z"}})


async def picker(web_ui: Client, launch: str, login: str = "teacher") -> tuple[str, list[str]]:
    resp = await web_ui.get(f"/lms/deep-link?launch={launch}", headers=signed(login))
    text = await resp.text()
    assert resp.status == 200, text
    return _CSRF.findall(text)[0], [html.unescape(c) for c in _CHOICE.findall(text)]


async def choose(web_ui: Client, launch: str, choice: str, login: str = "teacher",
                 **fields: str) -> aiohttp.ClientResponse:
    data = {"csrf": security.csrf_token(SECRET, login, SESSION), "launch": launch, "choice": choice, **fields}
    return await web_ui.post("/lms/deep-link", data=data, headers=signed(login))


def answer_of(text: str) -> tuple[str, str]:
    """The answer page's form: where it posts, and the JWT."""
    action, token = _ACTION.findall(text), _JWT.findall(text)
    assert action and token, text[:2000]
    return html.unescape(action[0]), html.unescape(token[0])


def verified(token: str, jwks: dict[str, Any], audience: str) -> dict[str, Any]:
    kid = jwt.get_unverified_header(token)["kid"]
    (key,) = [k for k in jwks["keys"] if k["kid"] == kid]
    return dict(jwt.decode(token, jwt.PyJWK(key).key, algorithms=["RS256"], audience=audience))


async def test_an_instructor_picks_an_assignment_and_the_lms_gets_its_link_and_gradebook_column(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str
) -> None:
    await link_course(flow, web_ui, course)
    obj = await assignment(kube, course)
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    _, choices = await picker(web_ui, launch)
    assert choices == [f"template:{course}/lab", f"assignment:{course}/week-1", f"new:{course}/"]
    resp = await choose(web_ui, launch, f"assignment:{course}/week-1", points="10")
    text = await resp.text()
    assert resp.status == 200, text
    assert "form-action http://127.0.0.1:" in resp.headers["Content-Security-Policy"]
    action, token = answer_of(text)
    assert action == flow.platform.url + "/deep-link-return"
    # Signed with the key the tool publishes, for the platform, answering this request.
    jwks = await (await flow.gateway.get("/lti/jwks", headers=HOST)).json()
    claims = verified(token, jwks, flow.platform.issuer)
    assert claims["iss"] == flow.platform.client_id and claims["exp"] - claims["iat"] == 300
    assert claims[LTI + "message_type"] == "LtiDeepLinkingResponse"
    assert claims[LTI + "deployment_id"] == flow.platform.deployment_id
    assert claims[DL + "data"] == "platform-opaque-data" and claims["nonce"]
    (item,) = claims[DL + "content_items"]
    assert (item["type"], item["title"], item["url"]) == ("ltiResourceLink", "Week 1: SQL",
                                                          PUBLIC_URL + "/lti/launch")
    assert item["lineItem"] == {"scoreMaximum": 10.0, "label": "Week 1: SQL",
                                "resourceId": obj["metadata"]["uid"], "tag": "userland"}
    assert item["custom"] == {"userland_assignment": f"{course}/week-1"}
    # The LMS takes it (its own checks: signature by the tool's key set, aud, iss, deployment, data).
    async with flow.http.post(action, data={"JWT": token}) as taken:
        assert taken.status == 200, await taken.text()
    assert [c[DL + "content_items"] for c in flow.platform.deep_links] == [[item]]
    # Grade passback posts to that column: the Assignment names the LMS course and the maximum.
    annotated = await kube.get(ASSIGNMENTS, course, "week-1")
    link = lti_grades.parse_link(annotated["metadata"]["annotations"][naming.ANNOTATION_LTI_LINE_ITEM])
    assert link == lti_grades.LineItemLink(registration(course), "course-1", 10.0, "Week 1: SQL")
    # The handoff is used up: the same post again (a replay) answers nothing.
    again = await choose(web_ui, launch, f"assignment:{course}/week-1", points="10")
    text = await again.text()
    assert again.status == 404 and "This link has expired" in text and 'name="JWT"' not in text


async def test_a_new_assignment_is_made_by_the_assignment_forms_own_rules(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str
) -> None:
    await link_course(flow, web_ui, course)
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    # The form's own checks: a past due date is refused in its words, nothing created or sent.
    resp = await choose(web_ui, launch, f"new:{course}/", title="Week 2", url="https://git.example.edu/w2.git",
                        due="2020-01-01T10:00")
    text = await resp.text()
    assert resp.status == 400 and "is in the past" in text and 'name="JWT"' not in text
    assert (await kube.list(ASSIGNMENTS, course))["items"] == []
    resp = await choose(web_ui, launch, f"new:{course}/", title="Week 2: Joins", url="https://git.example.edu/w2.git",
                        ref="", path="", due="2030-01-10T12:00")
    text = await resp.text()
    assert resp.status == 200, text
    created = await kube.get(ASSIGNMENTS, course, "week-2-joins")
    assert created["spec"]["templates"] == ["lab"] and created["spec"]["path"] == "week-2-joins"
    assert created["spec"]["source"] == {"url": "https://git.example.edu/w2.git", "ref": "main"}
    assert created["spec"]["due"] == "2030-01-10T12:00:00Z"
    _, token = answer_of(text)
    (item,) = jwt.decode(token, options={"verify_signature": False})[DL + "content_items"]
    assert item["lineItem"]["resourceId"] == created["metadata"]["uid"]
    assert item["lineItem"]["scoreMaximum"] == 100.0
    assert item["submission"]["endDateTime"].startswith("2030-01-10T12:00:00")


async def test_the_course_environment_is_a_plain_link(
    flow: LtiFlow, web_ui: Client, course: str
) -> None:
    await link_course(flow, web_ui, course)
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    resp = await choose(web_ui, launch, f"template:{course}/lab")
    action, token = answer_of(await resp.text())
    (item,) = jwt.decode(token, options={"verify_signature": False})[DL + "content_items"]
    assert item["title"] == "LAB" and "lineItem" not in item
    async with flow.http.post(action, data={"JWT": token}) as taken:
        assert taken.status == 200, await taken.text()


async def test_an_unoffered_or_forged_choice_and_a_missing_token_are_refused(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str
) -> None:
    await link_course(flow, web_ui, course)
    await assignment(kube, course)
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    for forged in ("assignment:kube-system/week-1", f"template:{course}/other", f"assignment:{course}/week-9",
                   f"template:{course}/lab/../x", "new:kube-system/"):
        resp = await choose(web_ui, launch, forged)
        text = await resp.text()
        assert resp.status == 403 and "You cannot choose this" in text and 'name="JWT"' not in text, forged
    no_token = await web_ui.post("/lms/deep-link", headers=signed("teacher"),
                                 data={"launch": launch, "choice": f"template:{course}/lab"})
    assert no_token.status == 403 and "This form has expired" in await no_token.text()
    obj = await kube.get(ASSIGNMENTS, course, "week-1")
    assert naming.ANNOTATION_LTI_LINE_ITEM not in (obj["metadata"].get("annotations") or {})
    assert [a["metadata"]["name"] for a in (await kube.list(ASSIGNMENTS, course))["items"]] == ["week-1"]
    # Nothing refused used the handoff up: the offered choice still goes.
    assert (await choose(web_ui, launch, f"template:{course}/lab")).status == 200


async def test_learners_and_other_logins_get_a_clear_403(
    flow: LtiFlow, web_ui: Client, course: str, redis_url: str
) -> None:
    await link_course(flow, web_ui, course)
    # A Learner's own deep-linking launch never reaches the picker.
    _, where = await flow.launch(flow.platform.add_launch(person("s-1", "sam@uni.example.edu", LEARNER,
                                                                 deep_linking=True)))
    assert where == "/"
    # The teacher's picker opened by someone else.
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    resp = await web_ui.get(f"/lms/deep-link?launch={launch}", headers=signed("sam"))
    assert resp.status == 403 and "someone else" in await resp.text()
    resp = await choose(web_ui, launch, f"template:{course}/lab", login="sam")
    assert resp.status == 403 and 'name="JWT"' not in await resp.text()
    # A Learner's handoff (the gateway never makes one; as if it had).
    conn = redis.asyncio.Redis.from_url(redis_url)
    theirs = await LtiStore(conn).remember_course({
        "login": "sam", "registration": registration(course), "context": "course-1", "title": "Databases 101",
        "role": "student", "deep_link": {"deployment_id": flow.platform.deployment_id,
                                         "deep_link_return_url": flow.platform.url + "/deep-link-return",
                                         "accept_types": ["ltiResourceLink"],
                                         "data": "platform-opaque-data"}})
    await conn.aclose()
    resp = await web_ui.get(f"/lms/deep-link?launch={theirs}", headers=signed("sam"))
    assert resp.status == 403 and "Only your course&#39;s teachers can do this" in await resp.text()
    resp = await choose(web_ui, theirs, f"template:{course}/lab", login="sam")
    text = await resp.text()
    assert resp.status == 403 and "Only your course&#39;s teachers" in text and 'name="JWT"' not in text
    assert flow.platform.deep_links == []


async def test_an_unlinked_course_is_linked_first_then_the_picker(
    flow: LtiFlow, web_ui: Client, course: str
) -> None:
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    resp = await web_ui.get(f"/lms/deep-link?launch={launch}", headers=signed("teacher"))
    text = await resp.text()
    assert resp.status == 200 and "not linked to a Userland course yet" in text
    assert 'name="choice"' not in text
    assert f'href="/lms/course?launch={launch}"' in text
    # Nothing to answer before it is linked.
    refused = await choose(web_ui, launch, f"template:{course}/lab")
    assert refused.status == 409 and 'name="JWT"' not in await refused.text()
    page = await (await web_ui.get(f"/lms/course?launch={launch}", headers=signed("teacher"))).text()
    linked = await web_ui.post("/lms/course", headers=signed("teacher"), allow_redirects=False, data={
        "csrf": _CSRF.findall(page)[0], "launch": launch, "choice": f"{course}/lab"})
    assert linked.status == 303 and linked.headers["Location"] == f"/lms/deep-link?launch={launch}"
    _, choices = await picker(web_ui, launch)
    assert f"template:{course}/lab" in choices
    # A TeachingAssistant of the linked course may add the environment; assignments are the instructors'.
    ta = await launch_to(flow, person("a-1", "tim@uni.example.edu", TEACHING_ASSISTANT, deep_linking=True),
                         "/lms/deep-link")
    _, choices = await picker(web_ui, ta, login="tim")
    assert choices == [f"template:{course}/lab"]


def _no_jargon(text: str) -> None:
    for word in ("namespace", "Kubernetes", "Template", "annotation", "kubectl", "JWT", "ltiResourceLink"):
        assert word not in text, word


async def test_the_picker_speaks_plainly(flow: LtiFlow, web_ui: Client, kube: KubeClient,
                                         course: str) -> None:
    await link_course(flow, web_ui, course)
    await assignment(kube, course)
    launch = await launch_to(flow, person(*TEACHER, deep_linking=True), "/lms/deep-link")
    text = await (await web_ui.get(f"/lms/deep-link?launch={launch}", headers=signed("teacher"))).text()
    _no_jargon(re.sub(r"<[^>]+>", " ", text.split("<body", 1)[1]))


AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


async def test_the_lms_launching_an_assignments_link_is_noted_for_its_gradebook_column(
    flow: LtiFlow, web_ui: Client, kube: KubeClient, course: str, redis_url: str
) -> None:
    """The gateway's half of following a column (tests/web/test_lti_line_items.py: the web UI's)."""
    await link_course(flow, web_ui, course)
    await assignment(kube, course)

    def launched(target: str) -> LaunchSpec:
        spec = person("s-1", "sam@uni.example.edu", LEARNER)
        spec.custom = {"userland_assignment": target}
        spec.tamper = lambda claims: {**claims, AGS: {"lineitem": "http://127.0.0.1:9/li/1",
                                                       "lineitems": "http://127.0.0.1:9/li"}}
        return spec

    conn = redis.asyncio.Redis.from_url(redis_url)
    await flow.launch(flow.platform.add_launch(launched(f"{course}/week-1")))
    notes = await conn.hgetall(keyspace.lti_assignment_launches_key(course))
    assert {k: json.loads(v) for k, v in notes.items()} == {b"week-1": {
        "registration": registration(course), "context": "course-1", "lineitem": "http://127.0.0.1:9/li/1"}}
    # A link naming a course this LMS course does not feed is not noted (the LMS cannot reach it).
    await flow.launch(flow.platform.add_launch(launched("kube-system/week-1")))
    assert await conn.hgetall(keyspace.lti_assignment_launches_key("kube-system")) == {}
    await conn.aclose()
