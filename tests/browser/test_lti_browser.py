"""An LTI launch in a real browser, inside the LMS's iframe, with third-party cookies blocked.

Real: Chromium (headless; this build blocks third-party cookies by default, and the first test
proves it for this very setup: the iframe's cookie never comes back; the framed tests run every
frame in the page's process, tests/browser/conftest.py's FRAMED_SITE_ARGS says why), the LTI platform
(lti1p3platform on aiohttp: a course page on `http://127.0.0.1:<port>` that frames the link, its
OIDC authorization endpoint and key set, and, when asked, the platform's side of LTI Platform
Storage), the gateway on `http://userland.localhost:<port>` (another site than the LMS), the API
server, Redis and the student's demo environment on her own origin. A student clicks the link
in her course and ends in her own environment of the linked Template, with no other sign-in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import (
    BROWSER_TEST_DB,
    IDENTITY_SECRET,
    TEMPLATE,
    TEMPLATE_HOST,
    _environment,
    _serve,
)
from tests.browser.conftest import environment_app as demo_app
from tests.operator.support import template_body
from tests.support import MUST_COMPLETE, MUST_COMPLETE_MS, eventually
from tests.support.lti_launch_platform import LEARNER, LaunchSpec, LtiTestPlatform
from userland.local.ports import free_port
from userland.platform.clients.kube import TEMPLATES, KubeClient, Resource
from userland.platform.model import naming
from userland.platform.model.settings import Settings
from userland.proxy.app import RUNNER_KWARGS, create_app

LTI_REGISTRATIONS = Resource(naming.GROUP, naming.VERSION, "ltiregistrations", "LtiRegistration")


@dataclass
class Lms:
    platform: LtiTestPlatform
    public_url: str
    port: int

    def course_page(self, launch_id: str, *, storage: bool) -> str:
        return f"{self.platform.url}/storage?launch={launch_id}&storage={'1' if storage else '0'}"

    def origin(self, login: str) -> str:
        return f"http://{login}.{TEMPLATE_HOST}:{self.port}"


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
        body = template_body(TEMPLATE, displayName="Python IDE", routing={"host": TEMPLATE_HOST})
        body["metadata"]["annotations"] = {naming.ANNOTATION_LTI_CONTEXTS: "lms:course-1"}
        await kube.create(TEMPLATES, namespace, body)
        env = await _serve(demo_app("alice"))
        servers.append(env)
        await _environment(kube, namespace, "alice", f"http://127.0.0.1:{env.port}")
        await kube.create(
            LTI_REGISTRATIONS,
            namespace,
            {
                "apiVersion": naming.API_VERSION,
                "kind": "LtiRegistration",
                "metadata": {"name": "lms"},
                "spec": platform.spec(),
            },
        )
        settings = Settings(
            namespaces=(namespace,),
            redis_url=db_url,
            identity_secret=IDENTITY_SECRET,
            public_url=public_url,
            web_url="http://127.0.0.1:9",
            upstream_mode="local",
            cookie_secure=False,
            session_ttl_seconds=3600,
            lti_namespace=namespace,
        )
        gateway = await _serve(
            create_app(settings, kube=kube),
            port,
            **{k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"},
        )
        servers.append(gateway)

        async def ready() -> bool:
            obj = await kube.get(LTI_REGISTRATIONS, namespace, "lms")
            conditions = (obj.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        await eventually(ready, timeout=MUST_COMPLETE)
        yield Lms(platform, public_url, port)
    finally:
        for server in reversed(servers):
            await server.close()
        await platform.close()
        await client.aclose()


async def expect_alices_environment(page: Page, lms: Lms) -> None:
    await page.wait_for_url(lms.origin("alice") + "/**", timeout=MUST_COMPLETE_MS)
    await expect(page.locator("#x-user")).to_have_text("alice", timeout=MUST_COMPLETE_MS)
    await expect(page.locator("#owner")).to_have_text("alice")


def alice(lms: Lms) -> str:
    return lms.platform.add_launch(
        LaunchSpec(user_id="u-alice", roles=[LEARNER], email="alice@uni.example.edu", context_id="course-1")
    )


async def test_framed_with_cookies_blocked_and_no_platform_storage_opens_a_new_window(
    framing_browser: Browser, lms: Lms, tmp_path: Path
) -> None:
    context = await framing_browser.new_context()
    page = await context.new_page()
    await page.goto(lms.course_page(alice(lms), storage=False))
    frame = page.frame_locator("#tool")
    # The iframe's cookie never came back (third-party cookies are blocked here): the launch
    # cannot tell this browser started it, so it offers the sign-in in a window of its own.
    restart = frame.get_by_role("link", name="Open Userland in a new window")
    await expect(restart).to_be_visible(timeout=MUST_COMPLETE_MS)
    await expect(frame.get_by_text("does not let Userland sign you in inside")).to_be_visible()
    await page.screenshot(path=tmp_path / "lti-framed-new-window.png", full_page=True)
    async with context.expect_page(timeout=MUST_COMPLETE_MS) as opened:
        await restart.click()
    window = await opened.value
    await expect_alices_environment(window, lms)
    await context.close()


async def test_framed_with_platform_storage_proves_the_browser_without_cookies(
    framing_browser: Browser, lms: Lms, tmp_path: Path
) -> None:
    context = await framing_browser.new_context()
    page = await context.new_page()
    await page.goto(lms.course_page(alice(lms), storage=True))
    frame = page.frame_locator("#tool")
    open_link = frame.get_by_role("link", name="Open Userland")
    await expect(open_link).to_be_visible(timeout=MUST_COMPLETE_MS)
    href = await open_link.get_attribute("href")
    assert href is not None and "/lti/continue?ticket=" in href and "&proof=" in href
    async with context.expect_page(timeout=MUST_COMPLETE_MS) as opened:
        await open_link.click()
    window = await opened.value
    await expect_alices_environment(window, lms)
    await expect(frame.get_by_text("Userland opened in a new window")).to_be_visible()
    await page.screenshot(path=tmp_path / "lti-framed-opened.png", full_page=True)
    await context.close()


async def test_a_launch_link_opened_directly_lands_without_a_click(browser: Browser, lms: Lms) -> None:
    """Not framed (the LMS opens the tool in a new window): straight to the environment."""
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(lms.platform.login_initiation_url(alice(lms)))
    await expect_alices_environment(page, lms)
    await context.close()
