"""An instructor's class dashboard in a real browser, through the real gateway: sign in with
(fake) GitHub, open the course, and watch a student's environment go Starting -> Ready without
reloading (the server-sent event stream and static/dashboard.js), keeping a ticked checkbox.
See conftest.py for what runs for real; the test writes the Userland status as the operator would.
"""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.browser.conftest import Platform
from tests.web.support import add_userland, make_course, set_phase
from userland.platform.clients.kube import KubeClient


async def test_instructor_sees_a_row_turn_ready_live(browser: Browser, platform: Platform, kube: KubeClient,
                                                     namespace: str) -> None:
    await make_course(kube, namespace, instructors="teacher", title="Live class")
    platform.github.add_user("teacher", 3001)
    await set_phase(kube, namespace, "ide-bob", "Starting", message="waiting for the environment")
    context = await browser.new_context()
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    dashboard = f"{platform.url}/courses/{namespace}"
    try:
        await page.goto(dashboard)
        await expect(page.get_by_role("heading", level=1)).to_have_text("Please sign in")
        await page.get_by_role("link", name="Sign in").click()
        await page.get_by_role("button", name="Authorize as teacher").click()
        # Signed in, the browser is back on the page it asked for (not on the start page).
        await page.wait_for_url(dashboard)
        await expect(page.get_by_role("heading", level=1)).to_have_text("Live class")
        bob = page.locator("#student-bob")
        await expect(bob.locator(".badge")).to_have_text("Starting")
        await expect(page.locator("#student-alice .badge")).to_have_text("Ready")
        await expect(page.locator("#live")).to_be_visible()  # the stream is open
        await page.locator("#select-ide-bob").check()
        await page.locator("#select-ide-alice").focus()
        await page.evaluate("window.notReloaded = true")

        await set_phase(kube, namespace, "ide-bob", "Ready")
        await expect(bob.locator(".badge")).to_have_text("Ready", timeout=3000)
        await expect(bob.locator(".reason")).to_have_text("ready to use")
        assert await page.evaluate("window.notReloaded === true"), "the page was reloaded"
        assert await page.locator("#select-ide-bob").is_checked()  # the ticked box survived
        assert await page.evaluate("document.activeElement.id") == "select-ide-alice"
        await expect(page.locator("#counts")).to_contain_text("2 Ready")
        await expect(page.locator("#showing")).to_have_text("Showing 2 of 2 environments (2 of 2 students).")
        # A student added while the page is open appears, and every count follows.
        await add_userland(kube, namespace, "carol")
        await expect(page.locator("#student-carol")).to_be_visible(timeout=3000)
        await expect(page.locator("#showing")).to_have_text("Showing 3 of 3 environments (3 of 3 students).")
        await expect(page.locator("#counts")).to_contain_text("3 students")
        assert not [e for e in errors if "Content Security Policy" in e], errors
    finally:
        await context.close()
