"""An assignment from start to receipt, in a real browser, with everything real.

`userland local` (what `make run` starts: control plane, operator, gateway, web UI, local
runner, the assignment store, and a git server with the project's starter repository) and the
real apps. A teacher in New York creates an assignment in the web UI's form, due next week
(the form reads the time in her own zone); alice opens it in JupyterLab and edits a file there,
and in VS Code, where she edits another from the terminal; then the teacher moves the deadline
to a few seconds from now, and after it her /me page shows her receipts, and the teacher's zip
holds exactly her edits, file by file. (The deadline is moved once the edits are made, not set
minutes ahead: how long the edits take depends on the machine, a deadline does not.)
"""

from __future__ import annotations

import contextlib
import io
import re
import zipfile
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support import MUST_COMPLETE, MUST_COMPLETE_MS, eventually
from tests.support.real_apps import (
    Local,
    apps_installed,
    open_terminal,
    sign_in,
    sign_in_to_the_platform,
    type_in_terminal,
    wait_until_answering,
)
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient

pytestmark = pytest.mark.skipif(
    not apps_installed(), reason="the real apps are not installed: run `make local-apps` (make test does)")
ZONE = "America/New_York"


def due_moment(ahead: timedelta = timedelta(days=7)) -> datetime:
    """A whole minute `ahead` (the form takes minutes, not seconds)."""
    return (datetime.now(UTC) + ahead).replace(second=0, microsecond=0)


async def edit_in_jupyterlab(page: Page, local: Local) -> None:
    await wait_until_answering(page, local.template("jupyterlab"), "alice.jupyterlab.localhost")
    await page.goto(local.origin("jupyterlab", "alice") + "lab/tree/week2/answer.md")
    editor = page.locator(".jp-FileEditor .cm-content:visible").first
    await editor.click(timeout=90_000)
    await page.keyboard.press("Control+End")
    await page.keyboard.type("The mean is 5.")
    await page.keyboard.press("Control+s")


async def edit_in_vscode(page: Page, local: Local) -> None:
    await wait_until_answering(page, local.template("vscode"), "alice.vscode.localhost")
    await page.locator(".monaco-workbench").wait_for(timeout=90_000)
    await expect(page.get_by_role("treeitem", name=re.compile("week2"))).to_be_visible(timeout=60_000)
    await open_terminal(page)
    hello = local.volume("vscode", "alice") / "week2" / "hello.py"
    line = "grep -q \"^name = 'alice'\" week2/hello.py || echo \"name = 'alice'\" >> week2/hello.py"
    await type_in_terminal(page, line, lambda: "name = 'alice'" in hello.read_text())


@pytest.mark.slow
# `userland local` with the real apps, two apps opened and edited in, a hand-out and a collection:
# about 3 minutes on a quiet machine, and more than the 300 s every test gets on a loaded one.
@pytest.mark.timeout(600)
async def test_a_teacher_hands_out_alice_works_in_both_apps_and_sees_her_receipt(
        browser: Browser, local: Local) -> None:
    teacher = await browser.new_context(timezone_id=ZONE)
    alice = await browser.new_context(timezone_id="Asia/Tokyo", locale="en-GB")  # 24-hour times
    async with await KubeClient.connect(str(local.state_dir / "kubeconfig")) as kube:
        welcome = await kube.get(ASSIGNMENTS, "classroom", "welcome")
        repository = welcome["spec"]["source"]["url"]  # the starter repository make run serves
        try:
            page = await sign_in_to_the_platform(teacher, f"{local.public}/courses/classroom/assignments/new",
                                                 "teacher")
            await expect(page.get_by_role("heading", name="New assignment")).to_be_visible()
            await expect(page.locator("#zone-note")).to_have_text(f"Times are in your time zone ({ZONE}).")
            due = due_moment()
            await page.fill("#title", "Week 2: Points")
            await page.fill("#name", "week2")
            await page.get_by_label("JupyterLab").check()
            await page.get_by_label("VS Code").check()
            await page.fill("#url", repository)
            await page.fill("#path", "week2")
            await page.fill("#due", due.astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%dT%H:%M"))
            await page.get_by_role("button", name="Create and hand out").click()
            await page.wait_for_url(re.compile(r"/courses/classroom/assignments/week2$"))
            created = await kube.get(ASSIGNMENTS, "classroom", "week2")
            assert created["spec"]["due"] == due.strftime("%Y-%m-%dT%H:%M:%SZ")  # her 12:34 in New York
            # The live table fills in as the operator hands out.
            await expect(page.locator("#handed-out")).to_have_text("4/4", timeout=MUST_COMPLETE_MS)

            work = await sign_in(alice, local.template("jupyterlab"), "alice")
            await edit_in_jupyterlab(work, local)
            answer = local.volume("jupyterlab", "alice") / "week2" / "answer.md"
            await eventually(lambda: "The mean is 5." in answer.read_text(), timeout=MUST_COMPLETE)
            await edit_in_vscode(work, local)
            hello = local.volume("vscode", "alice") / "week2" / "hello.py"
            await eventually(lambda: "name = 'alice'" in hello.read_text(), timeout=MUST_COMPLETE)
            # The teacher moves the deadline to a few seconds from now (kubectl, as the docs show).
            due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
            await kube.merge_patch(ASSIGNMENTS, "classroom", "week2", {"spec": {
                "due": due.strftime("%Y-%m-%dT%H:%M:%SZ")}})

            # After the deadline: her receipts on /me, one per environment.
            me = await alice.new_page()

            async def receipts() -> int:
                await me.goto(f"{local.public}/me")
                return await me.locator("p.receipt").count() if datetime.now(UTC) > due else 0
            until_due = (due - datetime.now(UTC)).total_seconds()
            assert await eventually(receipts, timeout=until_due + MUST_COMPLETE, interval=3) == 2
            text = await me.locator("p.receipt").first.inner_text()
            assert re.match(r"Your work was collected at .+, \d+ files, .+, receipt [0-9a-f]{8}\.",
                            text), text
            # In her own time zone, the moment in UTC kept as the time's title.
            taken = me.locator("p.receipt time").first
            moment = datetime.fromisoformat((await taken.get_attribute("datetime") or "").replace("Z",
                                                                                                   "+00:00"))
            assert f"{moment.astimezone(ZoneInfo('Asia/Tokyo')):%H:%M}" in await taken.inner_text()
            assert (await taken.get_attribute("title") or "").endswith(f"{moment:%H:%M} UTC")
            await expect(page.locator("#collected")).to_have_text("4/4", timeout=MUST_COMPLETE_MS)

            # The teacher's zip: exactly what alice had at the deadline, in each environment.
            zip_url = f"{local.public}/courses/classroom/assignments/week2/collected.zip"
            response = await page.request.get(zip_url)
            assert response.status == 200
            with zipfile.ZipFile(io.BytesIO(await response.body())) as archive:
                assert "The mean is 5." in archive.read("alice/jupyterlab/answer.md").decode()
                assert "name = 'alice'" in archive.read("alice/vscode/hello.py").decode()
                assert "name = 'alice'" not in archive.read("bob/vscode/hello.py").decode()
                assert not [n for n in archive.namelist() if "userland-handout" in n]
        finally:
            for context in (teacher, alice):
                with contextlib.suppress(Exception):
                    await context.close()
