"""A JupyterLab tab left open after signing out (issue 16): it said "Kernel died unexpectedly".

Real: everything, as tests/browser/test_real_apps.py (`userland local` with the shipped
JupyterLab Template, Chromium). What the gateway answers the tab's own background requests on
the student's origin decides what JupyterLab does: its kernel check (`GET /api/kernels/<id>`
after the kernel's WebSocket closes) declared the kernel dead on a 401, and keeps trying on a
503. So the tab now keeps its kernel, JupyterLab's own dialogs say the student is signed out
and what to do (the JSON `message`), and signing in again in another tab brings the tab back
with the kernel's state intact.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support import MUST_COMPLETE, MUST_COMPLETE_MS
from tests.support.real_apps import Local, sign_in, wait_until_answering
from userland.proxy.pages import SIGNED_OUT_MESSAGE


async def close_dialogs(page: Page) -> None:
    dialogs = page.locator(".jp-Dialog")
    while await dialogs.count():
        await dialogs.first.get_by_role("button").last.click()
        await page.wait_for_timeout(200)


@pytest.mark.slow
# `userland local` with the real apps, then JupyterLab through a sign-out and a sign-in: each of
# its steps waits on JupyterLab's own polling, and on a loaded machine (276 s for the test's body
# alone, in the run of issue 26) they add up to more than the 300 s every test gets.
@pytest.mark.timeout(600)
async def test_a_jupyterlab_tab_left_open_after_sign_out_asks_to_sign_in_and_keeps_its_kernel(
        browser: Browser, local: Local) -> None:
    context = await browser.new_context()
    try:
        page = await sign_in(context, local.template("jupyterlab"), "alice")
        await wait_until_answering(page, local.template("jupyterlab"), "alice.jupyterlab.localhost")
        await page.locator('.jp-LauncherCard[title*="Python 3"]').first.click(timeout=MUST_COMPLETE_MS)
        kernel = page.locator(".jp-StatusBar-Widget").filter(has_text="Python 3 (ipykernel)").first
        await expect(kernel).to_contain_text("Idle", timeout=MUST_COMPLETE_MS)
        await page.locator(".jp-Cell .cm-content:visible").first.click()
        await page.keyboard.type("x = 6*7")
        await page.keyboard.press("Shift+Enter")
        await page.keyboard.press("Control+s")
        await page.get_by_role("button", name="Rename and Save").click()
        await expect(page.get_by_role("listitem", name=re.compile("Untitled.ipynb"))).to_be_visible()
        # The next cell's code is typed now: once signed out, JupyterLab's dialogs come back with
        # each failed poll and take the keys typed meanwhile (a run ran "print+ 1)").
        cell = page.locator(".jp-Cell .cm-content:visible").last
        await cell.click()
        await page.keyboard.type("print(x + 1)")
        await expect(cell).to_have_text("print(x + 1)")

        # Signed out in another tab (what a student does in a lab at the end of class).
        other = await context.new_page()
        await other.goto(local.template("jupyterlab").replace("jupyterlab.", "", 1) + "auth/logout")
        await other.get_by_role("button", name="Sign out").click()
        await other.wait_for_url(re.compile(r"^http://localhost:\d+/$"))
        await other.close()

        # The open tab notices (its kernel's connection is closed, its polls fail) ...
        await expect(page.locator(".jp-Dialog")).to_be_visible(timeout=MUST_COMPLETE_MS)
        await expect(kernel).to_contain_text("Connecting")  # ... and keeps its kernel, not "Dead"
        assert "Kernel died" not in " ".join(await page.locator(".jp-Dialog").all_inner_texts())
        # Saving says why it cannot and what to do, in JupyterLab's own dialog.
        await close_dialogs(page)
        await cell.click()
        await page.keyboard.press("End")
        await page.keyboard.type(" ")  # an edit to save (a key lost to a dialog changes nothing)
        await page.keyboard.press("Control+s")
        error = page.locator(".jp-Dialog").filter(has_text="File Save Error")
        await expect(error).to_contain_text(SIGNED_OUT_MESSAGE, timeout=MUST_COMPLETE_MS)
        assert "Kernel died" not in " ".join(await page.locator(".jp-Dialog").all_inner_texts())

        # As it says: sign in again in a new tab; this tab works again, its kernel's state kept.
        await close_dialogs(page)
        again = await context.new_page()
        await again.goto(local.origin("jupyterlab", "alice"))
        await again.get_by_label(re.compile("name", re.I)).first.fill("alice")
        await again.get_by_role("button", name=re.compile("sign in", re.I)).click()
        await again.wait_for_url(re.compile(r"^http://alice\.jupyterlab\.localhost:\d+/"),
                                 timeout=MUST_COMPLETE_MS)
        await again.close()
        # (Playwright's own call has no timeout: bounded here, so a hang says where it was.)
        await asyncio.wait_for(page.bring_to_front(), MUST_COMPLETE)
        # It reconnects by itself (JupyterLab says "Unknown" until the kernel next reports).
        await expect(kernel).not_to_contain_text("Connecting", timeout=MUST_COMPLETE_MS)
        await close_dialogs(page)
        await cell.click()
        await page.keyboard.press("Shift+Enter")
        await expect(page.locator(".jp-OutputArea-output:visible").last).to_have_text(
            "43", timeout=MUST_COMPLETE_MS)
    finally:
        await context.close()
