"""The course pages through the real application: who sees what, live rows, refusals.

Real: the web UI (`create_app`, all middlewares) served by aiohttp's test server, its watches on
the real kube-apiserver, a real Redis; identities signed as the gateway signs them.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support import eventually
from tests.web.support import add_userland, make_course, set_phase
from userland.local.ports import free_port
from userland.platform.clients.kube import NAMESPACES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import identity
from userland.platform.model.settings import Settings
from userland.web.app import create_app
from userland.web.context import WEB
from userland.web.state import STATE

SECRET = "s" * 40
PUBLIC = "http://userland.localhost:8000"
Client = TestClient[web.Request, web.Application]


SESSION = "5e55" * 8  # the gateway session id every test identity carries


def headers(login: str, role: str = "student", *, teams: tuple[str, ...] = (), now: float | None = None,
            audience: identity.Audience = "web") -> dict[str, str]:
    ident = identity.for_audience(login, audience, role=role, teams=teams, session=SESSION)
    return dict(identity.identity_headers(ident, SECRET, now))


def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC, cookie_secure=False)


@pytest.fixture
async def courses(kube: KubeClient) -> AsyncIterator[tuple[str, str]]:
    """Two courses: cs101 (teacher, assistant ta1) and db202 (prof2); alice is in both."""
    names = (f"t-cs-{uuid.uuid4().hex[:8]}", f"t-db-{uuid.uuid4().hex[:8]}")
    for ns in names:
        await kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
    await make_course(kube, names[0], instructors="teacher", assistants="ta1", title="CS 101")
    await make_course(kube, names[1], instructors="prof2", assistants="", title="DB 202")
    await add_userland(kube, names[0], "alice", **{"userland.dev/name": "<script>alert(1)</script>"})
    await add_userland(kube, names[0], "bob")
    await add_userland(kube, names[1], "alice", "db")
    await add_userland(kube, names[1], "carol", "db")
    yield names
    for ns in names:
        await kube.delete(NAMESPACES, None, ns)


@pytest.fixture
async def client(aiohttp_client: Callable[[web.Application], Awaitable[Client]], kube: KubeClient,
                 redis_url: str, courses: tuple[str, str]) -> AsyncIterator[Client]:
    conn = redis.asyncio.Redis.from_url(redis_url)
    app = create_app(settings(redis_url), kube=kube, redis_client=conn)
    test_client = await aiohttp_client(app)

    async def healthy() -> bool:
        return (await test_client.get("/healthz")).status == 200
    deadline = time.monotonic() + 20
    while not await healthy():
        assert time.monotonic() < deadline, "healthz never became ready"
        await asyncio.sleep(0.05)
    # Both courses loaded with their students.
    for ns, who in ((courses[0], "bob"), (courses[1], "carol")):
        page = await eventually_page(test_client, f"/courses/{ns}", headers("root", "admin"), who)
        assert who in page
    yield test_client
    # The app first (its help monitor and sessions use the connection until it stops), then the
    # connection: closed under a running app, the monitor's channel broke and the app's cleanup
    # could hang until pytest's timeout on a loaded machine.
    await test_client.close()
    await conn.aclose()


async def eventually_page(client: Client, path: str, hdrs: dict[str, str], text: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        response = await client.get(path, headers=hdrs)
        body = await response.text()
        if response.status == 200 and text in body:
            return body
        assert time.monotonic() < deadline, f"{path}: {response.status} without {text!r}"
        await asyncio.sleep(0.05)


async def test_instructor_sees_the_dashboard_with_rows_forms_and_links(client: Client,
                                                                      courses: tuple[str, str]) -> None:
    cs = courses[0]
    response = await client.get(f"/courses/{cs}", headers=headers("teacher"))
    body = await response.text()
    assert response.status == 200, body
    assert "CS 101" in body and 'id="student-alice"' in body and 'id="student-bob"' in body
    assert "carol" not in body  # another course's student
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in body
    assert f'action="/courses/{cs}/actions"' in body and 'form="bulk"' in body
    assert body.count('name="csrf"') >= 3 and 'value="remove"' in body
    assert f'href="/courses/{cs}/add"' in body and f'href="/courses/{cs}/audit"' in body
    assert f'data-stream="/courses/{cs}/stream"' in body and '<script src="/static/dashboard.js"' in body
    assert response.headers["Cache-Control"] == "no-store"
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert "Waiting" in body  # no status yet: plain words


async def test_assistant_sees_the_dashboard_without_roster_changes(client: Client,
                                                                  courses: tuple[str, str]) -> None:
    response = await client.get(f"/courses/{courses[0]}", headers=headers("ta1"))
    body = await response.text()
    assert response.status == 200 and 'id="student-bob"' in body
    assert 'value="restart"' in body
    assert 'value="remove"' not in body and "/add" not in body and "Remove all" not in body


async def test_search_filter_and_sort_work_from_query_parameters(client: Client, courses: tuple[str, str],
                                                                 kube: KubeClient) -> None:
    cs = courses[0]
    body = await (await client.get(f"/courses/{cs}?q=bob", headers=headers("teacher"))).text()
    assert 'id="student-bob"' in body and 'id="student-alice"' not in body
    await set_phase(kube, cs, "ide-bob", "Ready")
    body = await eventually_page(client, f"/courses/{cs}?phase=ready", headers("teacher"), 'id="student-bob"')
    assert 'id="student-alice"' not in body
    bad = await client.get(f"/courses/{cs}?page=abc&sort=%3Cx%3E&phase=zzz", headers=headers("teacher"))
    assert bad.status == 200


@pytest.mark.parametrize("path", ["/courses/{ns}", "/courses/{ns}/stream"])
async def test_a_student_gets_404_for_a_course_page(client: Client, courses: tuple[str, str],
                                                    path: str) -> None:
    for who in (headers("alice"), headers("mallory", teams=("uni/other",))):
        response = await client.get(path.format(ns=courses[0]), headers=who)
        assert response.status == 404
        assert "No such course" in await response.text()
    # Same page for a namespace that is not a course or does not exist: nothing to probe.
    for ns in ("kube-system", "does-not-exist", "UPPER", "a" * 80):
        response = await client.get(f"/courses/{ns}", headers=headers("alice"))
        assert response.status == 404


async def test_courses_list_by_role(client: Client, courses: tuple[str, str]) -> None:
    cs, db = courses
    admin = await (await client.get("/courses", headers=headers("root", "admin"))).text()
    assert "CS 101" in admin and "DB 202" in admin
    assert f"/courses/{cs}" in admin and f"/courses/{db}" in admin
    global_instructor = await (await client.get("/courses", headers=headers("prof", "instructor"))).text()
    assert "CS 101" in global_instructor and "DB 202" in global_instructor
    teacher = await (await client.get("/courses", headers=headers("teacher"))).text()
    assert "CS 101" in teacher and "DB 202" not in teacher
    student = await client.get("/courses", headers=headers("alice"))
    text = await student.text()
    assert student.status == 200 and "do not teach or assist any course" in text
    assert "CS 101" not in text and "DB 202" not in text


async def test_me_shows_only_my_environments_across_courses(client: Client, courses: tuple[str, str],
                                                           kube: KubeClient) -> None:
    cs, db = courses
    await set_phase(kube, cs, "ide-alice", "Ready", url=f"{PUBLIC}/ide/")
    body = await eventually_page(client, "/me", headers("alice"), f'href="{PUBLIC}/ide/"')
    assert "CS 101" in body and "DB 202" in body
    assert "Open ide" in body and "Ready" in body and "Waiting" in body
    assert "bob" not in body and "carol" not in body
    for jargon in ("pod", "namespace", "deployment", "Kubernetes"):
        assert jargon not in body.lower().replace("namespaces", "")
    nobody = await (await client.get("/me", headers=headers("newbie"))).text()
    assert "You have no environments yet" in nobody and "newbie" in nobody
    teacher = await (await client.get("/me", headers=headers("teacher"))).text()
    assert "Courses you help run" in teacher and f"/courses/{cs}" in teacher
    assert f"/courses/{db}" not in teacher


async def test_staff_see_a_students_address_as_a_link(client: Client, courses: tuple[str, str],
                                                      kube: KubeClient) -> None:
    """Every origin is served to its student only (issue 7), but a teacher wants to open or copy
    the address (issue 16): a link, in a new tab, that says only the student can use it (the
    gateway's page for anyone else says whose it is)."""
    cs = courses[0]
    await set_phase(kube, cs, "ide-alice", "Ready", url="http://alice.ide.localhost:8000/")
    body = await eventually_page(client, f"/courses/{cs}", headers("teacher"), "alice.ide.localhost:8000")
    assert 'href="http://alice.ide.localhost:8000/" rel="noopener noreferrer" target="_blank"' in body
    assert "only they can use it" in body
    mine = await eventually_page(client, "/me", headers("alice"), 'href="http://alice.ide.localhost:8000/"')
    assert "Open ide" in mine


@pytest.mark.parametrize("kind", ["none", "forged", "stale", "env-audience", "other-secret"])
@pytest.mark.parametrize("path", ["/", "/courses", "/courses/{ns}", "/courses/{ns}/stream", "/me",
                                  "/me/stream"])
async def test_bad_identities_get_401(client: Client, courses: tuple[str, str], kind: str, path: str) -> None:
    hdrs: dict[str, str] = {}
    if kind == "forged":
        hdrs = headers("student1")
        hdrs[identity.USER_HEADER] = "teacher"
    elif kind == "stale":
        hdrs = headers("teacher", now=time.time() - 3600)
    elif kind == "env-audience":
        hdrs = headers("teacher", audience="env")
    elif kind == "other-secret":
        ident = identity.for_audience("teacher", "web", session=SESSION)
        hdrs = dict(identity.identity_headers(ident, "x" * 40))
    response = await client.get(path.format(ns=courses[0]), headers=hdrs)
    assert response.status == 401
    page = await response.text()
    assert ("Welcome to Userland" if path == "/" else "Please sign in") in page
    # The sign-in link comes back to the page asked for; no "start page" link (this is it).
    back = quote(PUBLIC + path.format(ns=courses[0]), safe="")
    assert f'href="{PUBLIC}/auth/login?next={back}"' in page and "Back to the start page" not in page


async def read_event(response: Any, name: str, timeout: float) -> dict[str, Any]:
    event = ""
    async with asyncio.timeout(timeout):
        while True:
            line = (await response.content.readline()).decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == name:
                return json.loads(line[6:])  # type: ignore[no-any-return]


async def test_the_stream_delivers_a_row_change(client: Client, courses: tuple[str, str],
                                                kube: KubeClient) -> None:
    """A status write reaches an open dashboard as an event carrying that row (how soon is
    bench/web_bench.py's "sse" figure, not a bound a loaded machine could miss)."""
    cs = courses[0]
    response = await client.get(f"/courses/{cs}/stream", headers=headers("teacher"))
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["Cache-Control"] == "no-store"
    assert (await response.content.readline()).startswith(b"retry:")
    first = await read_event(response, "rows", 30.0)  # every row as it is now (see the next test)
    assert sorted(first["rows"]) == ["alice", "bob"]
    await set_phase(kube, cs, "ide-bob", "Starting")
    await set_phase(kube, cs, "ide-bob", "Ready")
    while True:
        data = await read_event(response, "rows", 30.0)
        if "bob" in data["rows"] and "Ready" in data["rows"]["bob"]:
            break
    row = data["rows"]["bob"]
    assert row.startswith("<tbody") and 'id="student-bob"' in row and 'name="csrf"' in row
    assert "alice" not in data["rows"]  # only what changed
    assert data["order"] == ["alice", "bob"] and data["total"] == 2
    response.close()


async def test_a_change_between_the_page_and_its_stream_reaches_the_page(
        client: Client, courses: tuple[str, str], kube: KubeClient) -> None:
    """The page is rendered, then a row changes, then the page's script opens the stream: the
    stream's first event carries the change (before, nothing did until the row changed again)."""
    cs = courses[0]
    page = await client.get(f"/courses/{cs}", headers=headers("teacher"))
    assert page.status == 200
    state = client.app[WEB].extras[STATE]

    def bob_ready() -> bool:
        return any(r.login == "bob" and any(e.phase == "Ready" for e in r.environments)
                   for r in state.watch(cs).rows())

    assert not bob_ready()
    await set_phase(kube, cs, "ide-bob", "Ready")
    await eventually(bob_ready)
    response = await client.get(f"/courses/{cs}/stream", headers=headers("teacher"))
    first = await read_event(response, "rows", 30.0)
    assert "Ready" in first["rows"]["bob"] and "Ready" not in first["rows"]["alice"]
    response.close()


async def test_the_stream_ends_when_the_viewer_is_no_longer_staff(client: Client, courses: tuple[str, str],
                                                                  kube: KubeClient) -> None:
    cs = courses[0]
    response = await client.get(f"/courses/{cs}/stream", headers=headers("ta1"))
    assert response.status == 200
    await read_event(response, "rows", 30.0)  # the first pass, while ta1 is still staff
    await kube.merge_patch(NAMESPACES, None, cs, {"metadata": {"annotations": {
        "userland.dev/assistants": "someone-else"}}})
    state = client.app[WEB].extras[STATE]  # the web UI has seen ta1 leave before the row changes
    await eventually(lambda: (course := state.course(cs)) is not None and "ta1" not in course.assistants)
    await set_phase(kube, cs, "ide-bob", "Ready")
    async with asyncio.timeout(5):
        rest = (await response.content.read()).decode()
    assert "event: gone" in rest and "student-bob" not in rest
    assert (await client.get(f"/courses/{cs}", headers=headers("ta1"))).status == 404


async def test_shutdown_ends_open_streams_cleanly(client: Client, courses: tuple[str, str]) -> None:
    response = await client.get(f"/courses/{courses[0]}/stream", headers=headers("teacher"))
    assert (await response.content.readline()).startswith(b"retry:")
    await read_event(response, "rows", 30.0)  # the first pass
    await client.app.shutdown()  # what the server runs first on SIGTERM
    async with asyncio.timeout(3):
        rest = await response.content.read()
    assert b"event:" not in rest  # ended, without a half-written event


async def test_a_student_cannot_open_the_stream_and_nothing_leaks(client: Client,
                                                                  courses: tuple[str, str]) -> None:
    response = await client.get(f"/courses/{courses[0]}/stream", headers=headers("bob"))
    assert response.status == 404
    assert response.headers["Content-Type"].startswith("text/html")


async def test_a_dead_api_server_gives_503_pages_not_tracebacks(
        aiohttp_client: Callable[[web.Application], Awaitable[Client]], redis_url: str,
        tmp_path: Path) -> None:
    kubeconfig = tmp_path / "dead.kubeconfig"
    port = free_port()
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}]}))
    conn = redis.asyncio.Redis.from_url(redis_url)
    app = create_app(settings(redis_url), kubeconfig=str(kubeconfig), redis_client=conn)
    client = await aiohttp_client(app)
    try:
        assert (await client.get("/healthz")).status == 503
        for path in ("/courses", "/me", "/courses/cs101"):
            response = await client.get(path, headers=headers("root", "admin"))
            body = await response.text()
            assert response.status == 503, (path, body)
            assert "Traceback" not in body and "<h1>" in body
    finally:
        await conn.aclose()


