"""The LMS content picker in a real browser: a teacher adds Userland to a module of her LMS course.

Real: Chromium (headless, third-party cookies blocked), the LTI platform (lti1p3platform on
aiohttp: a course page on `http://127.0.0.1:<port>` that frames the deep-linking launch, its
OIDC endpoints and key set, and its `deep_link_return_url`, which checks the tool's answer with
lti1p3platform against the key set the gateway publishes), the gateway on
`http://userland.localhost:<port>` with the web UI behind it, the API server and Redis. The LMS
course is linked to the Userland course already; the teacher opens the tool from the LMS's
"add content" (inside its iframe, so in a window of Userland's own), picks an assignment, and
the LMS receives the link with its gradebook column.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, expect

from tests.browser.conftest import (
    BROWSER_TEST_DB,
    IDENTITY_SECRET,
    TEMPLATE,
    TEMPLATE_HOST,
    _serve,
    _wait_healthy,
)
from tests.operator.support import template_body
from tests.support import MUST_COMPLETE, MUST_COMPLETE_MS, eventually
from tests.support.lti_launch_platform import INSTRUCTOR, LaunchSpec, LtiTestPlatform
from userland.local.ports import free_port
from userland.platform.clients.kube import ASSIGNMENTS, NAMESPACES, TEMPLATES, KubeClient, Resource
from userland.platform.model import naming
from userland.platform.model.lti_links import ANNOTATION_LINKS, LmsLink, links_value
from userland.platform.model.settings import Settings
from userland.proxy.app import RUNNER_KWARGS, create_app
from userland.web.app import create_app as create_web_app

LTI_REGISTRATIONS = Resource(naming.GROUP, naming.VERSION, "ltiregistrations", "LtiRegistration")
DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"


@dataclass
class Lms:
    platform: LtiTestPlatform
    public_url: str


@pytest.fixture
async def lms(kube: KubeClient, namespace: str, redis_url: str) -> AsyncIterator[Lms]:
    servers: list[TestServer] = []
    db_url = redis_url.rsplit("/", 1)[0] + f"/{BROWSER_TEST_DB}"
    client = redis.asyncio.from_url(db_url)
    await client.flushdb()
    port = free_port()
    public_url = f"http://userland.localhost:{port}"
    platform = await LtiTestPlatform(public_url).start()
    try:
        await kube.create(TEMPLATES, namespace, template_body(
            TEMPLATE, displayName="Python IDE", routing={"host": TEMPLATE_HOST},
            storage={"size": "1Gi", "mountPath": "/home/student", "reclaimPolicy": "Delete"}))
        # A course, its LMS course linked already (tests/proxy/test_lti_link.py links through the page).
        await kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
            "labels": {naming.LABEL_COURSE: "true"},
            "annotations": {naming.ANNOTATION_COURSE_TITLE: "Databases 101",
                            ANNOTATION_LINKS: links_value([LmsLink("lms", "course-1", TEMPLATE,
                                                                   "Databases 101")])}}})
        for name, title, due in (("week-1", "Week 1: SELECT and WHERE", "2030-12-07T23:59:00Z"),
                                 ("week-2", "Week 2: Joins", "2030-12-14T23:59:00Z")):
            await kube.create(ASSIGNMENTS, namespace, {
                "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": name},
                "spec": {"title": title, "templates": [TEMPLATE], "path": name, "due": due,
                         "source": {"url": "https://git.example.edu/db/labs.git", "ref": "main"}}})
        await kube.create(LTI_REGISTRATIONS, namespace, {
            "apiVersion": naming.API_VERSION, "kind": "LtiRegistration", "metadata": {"name": "lms"},
            "spec": platform.spec()})
        web_ui = await _serve(create_web_app(Settings(
            redis_url=db_url, identity_secret=IDENTITY_SECRET, public_url=public_url, cookie_secure=False,
            lti_namespace=namespace, lti_sync_minutes=60), kube=kube))
        servers.append(web_ui)
        await _wait_healthy(f"http://127.0.0.1:{web_ui.port}/healthz")
        settings = Settings(
            namespaces=(namespace,), redis_url=db_url, identity_secret=IDENTITY_SECRET, public_url=public_url,
            web_url=f"http://127.0.0.1:{web_ui.port}", upstream_mode="local", cookie_secure=False,
            session_ttl_seconds=3600, lti_namespace=namespace)
        gateway = await _serve(create_app(settings, kube=kube), port,
                               **{k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"})
        servers.append(gateway)

        async def ready() -> bool:
            obj = await kube.get(LTI_REGISTRATIONS, namespace, "lms")
            conditions = (obj.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        await eventually(ready, timeout=MUST_COMPLETE)
        # The LMS checks the answer against the tool's key set, as the gateway publishes it.
        async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{port}/lti/jwks", headers={"Host": f"userland.localhost:{port}"}) as resp:
            assert resp.status == 200
            platform.tool_jwks = await resp.json()
        yield Lms(platform, public_url)
    finally:
        for server in reversed(servers):
            await server.close()
        await platform.close()
        await client.aclose()


async def test_a_teacher_picks_an_assignment_and_the_lms_receives_it(
    framing_browser: Browser, lms: Lms, tmp_path: Path
) -> None:
    launch = lms.platform.add_launch(LaunchSpec(
        user_id="t-1", roles=[INSTRUCTOR], email="teacher@uni.example.edu", name="Tess Teacher",
        context_id="course-1", context_title="Databases 101", deep_linking=True))
    context = await framing_browser.new_context(viewport={"width": 1100, "height": 900})
    page = await context.new_page()
    await page.goto(f"{lms.platform.url}/storage?launch={launch}&storage=0")
    restart = page.frame_locator("#tool").get_by_role("link", name="Open Userland in a new window")
    await expect(restart).to_be_visible(timeout=MUST_COMPLETE_MS)
    async with context.expect_page(timeout=MUST_COMPLETE_MS) as opened:
        await restart.click()
    window = await opened.value
    await expect(window.get_by_role("heading", name="Add Userland to “Databases 101”")).to_be_visible(
        timeout=MUST_COMPLETE_MS)
    assert window.url.startswith(lms.public_url + "/lms/deep-link?launch=")
    await expect(window.get_by_text("Python IDE")).to_be_visible()
    await window.get_by_label("Week 1: SELECT and WHERE").check()
    await window.get_by_label("Points for a full grade").fill("20")
    await window.screenshot(path=tmp_path / "lti-deep-link-picker.png", full_page=True)
    if os.environ.get("USERLAND_SCREENSHOTS"):  # docs/screenshots/lti-deep-link-picker.png is made so
        out = Path(os.environ["USERLAND_SCREENSHOTS"]) / "lti-deep-link-picker.png"
        await window.screenshot(path=out, full_page=True)
    await window.get_by_role("button", name="Add to the LMS course").click()
    # The answer page posts itself to the LMS, which checks it and adds the link to the module.
    await expect(window.locator("#added")).to_have_text("Week 1: SELECT and WHERE", timeout=MUST_COMPLETE_MS)
    (claims,) = lms.platform.deep_links
    (item,) = claims[DL + "content_items"]
    assert item["url"] == lms.public_url + "/lti/launch" and item["type"] == "ltiResourceLink"
    assert item["lineItem"]["scoreMaximum"] == 20 and item["lineItem"]["label"] == "Week 1: SELECT and WHERE"
    assert item["lineItem"]["tag"] == "userland" and item["lineItem"]["resourceId"]
    await context.close()
