"""The LMS roster sync wired into the web UI: on a schedule and with "Sync roster now".

Real: the LMS (lti1p3platform over aiohttp, tests/support/lti_services_platform.py) serving NRPS
pages with its own tokens, checked against the tool's key the web UI reads from the Secret in
the LTI namespace; the control plane with deploy/rbac/ applied, the test namespace made a course
from deploy/course/, and the web UI (`create_app`, every middleware) talking as its own
ServiceAccount, so Kubernetes RBAC fences every read and write. The course's LMS link is
written as the linking page writes it (tests/proxy/test_lti_link.py links through the page;
the launch test platform sends no roster claim, so the roster URL is written here).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.operator.support import template_body
from tests.support import eventually
from tests.support.clock import ManualClock
from tests.support.lti_services_platform import LtiServicesPlatform
from tests.support.waiting import MUST_COMPLETE
from tests.web.course_support import apply_rbac, make_course, web_client
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import (
    EVENTS,
    NAMESPACES,
    SECRETS,
    TEMPLATES,
    USERLANDS,
    AlreadyExists,
    KubeClient,
)
from userland.platform.clients.lti_keys import new_key
from userland.platform.model import identity, naming
from userland.platform.model.lti_keys import TOOL_KEYS_SECRET, secret_data
from userland.platform.model.lti_links import ANNOTATION_LINKS, LmsLink, links_value
from userland.platform.model.lti_services_keys import ToolKey
from userland.platform.model.lti_services_roster import LIS
from userland.platform.model.settings import Settings
from userland.web.app import create_app
from userland.web.audit import AuditLog
from userland.web.lti_sync import LTI_REGISTRATIONS, RosterSync
from userland.web.rules import security
from userland.web.rules.lti_sync import ANNOTATION_REMOVE_AFTER

SYSTEM = "userland-system"  # the LTI namespace of deploy/rbac/ (Role userland-web-lti)
SECRET = "s" * 40
PUBLIC = "http://userland.localhost:8000"
SESSION = "5e55" * 8
TEMPLATE = "lab"
LEARNER, MENTOR = f"{LIS}#Learner", f"{LIS}#Mentor"
LAUNCH_KEY = new_key(time.time() - 7200)  # settled: it signs
TOOL_KEY = ToolKey(kid=LAUNCH_KEY.kid, private_pem=LAUNCH_KEY.private_pem().decode())
Client = TestClient[web.Request, web.Application]


def member(user: str, role: str = LEARNER, status: str = "Active") -> dict[str, object]:
    return {"user_id": user, "roles": [role], "status": status, "name": f"Student {user}",
            "email": f"{user}@uni.edu"}


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


@pytest.fixture
async def tool_key(rbac: ControlPlane) -> ToolKey:
    """The tool's key Secret in the LTI namespace, holding this module's key."""
    async with await KubeClient.connect(str(rbac.kubeconfig)) as kube:
        body = {"metadata": {"name": TOOL_KEYS_SECRET}, "data": secret_data([LAUNCH_KEY])}
        try:
            await kube.create(SECRETS, SYSTEM, body)
        except AlreadyExists:
            body = {**body, "apiVersion": "v1", "kind": "Secret"}
            await kube.replace(SECRETS, SYSTEM, TOOL_KEYS_SECRET, body)
    return TOOL_KEY


@pytest.fixture
async def lms(tool_key: ToolKey) -> AsyncIterator[LtiServicesPlatform]:
    async with LtiServicesPlatform(tool_key, page_size=4) as platform:
        yield platform


@pytest.fixture
async def course(rbac: ControlPlane, namespace: str, kube: KubeClient, lms: LtiServicesPlatform) -> str:
    """A course taught by `teacher`, linked to LMS course c1 of a registration of its own."""
    make_course(rbac, namespace, only=("Namespace", "RoleBinding"))
    await kube.create(TEMPLATES, namespace, template_body(TEMPLATE))
    registration = f"lms-{uuid.uuid4().hex[:8]}"
    await kube.create(LTI_REGISTRATIONS, SYSTEM, {
        "apiVersion": naming.API_VERSION, "kind": "LtiRegistration", "metadata": {"name": registration},
        "spec": {"issuer": lms.issuer, "clientId": lms.client_id, "deploymentIds": [lms.deployment_id],
                 "authLoginUrl": lms.url + "/auth", "authTokenUrl": lms.token_url,
                 "keySetUrl": lms.url + "/jwks"}})
    link = LmsLink(registration, "c1", TEMPLATE, "Databases 101", lms.memberships_url("c1"),
                   lms.lineitems_url("c1"))
    await kube.merge_patch(NAMESPACES, None, namespace,
                           {"metadata": {"annotations": {ANNOTATION_LINKS: links_value([link])}}})
    yield namespace
    await kube.delete(LTI_REGISTRATIONS, SYSTEM, registration)


@pytest.fixture
async def as_web(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with web_client(rbac, tmp_path) as client:
        yield client


WebFactory = Callable[..., Awaitable[Client]]


@pytest.fixture
async def web_factory(aiohttp_client: Callable[[web.Application], Awaitable[Client]], as_web: KubeClient,
                      redis_url: str) -> AsyncIterator[WebFactory]:
    conns: list[redis.asyncio.Redis] = []

    async def make(minutes: int = 0, **extra: Any) -> Client:
        conn = redis.asyncio.Redis.from_url(redis_url)
        conns.append(conn)
        settings = Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC,
                            cookie_secure=False, lti_namespace=SYSTEM, lti_sync_minutes=minutes, **extra)
        client = await aiohttp_client(create_app(settings, kube=as_web, redis_client=conn))
        deadline = time.monotonic() + 20
        while (await client.get("/healthz")).status != 200:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        return client

    yield make
    for conn in conns:
        await conn.aclose()


def signed(login: str) -> dict[str, str]:
    ident = identity.for_audience(login, "web", role="student", session=SESSION)
    return {**dict(identity.identity_headers(ident, SECRET)), "Origin": PUBLIC}


def csrf(login: str) -> str:
    return security.csrf_token(SECRET, login, SESSION)


async def students(kube: KubeClient, namespace: str) -> dict[str, bool]:
    """login -> suspended, of the course's environments."""
    return {u["spec"]["user"]: bool(u["spec"].get("suspended"))
            for u in (await kube.list(USERLANDS, namespace))["items"]}