async def test_the_dashboard_says_whether_the_course_is_ready_for_its_lecture(
        client: Client, courses: tuple[str, str], kube: KubeClient) -> None:
    """The operator's LectureReady condition of a scheduled Template (docs/capacity.md), written
    here through the status subresource as the operator writes it, is one line on the page."""
    cs = courses[0]
    body = {"apiVersion": "userland.dev/v1alpha1", "kind": "Template", "metadata": {"name": "ide"},
            "spec": {"displayName": "Lab", "routing": {"host": "ide.example.edu"}, "port": 8080,
                     "podSpec": {"containers": [{"name": "ide", "image": "ide:1"}]}}}
    await kube.create(TEMPLATES, cs, body)
    details = ("2 of 2 environments can start; software on all 4 servers; room for 1 of 2 (1 would wait for "
               "a server to be added)")
    message = f"Not ready for the lecture at 09:00: {details}"
    await kube.merge_patch(TEMPLATES, cs, "ide", {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Valid", "message": "ok"},
        {"type": "LectureReady", "status": "False", "reason": "WaitingForNodes", "message": message}]}},
        subresource="status")

    async def page() -> str | None:
        text = await (await client.get(f"/courses/{cs}", headers=headers("teacher"))).text()
        return text if details in text else None
    text = await eventually(page)
    assert ('<p class="notice lecture bad" data-ready="False"><strong>Lab: not ready for the lecture at '
            f'09:00</strong><br>{details}</p>') in text


