"""The teacher's assignment pages tell the truth (issue 24), in a real browser, everything real.

`userland local` (what `make run` starts, with its git server serving the starter repository at
the address its banner prints). A teacher's form says what is wrong with a repository that
cannot be reached or a branch it does not have, before anything is made; a due date in the past
is asked ("collect what they have now") and then collects what each student received, never an
empty folder, never "late"; an assignment applied with kubectl whose branch does not exist shows
every student as not handed out (not "being handed out"), and the student reads that their
teacher has been told.
"""

from __future__ import annotations

import contextlib
import io
import re
import zipfile
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support import MUST_COMPLETE, MUST_COMPLETE_MS, eventually
from tests.support.real_apps import Local, apps_installed, sign_in_to_the_platform
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient
from userland.platform.model import naming

pytestmark = pytest.mark.skipif(
    not apps_installed(), reason="the real apps are not installed: run `make local-apps` (make test does)")
NEW = "/courses/classroom/assignments/new"


async def fill(page: Page, repository: str, **fields: str) -> None:
    values = {"title": "Week 0: catch-up", "name": "catch-up", "url": repository, "ref": "main",
              "path": "catch-up", "due": "", **fields}
    for key, value in values.items():
        await page.fill(f"#{key}", value)
    await page.get_by_label("JupyterLab").check()


# `userland local` with the real apps, three refused forms, a hand-out and a collection, then a
# second assignment: under 300 s on a quiet machine, more on a loaded one.
@pytest.mark.timeout(600)
async def test_a_broken_repository_and_a_past_due_date_on_the_teachers_pages(
        browser: Browser, local: Local, tmp_path: Path) -> None:
    teacher = await browser.new_context(timezone_id="UTC", viewport={"width": 1200, "height": 900})
    alice = await browser.new_context(timezone_id="UTC")
    async with await KubeClient.connect(str(local.state_dir / "kubeconfig")) as kube:
        repository = (await kube.get(ASSIGNMENTS, "classroom", "welcome"))["spec"]["source"]["url"]
        # The banner prints the repository's address, for assignments of one's own.
        assert any(line.strip().startswith(f"Git         {repository}") for line in local.lines), local.lines
        try:
            page = await sign_in_to_the_platform(teacher, local.public + NEW, "teacher")
            error = page.locator("#form-error")

            # An address the store may not fetch from (USERLAND_STORE_GIT_URLS: make run's git
            # server and github.com), a repository that is not there, then a branch it does not
            # have: said in the form.
            await fill(page, "http://127.0.0.1:1/nothing-here.git")
            await page.get_by_role("button", name="Create and hand out").click()
            await expect(error).to_contain_text("USERLAND_STORE_GIT_URLS", timeout=MUST_COMPLETE_MS)
            await fill(page, repository.rsplit("/", 1)[0] + "/nothing-here.git")
            await page.get_by_role("button", name="Create and hand out").click()
            await expect(error).to_contain_text(
                "is not reachable from the platform or is not a git repository", timeout=MUST_COMPLETE_MS)
            await fill(page, repository, ref="no-such-branch")
            await page.get_by_role("button", name="Create and hand out").click()
            await expect(error).to_contain_text("The repository has no branch or tag 'no-such-branch'.",
                                                timeout=MUST_COMPLETE_MS)
            await expect(error).to_contain_text("Check the branch or tag.")
            await page.screenshot(path=tmp_path / "assignment-form-branch.png", full_page=True)
            assert (await kube.list(ASSIGNMENTS, "classroom"))["items"][0]["metadata"]["name"] == "welcome"
            assert len((await kube.list(ASSIGNMENTS, "classroom"))["items"]) == 1

            # A due date in the past: asked, then meant.
            await fill(page, repository, due="2020-01-01T09:00")
            await page.get_by_role("button", name="Create and hand out").click()
            await expect(error).to_contain_text("The due date 2020-01-01 09:00 is in the past")
            await page.screenshot(path=tmp_path / "assignment-form-past-due.png", full_page=True)
            await page.get_by_label("Collect what they have now").check()
            await page.get_by_role("button", name="Create and hand out").click()
            await page.wait_for_url(re.compile(r"/courses/classroom/assignments/catch-up$"))
            await expect(page.locator("#collected")).to_have_text("2/2", timeout=MUST_COMPLETE_MS)
            rows = page.locator("#assignment-rows tr")
            await expect(rows).to_have_count(2)
            for index in range(2):
                row = rows.nth(index)
                await expect(row.locator(".badge", has_text="Handed out")).to_be_visible()
                await expect(row.locator(".badge", has_text="at once")).to_be_visible()
                await expect(row.locator("td.collected")).to_contain_text(re.compile(r"\d+ files"))
                await expect(row.locator("td.collected")).not_to_contain_text("empty")
                await expect(row.locator("td.collected")).not_to_contain_text("late")
            await expect(page.locator("#phase")).to_have_text("Collected")
            await page.screenshot(path=tmp_path / "assignment-past-due.png", full_page=True)
            # Each copy holds what the student received (the starter files), not an empty folder.
            response = await page.request.get(f"{local.public}/courses/classroom/assignments/catch-up/"
                                              "collected.zip")
            with zipfile.ZipFile(io.BytesIO(await response.body())) as archive:
                assert "alice/hello.py" in archive.namelist() and "bob/hello.py" in archive.namelist()
            me = await sign_in_to_the_platform(alice, f"{local.public}/me", "alice")
            receipt = me.locator("li.assignment", has_text="Week 0: catch-up").locator("p.receipt")
            await expect(receipt).to_contain_text("Your work was collected at")
            await expect(receipt).not_to_contain_text("deadline")

            # An Assignment applied with kubectl whose branch does not exist: nobody is "being
            # handed out"; each student reads that their teacher has been told.
            await kube.create(ASSIGNMENTS, "classroom", {
                "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": "broken"},
                "spec": {"title": "Week 3: Loops", "templates": ["jupyterlab"], "path": "week3",
                         "source": {"url": repository, "ref": "no-such-branch"}}})
            await page.goto(f"{local.public}/courses/classroom/assignments/broken")
            await expect(page.locator("#phase")).to_have_text("Needs attention", timeout=MUST_COMPLETE_MS)
            await expect(page.locator("#assignment-rows .badge", has_text="Could not be handed out")
                         ).to_have_count(2, timeout=MUST_COMPLETE_MS)
            body = await page.locator("main").inner_text()
            assert "Being handed out" not in body and "spec.source" not in body
            await expect(page.locator("#message")).to_contain_text("branch or tag")
            await page.screenshot(path=tmp_path / "assignment-broken-repository.png", full_page=True)

            async def told() -> bool:
                await me.goto(f"{local.public}/me")
                item = me.locator("li.assignment", has_text="Week 3: Loops")
                return "Not available yet: your teacher has been told" in await item.inner_text()
            assert await eventually(told, timeout=MUST_COMPLETE, interval=2)
            await me.screenshot(path=tmp_path / "me-not-available.png", full_page=True)
        finally:
            for context in (teacher, alice):
                with contextlib.suppress(Exception):
                    await context.close()
