"""Restarting a class in a real browser: "select all" on a dashboard of two pages, Restart,
"Apply to selected": a confirmation naming all of them (not only the 50 on the page) before
anything restarts; confirming restarts every one. See conftest.py for what runs for real."""

from __future__ import annotations

import asyncio

from playwright.async_api import Browser, expect

from tests.browser.conftest import Platform
from tests.web.support import add_userland, make_course
from userland.platform.clients.kube import USERLANDS, KubeClient


async def _restarted(kube: KubeClient, namespace: str) -> int:
    items = (await kube.list(USERLANDS, namespace))["items"]
    return sum(1 for u in items if "userland.dev/restartedAt" in (u["metadata"].get("annotations") or {}))


async def test_select_all_restart_asks_first_naming_every_page(browser: Browser, platform: Platform,
                                                                kube: KubeClient, namespace: str) -> None:
    await make_course(kube, namespace, instructors="teacher", title="Big class")
    platform.github.add_user("teacher", 3001)
    more = [f"s{i:02d}" for i in range(50)]
    await asyncio.gather(*(add_userland(kube, namespace, login) for login in more))  # 52 with alice, bob
    context = await browser.new_context()
    page = await context.new_page()
    dashboard = f"{platform.url}/courses/{namespace}"
    try:
        await page.goto(dashboard)
        await page.get_by_role("link", name="Sign in").click()
        await page.get_by_role("button", name="Authorize as teacher").click()
        await page.wait_for_url(dashboard)
        await expect(page.locator(".pager")).to_contain_text("Page 1 of 2", timeout=15_000)
        await page.locator("#select-all").check()
        assert await page.locator("#every-page").is_checked()  # select all: every page
        await page.locator("#bulk-action").select_option("restart")
        await page.get_by_role("button", name="Apply to selected").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text(
            "Restart 52 environments of 52 students?")
        await expect(page.locator("ul.names li")).to_have_count(52)
        assert await _restarted(kube, namespace) == 0  # asking first restarted nothing
        await page.get_by_role("button", name="Restart 52 environments").click()
        await expect(page.locator("#summary")).to_contain_text("52 restarted")
        assert await _restarted(kube, namespace) == 52
    finally:
        await context.close()
