"""The real apps in `make run`, in a real browser, as two students would use them.

Real: everything. `userland local` (what `make run` starts) with its control plane, operator,
gateway, web UI and local runner runs the Templates shipped in deploy/ unchanged: VS Code
(code-server), JupyterLab and MariaDB + phpMyAdmin, installed by `make local-apps` (which
`make test` runs first). Debian's Chromium, driven by Playwright, signs in with the
development login and uses each app through the gateway at the student's own origin:
JupyterLab computes 6*7 in a notebook (its kernel over a WebSocket), code-server's terminal
(a WebSocket too) writes a file, phpMyAdmin is logged in to the student's own MariaDB. Then
bob, in another browser context, sees none of alice's files or databases, and alice's origins
refuse him.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.real_apps import (
    Local,
    apps_installed,
    open_terminal,
    sign_in,
    type_in_terminal,
    wait_until_answering,
)
from userland.local import mountns
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient

pytestmark = pytest.mark.skipif(
    not apps_installed(), reason="the real apps are not installed: run `make local-apps` (make test does)")

async def jupyter_computes(page: Page, local: Local, student: str) -> None:
    await wait_until_answering(page, local.template("jupyterlab"), f"{student}.jupyterlab.localhost")
    await page.locator('.jp-LauncherCard[title*="Python 3"]').first.click(timeout=90_000)
    idle = page.get_by_role("button", name=re.compile(r"Python 3 \(ipykernel\) \| Idle"))
    await expect(idle).to_be_visible(timeout=60_000)  # the kernel answers over its WebSocket
    await page.locator(".jp-Cell .cm-content:visible").first.click()
    await page.keyboard.type("6*7")
    await page.keyboard.press("Shift+Enter")
    await expect(page.locator(".jp-OutputArea-output:visible").first).to_have_text("42", timeout=30_000)
    await page.keyboard.press("Control+s")
    await expect(page.get_by_role("listitem", name=re.compile("Untitled.ipynb"))).to_be_visible()


async def vscode_terminal_writes(page: Page, local: Local, student: str, text: str) -> None:
    await wait_until_answering(page, local.template("vscode"), f"{student}.vscode.localhost")
    await page.locator(".monaco-workbench").wait_for(timeout=90_000)
    if mountns.available():
        # The student's home as in a cluster (the Template's /home/coder), not this machine's
        # path of the volume (`?folder=/…/.run/environments/volumes/…`, issue 16).
        assert page.url.endswith("/?folder=/home/coder"), page.url
        await expect(page.locator(".explorer-folders-view, .pane-header").filter(has_text="CODER").first
                     ).to_be_visible(timeout=30_000)
    await open_terminal(page)
    proof = local.volume("vscode", student) / "proof.txt"
    # Written whole: `>` makes the file empty first, then the shell writes the line.
    await type_in_terminal(page, f"echo {text} > proof.txt",
                           lambda: proof.is_file() and proof.read_text().endswith("\n"))
    # The file appears in the explorer, and on the student's own volume.
    await expect(page.get_by_role("treeitem", name=re.compile("proof.txt"))).to_be_visible(timeout=30_000)


async def phpmyadmin_databases(page: Page, local: Local, student: str) -> str:
    await wait_until_answering(page, local.template("mariadb"), f"{student}.mariadb.localhost")
    tree = page.locator("#pma_navigation_tree")
    await expect(tree).to_contain_text(student, timeout=60_000)
    return await tree.inner_text()


@pytest.mark.slow
async def test_two_students_use_the_real_apps_and_never_see_each_others(
        browser: Browser, local: Local) -> None:
    alice = await browser.new_context()
    bob = await browser.new_context()
    try:
        page = await sign_in(alice, local.template("jupyterlab"), "alice")
        await jupyter_computes(page, local, "alice")
        await vscode_terminal_writes(page, local, "alice", "alice-was-here-$((6*7))")
        assert (local.volume("vscode", "alice") / "proof.txt").read_text() == "alice-was-here-42\n"
        databases = await phpmyadmin_databases(page, local, "alice")
        assert "bob" not in databases

        page = await sign_in(bob, local.template("vscode"), "bob")
        await page.wait_for_url(re.compile(r"^http://bob\.vscode\.localhost:\d+/"), timeout=60_000)
        await page.locator(".monaco-workbench").wait_for(timeout=90_000)
        explorer = page.locator(".explorer-folders-view")
        await expect(explorer).to_contain_text(".config", timeout=30_000)  # his own folder, listed
        assert "proof.txt" not in await explorer.inner_text()
        # His first VS Code opens on its Welcome tab: without code-server's "Deploy code-server
        # for your team" advert and without a "collects usage data" notice.
        welcome = page.locator(".gettingStartedContainer")
        await expect(welcome).to_be_visible(timeout=60_000)
        await expect(welcome).to_contain_text("Start", timeout=30_000)  # its content is drawn
        shown = await welcome.inner_text()
        assert "Deploy code-server" not in shown and "usage data" not in shown, shown
        databases = await phpmyadmin_databases(page, local, "bob")
        assert "alice" not in databases
        await wait_until_answering(page, local.template("jupyterlab"), "bob.jupyterlab.localhost")
        files = page.get_by_role("region", name="File Browser Section")
        await expect(files).to_be_visible(timeout=60_000)
        assert "Untitled.ipynb" not in await files.inner_text()
        # Alice's own addresses refuse him, whatever he sends.
        for template in ("vscode", "jupyterlab", "mariadb"):
            response = await page.goto(local.origin(template, "alice"))
            assert response is not None and response.status == 403
    finally:
        for context in (alice, bob):
            with contextlib.suppress(Exception):
                await context.close()


async def userland_phase(kube: KubeClient, name: str) -> str:
    return str(((await kube.get(USERLANDS, "classroom", name)).get("status") or {}).get("phase") or "")


@pytest.mark.slow
async def test_open_tabs_sleep_unless_their_student_works(browser: Browser, local: Local) -> None:
    """The shipped Templates' activity rules with a 1-minute idle timeout: alice leaves VS Code
    open with a terminal printing a line every second (a tab that only receives, besides VS
    Code's own keep-alives, telemetry pings and file-watch echoes: `webSocketProtocol: vscode`)
    and JupyterLab open on a notebook with its kernel (it polls, and saves its layout every
    10 s: `PUT /lab/api/workspaces*`); bob types a command every 10 s. Both of alice's
    environments sleep after their minute; bob's stays awake."""
    alice = await browser.new_context()
    bob = await browser.new_context()
    stop = asyncio.Event()
    typing: asyncio.Task[int] | None = None
    async with await KubeClient.connect(str(local.state_dir / "kubeconfig")) as kube:
        for template in ("vscode", "jupyterlab"):
            await kube.merge_patch(TEMPLATES, "classroom", template, {"spec": {"idleTimeout": "1m"}})
        try:
            pages = {}
            for login, context in (("alice", alice), ("bob", bob)):
                page = pages[login] = await sign_in(context, local.template("vscode"), login)
                await wait_until_answering(page, local.template("vscode"), f"{login}.vscode.localhost")
                await page.locator(".monaco-workbench").wait_for(timeout=90_000)
                await open_terminal(page)
                await page.locator(".xterm-helper-textarea >> visible=true").first.focus()
            await jupyter_computes(await alice.new_page(), local, "alice")  # and left open
            await pages["alice"].bring_to_front()
            await pages["alice"].locator(".xterm-helper-textarea >> visible=true").first.focus()
            await pages["alice"].keyboard.type("while true; do date; sleep 1; done\n")
            started = asyncio.get_running_loop().time()

            async def bob_types() -> int:
                typed = 0
                while not stop.is_set():
                    await pages["bob"].keyboard.type(f"echo still here {typed}\n")
                    typed += 1
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 10)
                return typed

            typing = asyncio.create_task(bob_types())
            deadline = started + 150
            for environment in ("vscode-alice", "jupyterlab-alice"):
                while await userland_phase(kube, environment) != "Idle":
                    assert asyncio.get_running_loop().time() < deadline, f"an open tab kept {environment} up"
                    await asyncio.sleep(1)
            slept_after = asyncio.get_running_loop().time() - started
            assert slept_after >= 55, slept_after  # not before its minute was up
            await asyncio.sleep(max(0.0, 75 - slept_after))  # bob: well past a minute of typing
            assert await userland_phase(kube, "vscode-bob") == "Ready"
            stop.set()
            assert await typing >= 7
            print(f"\nalice's open VS Code and JupyterLab slept within {slept_after:.0f} s; bob's is up")
        finally:
            stop.set()
            if typing is not None and not typing.done():
                typing.cancel()
            for context in (alice, bob):
                with contextlib.suppress(Exception):
                    await context.close()
