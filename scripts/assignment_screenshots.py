"""Screenshots of the assignment pages, for the README: `python scripts/assignment_screenshots.py [OUT]`.

Starts `userland local` (what `make run` starts, with its example assignment `welcome` from the
starter repository), lets alice work (an edit of a file the teacher then updates: a conflict),
hands out a second commit, collects, grades and returns feedback, then drives Debian's Chromium
through the pages a teacher and a student see, and writes PNGs to docs/screenshots/ (or OUT).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from playwright.async_api import Page, async_playwright  # noqa: E402

from tests.support.real_apps import Local, sign_in_to_the_platform, started_local  # noqa: E402
from userland.local.gitserver import make_repository  # noqa: E402
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient  # noqa: E402
from userland.platform.model import naming  # noqa: E402
from userland.platform.model.objects import rfc3339  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
NS, NAME = "classroom", "welcome"


async def until(check: object, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(1)
    raise SystemExit("timed out")


async def status(kube: KubeClient) -> dict[str, object]:
    return (await kube.get(ASSIGNMENTS, NS, NAME)).get("status") or {}


async def prepare(kube: KubeClient, local: Local) -> None:
    async def handed() -> bool:
        return (await status(kube)).get("handedOut") == "4/4"
    await until(handed)
    folder = local.volume("jupyterlab", "alice") / "assignments" / "welcome"
    (folder / "hello.py").write_text('name = "Alice"\nprint(f"Hello, {name}!")\n')
    (folder / "answer.md").write_text("# My answer\n\nThe mean of y is 5.\n")
    commit = make_repository(local.state_dir / "git", "starter", {
        "hello.py": '"""Make this print your own name, then run it: python3 hello.py"""\n\nname = "world"\n'
                    'print(f"Hello, {name}!")  # updated: an f-string\n',
        "data/more.csv": "x,y\n5,10\n"}, message="An update")
    await kube.merge_patch(ASSIGNMENTS, NS, NAME, {"metadata": {"annotations": {
        naming.ANNOTATION_HANDOUT_AT: rfc3339()}}})

    async def second() -> bool:
        students: list[dict[str, str]] = (await status(kube)).get("students") or []  # type: ignore[assignment]
        return all(s.get("commit") == commit[:12] for s in students)
    await until(second)
    await kube.merge_patch(ASSIGNMENTS, NS, NAME, {
        "metadata": {"annotations": {naming.ANNOTATION_COLLECT_NOW: rfc3339()}},
        "spec": {"due": rfc3339(time.time() + 7 * 86400),
                 "grades": {"alice": {"grade": "9/10", "comment": "Clear and correct. Try the notebook's "
                                                                  "last cell with your own data too."}},
                 "returnFeedback": True}})

    async def collected() -> bool:
        students: list[dict[str, str]] = (await status(kube)).get("students") or []  # type: ignore[assignment]
        return all(s.get("collected") and (s.get("user") != "alice" or s.get("feedbackReturnedAt"))
                   for s in students)
    await until(collected)


async def broken(kube: KubeClient, local: Local) -> None:
    """An assignment whose branch does not exist (issue 24: every student says so)."""
    url = (await kube.get(ASSIGNMENTS, NS, NAME))["spec"]["source"]["url"]
    await kube.create(ASSIGNMENTS, NS, {
        "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": "week3"},
        "spec": {"title": "Week 3: Loops", "templates": ["jupyterlab"], "path": "week3",
                 "source": {"url": url, "ref": "week-3"}}})

    async def failed() -> bool:
        students = (await kube.get(ASSIGNMENTS, NS, "week3")).get("status", {}).get("students") or []
        return bool(students) and all(s.get("state") == "Failed" for s in students)
    await until(failed)


async def past_due_form(page: Page, local: Local) -> None:
    """The form, asking about a due date in the past."""
    url = f"{local.public}/courses/{NS}/assignments/new"
    await page.goto(url)
    await page.fill("#title", "Week 0: catch-up")
    await page.get_by_label("JupyterLab").check()
    await page.fill("#url", local_repository(local))
    await page.fill("#path", "catch-up")
    await page.fill("#due", "2020-01-01T09:00")
    await page.get_by_role("button", name="Create and hand out").click()
    await page.locator("#form-error").wait_for()
    await page.locator("#collect_past").scroll_into_view_if_needed()


def local_repository(local: Local) -> str:
    return next(line.split()[1] for line in local.lines if line.strip().startswith("Git "))


async def shoot(page: Page, out: Path, name: str) -> None:
    await page.wait_for_timeout(400)
    await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
    print(f"wrote {out / name}.png")


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, before anything runs)
    with tempfile.TemporaryDirectory(prefix="userland-shots-") as tmp:
        async with started_local(Path(tmp), students="alice,bob") as local:
            async with await KubeClient.connect(str(local.state_dir / "kubeconfig")) as kube:
                await prepare(kube, local)
                await broken(kube, local)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                try:
                    teacher = await browser.new_context(viewport={"width": 1280, "height": 900},
                                                        timezone_id="Europe/Berlin")
                    page = await sign_in_to_the_platform(teacher, f"{local.public}/courses/{NS}/assignments",
                                                         "teacher")
                    await shoot(page, out, "assignments")
                    await page.goto(f"{local.public}/courses/{NS}/assignments/{NAME}")
                    await shoot(page, out, "assignment")
                    await page.goto(f"{local.public}/courses/{NS}/assignments/{NAME}/students/alice")
                    await shoot(page, out, "assignment-student")
                    await page.goto(f"{local.public}/courses/{NS}/assignments/new")
                    await shoot(page, out, "assignment-form")
                    await past_due_form(page, local)
                    await shoot(page, out, "assignment-form-past-due")
                    await page.goto(f"{local.public}/courses/{NS}/assignments/week3")
                    await shoot(page, out, "assignment-broken-repository")
                    alice = await browser.new_context(viewport={"width": 1280, "height": 900},
                                                      timezone_id="Europe/Berlin")
                    page = await sign_in_to_the_platform(alice, f"{local.public}/me", "alice")
                    await shoot(page, out, "me-assignments")
                    phone = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
                    page = await sign_in_to_the_platform(phone, f"{local.public}/me", "alice")
                    await shoot(page, out, "me-assignments-phone")
                finally:
                    with contextlib.suppress(Exception):
                        await browser.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "screenshots"))
