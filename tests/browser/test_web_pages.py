"""An instructor's roster day in a real browser, through the real gateway: sign in with (fake)
GitHub, upload a CSV with good, bad and duplicate rows, read the per-row results, remove a
student after the confirmation that says what happens to their files.

Real: Debian's Chromium (Playwright), the gateway (`proxy.create_app`, in-process on loopback)
in front of the web UI (`web.create_app`, its own loopback server) which talks to the control
plane as its own ServiceAccount (deploy/rbac/ + the course's RoleBinding from deploy/course/),
Redis, and the fake GitHub of tests/browser/conftest.py.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis.asyncio
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import ConsentGitHub
from tests.operator.support import template_body, userland_body
from tests.web.course_support import apply_rbac, web_client
from tests.web.pages.support import make_course, wait_for_access
from userland.local.controlplane import ControlPlane, free_port
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient
from userland.platform.model.settings import Settings
from userland.proxy.app import RUNNER_KWARGS
from userland.proxy.app import create_app as create_gateway
from userland.web.app import create_app as create_web

WEB_TEST_DB = 13  # the other browser tests use 12
SECRET = "b" * 40
TEACHER = "teacher"


@dataclass
class Classroom:
    url: str
    namespace: str
    github: ConsentGitHub


async def _serve(app: object, port: int | None = None, **kwargs: object) -> TestServer:
    server = TestServer(app, host="127.0.0.1", port=port)  # type: ignore[arg-type]
    await server.start_server(**kwargs)
    return server


@pytest.fixture
async def classroom(kube: KubeClient, namespace: str, redis_url: str, github: ConsentGitHub,
                    control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Classroom]:
    github.add_user(TEACHER, 3001)
    apply_rbac(control_plane)
    await make_course(kube, namespace, title="Databases 101")
    # Routed under .localhost, which Chromium resolves: a sign-out visits the staff's own origins.
    await kube.create(TEMPLATES, namespace, template_body("vscode", displayName="VS Code", storage={
        "size": "1Gi", "mountPath": "/home/coder", "reclaimPolicy": "Retain"},
        routing={"host": "vscode.localhost"}))
    await kube.create(USERLANDS, namespace, userland_body("carol", "vscode"))  # already in the course
    db_url = redis_url.rsplit("/", 1)[0] + f"/{WEB_TEST_DB}"
    flush = redis.asyncio.from_url(db_url)
    await flush.flushdb()
    await flush.aclose()
    port = free_port()
    public_url = f"http://userland.localhost:{port}"
    servers: list[TestServer] = []
    async with web_client(control_plane, tmp_path) as web_kube:
        await wait_for_access(web_kube, namespace)
        try:
            web_settings = Settings(redis_url=db_url, identity_secret=SECRET, public_url=public_url)
            web_ui = await _serve(create_web(web_settings, kube=web_kube))
            servers.append(web_ui)
            settings = Settings(
                namespaces=(namespace,), redis_url=db_url, identity_secret=SECRET,
                github_client_id=github.client_id, github_client_secret=github.client_secret,
                github_url=github.url, github_api_url=github.api_url,
                public_url=public_url, web_url=f"http://127.0.0.1:{web_ui.port}",
                upstream_mode="local", cookie_secure=False, session_ttl_seconds=3600)
            runner = {k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"}
            servers.append(await _serve(create_gateway(settings, kube=kube), port, **runner))
            yield Classroom(url=public_url, namespace=namespace, github=github)
        finally:
            for server in reversed(servers):
                await server.close()


async def sign_in_to(page: Page, room: Classroom, login: str, path: str) -> None:
    target = room.url + path
    await page.goto(f"{room.url}/auth/login?next={quote(target, safe='')}")
    await page.get_by_role("button", name=f"Authorize as {login}").click()
    await page.wait_for_url(re.compile("^" + re.escape(target)))


ROSTER = b"""login,name,email,section
alice,Alice Liddell,alice@example.edu,A
bob,Bob Smith,bob@example.edu,B
not a login!,Mallory,,
Alice,Alice again,,
carol,Carol,,A
"""


async def test_instructor_uploads_a_roster_then_removes_a_student(browser: Browser, classroom: Classroom,
                                                                  kube: KubeClient) -> None:
    page = await (await browser.new_context()).new_page()
    ns = classroom.namespace
    await sign_in_to(page, classroom, TEACHER, f"/courses/{ns}/add")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Add students to Databases 101")
    # The course's only Template is ticked from the start.
    await expect(page.get_by_role("checkbox", name=re.compile("VS Code"))).to_be_checked()
    await page.get_by_label("Or upload a CSV file").set_input_files(
        {"name": "roster.csv", "mimeType": "text/csv", "buffer": ROSTER})
    await page.get_by_role("button", name="Add students").click()

    await expect(page.get_by_role("heading", level=1)).to_have_text("Students added to Databases 101")
    await expect(page.locator("#summary")).to_contain_text("2 created, 1 already there, 2 invalid")
    rows = page.locator("table.results tbody tr")
    await expect(rows).to_have_count(5)
    # Each row: its CSV line (the header is line 1) and the login as it was typed.
    lines = [(await r.get_attribute("data-outcome"), (await r.locator("td.line").inner_text()).strip(),
              (await r.locator("td").nth(1).inner_text()).strip()) for r in await rows.all()]
    outcomes = [(outcome, login) for outcome, _line, login in lines]
    assert ("created", "2", "alice") in lines and ("created", "3", "bob") in lines
    assert ("exists", "6", "carol") in lines
    assert [login for outcome, login in outcomes if outcome == "invalid"] == ["not a login!", "alice"]
    await expect(page.locator("tr.outcome-invalid").last).to_contain_text("duplicate")
    names = {u["metadata"]["name"] for u in (await kube.list(USERLANDS, ns))["items"]}
    assert names == {"vscode-alice", "vscode-bob", "vscode-carol"}

    # Remove bob from the course page: a confirmation first, with what happens to his files.
    await page.get_by_role("link", name="Back to the course").click()
    await page.wait_for_url(re.compile(rf"/courses/{ns}$"))
    await expect(page.locator('tr[data-name="vscode-bob"]')).to_be_visible()
    await page.locator('tr[data-name="vscode-bob"]').get_by_role("button", name="Remove").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Remove 1 environment?")
    await expect(page.locator("main")).to_contain_text(
        "Their files are kept and come back if you add them again.")
    await expect(page.locator("ul.names")).to_have_text(re.compile(r"^\s*bob"))
    assert "vscode-bob" in {u["metadata"]["name"] for u in (await kube.list(USERLANDS, ns))["items"]}
    await page.get_by_role("button", name="Remove 1 environment").click()
    await expect(page.locator("#summary")).to_contain_text("1 removed")
    await expect(page.locator("table.results")).to_contain_text("bob")
    alive = {u["metadata"]["name"] for u in (await kube.list(USERLANDS, ns))["items"]
             if not u["metadata"].get("deletionTimestamp")}
    assert alive == {"vscode-alice", "vscode-carol"}

    # And it is in the course's audit log, newest first.
    await page.goto(f"{classroom.url}/courses/{ns}/audit")
    first = page.locator("table.audit tbody tr").first
    await expect(first).to_contain_text("Removed")
    await expect(first).to_contain_text(TEACHER)