async def test_a_course_being_deleted_leaves_every_page_at_once(client: Client, courses: tuple[str, str],
                                                                 kube: KubeClient) -> None:
    """A course namespace being deleted (Terminating: the namespace controller empties it, which
    can take minutes) is listed nowhere: its environments and work are going. Before, a student's
    /me kept showing a deleted course's assignments while the namespace emptied."""
    cs = courses[0]
    # An environment that holds the namespace in Terminating until the test lets it go.
    hold = {"metadata": {"finalizers": ["test.userland.dev/hold"]}}
    await kube.merge_patch(USERLANDS, cs, "ide-alice", hold)
    assert "CS 101" in await (await client.get("/courses", headers=headers("teacher"))).text()
    await kube.delete(NAMESPACES, None, cs)
    try:
        state = client.app[WEB].extras[STATE]
        await eventually(lambda: state.course(cs) is None)
        assert (await kube.get(NAMESPACES, None, cs))["status"]["phase"] == "Terminating"
        assert cs not in [course.namespace for course in state.courses()]
        assert "CS 101" not in await (await client.get("/courses", headers=headers("teacher"))).text()
        assert (await client.get(f"/courses/{cs}", headers=headers("teacher"))).status == 404
        me = await (await client.get("/me", headers=headers("alice"))).text()
        assert "CS 101" not in me and "DB 202" in me  # her other course stays
    finally:
        await kube.merge_patch(USERLANDS, cs, "ide-alice", {"metadata": {"finalizers": None}})
