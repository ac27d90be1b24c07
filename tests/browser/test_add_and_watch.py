"""The instructor's first minute in a real browser, through the real gateway: sign in, add a
student with the form, go back to the class dashboard and watch the new student's environment
appear and go Starting -> Ready without reloading.

See conftest.py for what runs for real. The operator is not running here: the test writes the
new Userland's status the way the operator does (tests/web/support.py `set_phase`).
"""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.browser.conftest import TEMPLATE, Platform
from tests.web.support import make_course, set_phase
from userland.platform.clients.kube import USERLANDS, KubeClient, NotFound


async def test_instructor_adds_a_student_and_watches_the_environment_start(
        browser: Browser, platform: Platform, kube: KubeClient, namespace: str) -> None:
    await make_course(kube, namespace, instructors="teacher", title="Intro to Programming")
    platform.github.add_user("teacher", 3001)
    context = await browser.new_context()
    page = await context.new_page()
    try:
        await page.goto(f"{platform.url}/courses/{namespace}")
        await page.get_by_role("link", name="Sign in").click()
        await page.get_by_role("button", name="Authorize as teacher").click()
        await page.wait_for_url(f"{platform.url}/courses/{namespace}")  # back where it started
        await page.get_by_role("link", name="Add students").click()
        await page.get_by_label("One GitHub login").fill("Dave")
        await page.get_by_role("button", name="Add students").click()
        results = page.locator("table")
        await expect(results).to_contain_text("dave")
        await expect(results).to_contain_text("Created")

        async def created() -> bool:
            try:
                await kube.get(USERLANDS, namespace, f"{TEMPLATE}-dave")
            except NotFound:
                return False
            return True

        assert await created(), "the form did not create dave's environment"
        await page.get_by_role("link", name="Back to the course").click()
        await expect(page.locator("#student-dave")).to_be_visible()
        await expect(page.locator("#live")).to_be_visible()
        await page.evaluate("window.notReloaded = true")

        await set_phase(kube, namespace, f"{TEMPLATE}-dave", "Starting",
                        message="waiting for the environment")
        await expect(page.locator("#student-dave .badge")).to_have_text("Starting", timeout=3000)
        await set_phase(kube, namespace, f"{TEMPLATE}-dave", "Ready")
        await expect(page.locator("#student-dave .badge")).to_have_text("Ready", timeout=3000)
        assert await page.evaluate("window.notReloaded === true"), "the page was reloaded"
    finally:
        await context.close()