async def sync_as(web_ui: Client, course: str, login: str) -> Any:
    return await web_ui.post(f"/courses/{course}/lms-sync", data={"csrf": csrf(login)},
                             headers=signed(login), allow_redirects=False)


def text_of(page: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


async def test_sync_roster_now_adds_suspends_and_the_dashboard_says_what_and_why(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory, redis_url: str
) -> None:
    lms.rosters["c1"] = [member(f"s{i}") for i in range(6)] + [member("mo", MENTOR)]
    web_ui = await web_factory(minutes=0)
    page = text_of(await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text())
    assert "LMS roster" in page and "Not synced yet" in page and "Sync roster now" in page
    resp = await web_ui.post(f"/courses/{course}/lms-sync", data={"csrf": csrf("teacher")},
                             headers=signed("teacher"), allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == f"/courses/{course}#lms-roster"
    # Every active Learner has their environment, before they ever launch.
    assert await students(kube, course) == {f"s{i}": False for i in range(6)}
    page = text_of(await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text())
    assert "by teacher" in page and "6 added" in page and "1 skipped" in page
    assert "s3 : added: their environment was made" in page
    assert "has no place in a Userland course" in page  # why the Mentor was skipped

    # s1 dropped from the LMS course, s2 inactive: suspended, their storage kept.
    lms.rosters["c1"] = [m for m in lms.rosters["c1"] if m["user_id"] != "s1"]
    lms.rosters["c1"][1]["status"] = "Inactive"
    await web_ui.post(f"/courses/{course}/lms-sync", data={"csrf": csrf("ta1")}, headers=signed("ta1"))
    now = await students(kube, course)
    assert now["s1"] and now["s2"] and not now["s0"]
    assert len(now) == 6  # nobody removed: suspended, files kept
    page = text_of(await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text())
    assert "by ta1" in page and "s1 : suspended (their files are kept)" in page

    # Audited, each sync with what it changed.
    conn = redis.asyncio.Redis.from_url(redis_url)
    entries = await AuditLog(conn).recent(course, action="lms-sync")
    await conn.aclose()
    assert [(e.actor, sorted(e.targets)) for e in entries] == [
        ("ta1", ["s1", "s2"]), ("teacher", [f"s{i}" for i in range(6)])]


async def test_only_staff_with_the_forms_token_may_sync(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory
) -> None:
    lms.rosters["c1"] = [member("s0")]
    web_ui = await web_factory(minutes=0)
    student = await sync_as(web_ui, course, "s0")
    assert student.status == 404
    no_token = await web_ui.post(f"/courses/{course}/lms-sync", data={}, headers=signed("teacher"))
    assert no_token.status == 403
    assert await students(kube, course) == {}


async def test_an_unreadable_roster_changes_nothing_and_says_why(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory
) -> None:
    lms.rosters["c1"] = [member("s0"), member("s1")]
    web_ui = await web_factory(minutes=0)
    await sync_as(web_ui, course, "teacher")
    assert await students(kube, course) == {"s0": False, "s1": False}
    del lms.rosters["c1"]  # the LMS course is gone: its roster answers 404
    await sync_as(web_ui, course, "teacher")
    assert await students(kube, course) == {"s0": False, "s1": False}  # nobody suspended
    page = text_of(await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text())
    assert "Nothing was changed: the LMS roster could not be read." in page


async def test_the_schedule_syncs_every_linked_course_once_per_interval(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory,
    as_web: KubeClient, redis_url: str
) -> None:
    lms.rosters["c1"] = [member("s0"), member("s1")]
    # The web UI syncs at start and then every USERLAND_LTI_SYNC_MINUTES (15 by default).
    await web_factory(minutes=15)

    async def synced() -> bool:
        return await students(kube, course) == {"s0": False, "s1": False}

    await eventually(synced, timeout=MUST_COMPLETE)
    # Another replica in the same interval does not sync it again.
    conn = redis.asyncio.Redis.from_url(redis_url)
    other = RosterSync(as_web, conn, SYSTEM, interval_minutes=15)
    assert course in await other.linked_courses()
    assert not await other.claim(course, 60)
    await conn.aclose()
    assert Settings().lti_sync_minutes == 15


async def test_the_lms_staff_lists_follow_the_roster_and_hand_written_staff_stay(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory
) -> None:
    instructor, assistant = f"{LIS}#Instructor", f"{LIS}#TeachingAssistant"
    lms.rosters["c1"] = [member("s0"), member("prof", instructor), member("tam", assistant)]
    web_ui = await web_factory(minutes=0)
    await sync_as(web_ui, course, "teacher")
    notes = (await kube.get(NAMESPACES, None, course))["metadata"]["annotations"]
    assert notes["userland.dev/lti-instructors"] == "prof" and notes["userland.dev/lti-assistants"] == "tam"
    assert (await web_ui.get(f"/courses/{course}", headers=signed("prof"))).status == 200
    # tam becomes an instructor in the LMS, prof leaves it: the lists follow.
    lms.rosters["c1"] = [member("s0"), member("tam", instructor)]
    await sync_as(web_ui, course, "teacher")
    notes = (await kube.get(NAMESPACES, None, course))["metadata"]["annotations"]
    assert notes["userland.dev/lti-instructors"] == "tam" and notes["userland.dev/lti-assistants"] == ""
    assert notes["userland.dev/instructors"] == "teacher" and notes["userland.dev/assistants"] == "ta1"
    page = text_of(await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text())
    assert "prof : no longer on this course's staff" in page.replace("&#39;", "'")
    assert (await web_ui.get(f"/courses/{course}", headers=signed("prof"))).status == 404
    assert set(await students(kube, course)) == {"s0"}  # staff get no environment


async def test_remove_after_n_days_suspends_at_once_removes_later_and_resumes_who_came_back(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory,
    as_web: KubeClient, redis_url: str
) -> None:
    # The course's policy: remove a dropped student 7 days after the sync suspended them.
    await kube.merge_patch(NAMESPACES, None, course,
                           {"metadata": {"annotations": {ANNOTATION_REMOVE_AFTER: "7"}}})
    lms.rosters["c1"] = [member(f"s{i}") for i in range(3)]
    clock = ManualClock(datetime(2026, 11, 28, 9, 0, tzinfo=UTC))
    conn = redis.asyncio.Redis.from_url(redis_url)
    sync = RosterSync(as_web, conn, SYSTEM, clock=clock)  # the web UI's sync, on a clock we move
    web_ui = await web_factory(minutes=0)

    async def page() -> str:
        html = await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text()
        return text_of(html).replace("&#39;", "'")

    await sync.sync_course(course)
    assert await students(kube, course) == {"s0": False, "s1": False, "s2": False}
    # s1 and s2 leave the LMS course: suspended at once, their environments (and files) kept.
    lms.rosters["c1"] = [member("s0")]
    clock.advance(3600)
    await sync.sync_course(course)
    assert await students(kube, course) == {"s0": False, "s1": True, "s2": True}
    text = await page()
    card = text[text.find("LMS roster"):][:1500]
    assert "removed 7 days later, unless they are back in the LMS course before" in card, card
    assert ("To be removed (2) s1 : removed at the first sync after 2026-12-05 10:00 UTC" in text
            and "s2 : removed at the first sync after 2026-12-05 10:00 UTC" in text), text

    # Day 5: s2 is back in the LMS course before their days are up: resumed, not removed.
    lms.rosters["c1"] = [member("s0"), member("s2")]
    clock.advance(4 * 86400)
    await sync.sync_course(course)
    assert await students(kube, course) == {"s0": False, "s1": True, "s2": False}
    text = await page()
    assert "To be removed (1) s1 :" in text and "s2 : removed at" not in text

    # A minute before seven days since s1's suspension: still there. Seven days: removed, as staff's
    # "Remove" does (the same code and audit Event), and the dashboard says so.
    clock.advance(3 * 86400 - 60)
    await sync.sync_course(course)
    assert "s1" in await students(kube, course)
    clock.advance(120)
    await sync.sync_course(course)
    assert await students(kube, course) == {"s0": False, "s2": False}
    text = await page()
    assert "s1 : removed after their days suspended" in text and "To be removed" not in text
    events = (await kube.list(EVENTS, course))["items"]
    removed = naming.userland_name(TEMPLATE, "s1")
    assert any(e["reason"] == "Removed" and e["involvedObject"]["name"] == removed for e in events)
    await conn.aclose()


async def test_a_bad_remove_after_value_is_shown_and_removes_nobody(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, web_factory: WebFactory,
    as_web: KubeClient, redis_url: str
) -> None:
    await kube.merge_patch(NAMESPACES, None, course,
                           {"metadata": {"annotations": {ANNOTATION_REMOVE_AFTER: "two weeks"}}})
    lms.rosters["c1"] = [member("s0")]
    clock = ManualClock(datetime(2026, 11, 28, 9, 0, tzinfo=UTC))
    conn = redis.asyncio.Redis.from_url(redis_url)
    sync = RosterSync(as_web, conn, SYSTEM, clock=clock)
    await sync.sync_course(course)
    lms.rosters["c1"] = []
    await sync.sync_course(course)
    clock.advance(400 * 86400)
    await sync.sync_course(course)
    assert await students(kube, course) == {"s0": True}  # suspended, never removed
    web_ui = await web_factory(minutes=0)
    html = await (await web_ui.get(f"/courses/{course}", headers=signed("teacher"))).text()
    assert "not a number of days from 1 to 365: dropped students are only suspended" in text_of(html)
    await conn.aclose()
