"""The waking page in a real browser: Alice opens her sleeping environment at a deep address,
sees the waking page with the steps her Pod reaches (written here as the operator writes them),
and, without touching anything, ends up in her environment at the address she asked for; the
visit was written as her use (what wakes it). See conftest.py for what runs for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import Browser, expect

from tests.browser.conftest import TEMPLATE, Platform
from tests.browser.test_student_flow import at, expect_environment_of, sign_in
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.model import naming

NAME = naming.userland_name(TEMPLATE, "alice")


async def set_status(kube: KubeClient, namespace: str, phase: str, progress: list[str], ready: bool) -> None:
    status: dict[str, Any] = {"phase": phase, "progress": progress, "conditions": [{
        "type": "Ready", "status": "True" if ready else "False",
        "reason": "Available" if ready else ("Idle" if phase == "Idle" else "Waking"),
        "message": "set by the test", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    await kube.merge_patch(USERLANDS, namespace, NAME, {"status": status}, subresource="status")


async def test_the_waking_page_follows_along_and_lands_in_the_environment(
        browser: Browser, platform: Platform, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    alice_origin = platform.origin("alice")
    await sign_in(page, platform, "alice", platform.template_url, alice_origin + "/")
    await expect_environment_of(page, "alice")

    await set_status(kube, namespace, "Idle", [], ready=False)
    deep = alice_origin + "/notebooks/week3.py"
    await page.goto(deep)
    await expect(page.get_by_role("heading", level=1)).to_have_text("Waking up your Python IDE")
    await expect(page.locator("li.now")).to_have_text("Finding a place to run it")
    # Her visit is what wakes it: written on her Userland, for the operator.
    obj = await kube.get(USERLANDS, namespace, NAME)
    assert naming.ANNOTATION_LAST_ACTIVITY in (obj["metadata"].get("annotations") or {})

    await set_status(kube, namespace, "Starting", ["Scheduled", "ImagePulled"], ready=False)
    await expect(page.locator("li.now")).to_have_text("Starting it", timeout=10_000)
    await expect(page.locator("li.done")).to_have_count(2)
    await page.screenshot(path=tmp_path / "waking.png", full_page=True)

    await set_status(kube, namespace, "Ready", ["Scheduled", "ImagePulled", "ContainerStarted", "Ready"],
                     ready=True)
    # No click: the page reloads into her environment, at the address she asked for.
    await expect_environment_of(page, "alice")
    await expect(page).to_have_url(at(deep))
    await expect(page.locator("#path")).to_have_text("/notebooks/week3.py")
    await context.close()
