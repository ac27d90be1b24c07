"""An assignment from start to receipt, in a real browser, with everything real.

`userland local` (what `make run` starts: control plane, operator, gateway, web UI, local
runner, the assignment store, and a git server with the project's starter repository) and the
real apps. A teacher in New York creates an assignment in the web UI's form, due a few minutes
ahead (the form reads the time in her own zone); alice opens it in JupyterLab and edits a file
there, and in VS Code, where she edits another from the terminal; after the deadline her /me
page shows her receipts, and the teacher's zip holds exactly her edits, file by file.
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

from tests.support import eventually
from tests.support.real_apps import (
    Local,
    apps_installed,
    open_terminal,
    sign_in,
    sign_in_to_the_platform,
    wait_until_answering,
)
from userland.platform.kube import ASSIGNMENTS, KubeClient

pytestmark = pytest.mark.skipif(
    not apps_installed(), reason="the real apps are not installed: run `make local-apps` (make test does)")
ZONE = "America/New_York"


def due_moment(ahead: float = 150) -> datetime:
    """The next whole minute at least `ahead` seconds away (the form takes minutes)."""
    moment = datetime.now(UTC) + timedelta(seconds=ahead + 60)
    return moment.replace(second=0, microsecond=0)


async def students_state(kube: KubeClient) -> dict[str, str]:
    obj = await kube.get(ASSIGNMENTS, "classroom", "week2")
    return {f"{e['template']}/{e['user']}": e.get("state", "")
            for e in (obj.get("status") or {}).get("students") or []}


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
    await page.locator(".xterm-helper-textarea >> visible=true").first.focus()
    await page.keyboard.type("echo \"name = 'alice'\" >> week2/hello.py\n")


@pytest.mark.slow
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
            await expect(page.locator("#handed-out")).to_have_text("4/4", timeout=120_000)

            work = await sign_in(alice, local.template("jupyterlab"), "alice")
            await edit_in_jupyterlab(work, local)
            answer = local.volume("jupyterlab", "alice") / "week2" / "answer.md"
            await eventually(lambda: "The mean is 5." in answer.read_text(), timeout=30)
            await edit_in_vscode(work, local)
            hello = local.volume("vscode", "alice") / "week2" / "hello.py"
            await eventually(lambda: "name = 'alice'" in hello.read_text(), timeout=30)
            assert datetime.now(UTC) < due, "the edits took until the deadline: the test needs more time"

            # After the deadline: her receipts on /me, one per environment.
            me = await alice.new_page()

            async def receipts() -> int:
                await me.goto(f"{local.public}/me")
                return await me.locator("p.receipt").count() if datetime.now(UTC) > due else 0
            assert await eventually(receipts, timeout=(due - datetime.now(UTC)).total_seconds() + 120,
                                    interval=3) == 2
            text = await me.locator("p.receipt").first.inner_text()
            assert re.match(r"Your work was collected at .+, \d+ files, .+, receipt [0-9a-f]{8}\.",
                            text), text
            # In her own time zone, the moment in UTC kept as the time's title.
            taken = me.locator("p.receipt time").first
            moment = datetime.fromisoformat((await taken.get_attribute("datetime") or "").replace("Z",
                                                                                                   "+00:00"))
            assert f"{moment.astimezone(ZoneInfo('Asia/Tokyo')):%H:%M}" in await taken.inner_text()
            assert (await taken.get_attribute("title") or "").endswith(f"{moment:%H:%M} UTC")
            await expect(page.locator("#collected")).to_have_text("4/4", timeout=60_000)

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
