"""Help in the lab with the real VS Code, in Chromium: alice asks for help, tina (assistant) joins
from the class dashboard and types in alice's VS Code terminal, alice sees tina on "my
environments" and ends it, and tina's open terminal is closed; tina, joined again and then removed from the
course's staff, is shut out; tina never reaches bob, and an instructor opens a student's
environment unasked only once the course allows it (a student of another course: the HTTP tests,
tests/proxy/test_help_boundaries.py, run two courses).

Real: everything. `userland local` (what `make run` starts: control plane, operator, gateway,
web UI, local runner) runs the shipped VS Code Template (code-server, `make local-apps`); people
sign in with the development login. The course `classroom` gets tina as its assistant the way an
admin names one (the namespace's annotation). The time from "End access now" to the terminal's
WebSocket closing is printed (the bound is measured by bench/help_bench.py, never asserted here).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Browser, BrowserContext, Page, WebSocket, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from tests.support import MUST_COMPLETE, MUST_COMPLETE_MS, eventually
from tests.support.real_apps import (
    Local,
    apps_installed,
    open_terminal,
    sign_in_to_the_platform,
    type_in_terminal,
)
from userland.platform.clients.kube import NAMESPACES, KubeClient

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not apps_installed(), reason="the real apps are not installed: run `make local-apps` (make test does)")]
COURSE = "classroom"


def platform(local: Local) -> str:
    return f"http://localhost:{local.port}"


async def with_cookies_of(context: BrowserContext, local: Local, url: str) -> int:
    """The gateway's answer to a request carrying what `context` holds for `url`, sent as the
    browser would but not through a page: VS Code's service worker answers some of its page's
    requests itself once it controls the tab."""
    held = "; ".join(f"{c['name']}={c['value']}" for c in await context.cookies(url))
    async with aiohttp.ClientSession() as http, http.get(
            f"http://127.0.0.1:{local.port}/", allow_redirects=False,
            headers={"Host": url.split("//", 1)[1].rstrip("/"), "Cookie": held}) as response:
        return response.status


async def ask_for_help(context: BrowserContext, local: Local, message: str) -> Page:
    page = await context.new_page()
    await page.goto(f"{platform(local)}/me")
    await page.get_by_label(re.compile("Ask your course's staff for help")).fill(message)
    await page.get_by_role("button", name="Ask for help").click()
    await expect(page.locator(f"#help-{COURSE}")).to_contain_text("You asked for help")
    return page


async def test_tina_helps_alice_in_vs_code_and_alice_ends_it(browser: Browser, local: Local) -> None:
    alice, tina, teacher = [await browser.new_context() for _ in range(3)]
    try:
        async with await KubeClient.connect(str(local.state_dir / "kubeconfig")) as kube:
            await kube.merge_patch(NAMESPACES, None, COURSE, {"metadata": {"annotations": {
                "userland.dev/assistants": "tina"}}})
            # alice, in her own browser: signed in, and asking.
            await sign_in_to_the_platform(alice, f"{platform(local)}/me", "alice")
            me = await ask_for_help(alice, local, "my loop never ends")

            # tina: the class dashboard's help queue, live; Join; alice's VS Code, as tina.
            board = await sign_in_to_the_platform(tina, f"{platform(local)}/courses/{COURSE}", "tina")
            waiting = board.locator('#help li[data-student="alice"]')
            await expect(waiting).to_contain_text("my loop never ends", timeout=MUST_COMPLETE_MS)
            assert await board.locator('#help li[data-student="bob"]').count() == 0  # bob did not ask
            await waiting.get_by_role("button", name=re.compile("Join")).click()
            await board.wait_for_url(f"**/courses/{COURSE}/help/alice")
            async with tina.expect_page() as opened:
                await board.get_by_role("link", name="Open alice's VS Code").click()
            ide = await opened.value
            sockets: list[WebSocket] = []
            closed_at: dict[int, float] = {}

            def on_socket(ws: WebSocket) -> None:
                sockets.append(ws)
                ws.on("close", lambda _: closed_at.setdefault(id(ws), time.monotonic()))
            ide.on("websocket", on_socket)
            alice_vscode = f"http://alice.vscode.localhost:{local.port}/"
            await ide.wait_for_url(re.compile("^" + re.escape(alice_vscode)), timeout=MUST_COMPLETE_MS)
            await ide.locator(".monaco-workbench").wait_for(timeout=MUST_COMPLETE_MS)
            await open_terminal(ide)
            help_file = local.volume("vscode", "alice") / "help.txt"
            # Written whole: `>` makes the file empty first, then the shell writes the line.
            await type_in_terminal(ide, "echo tina-helped-$((6*7)) > help.txt",
                                   lambda: help_file.is_file() and help_file.read_text().endswith("\n"))
            assert (local.volume("vscode", "alice") / "help.txt").read_text() == "tina-helped-42\n"
            open_sockets = [ws for ws in sockets if not ws.is_closed()]
            assert open_sockets, "VS Code has no WebSocket open"

            # alice's /me, open since she asked, shows tina and the button to end it by itself
            # (its live stream: no reload), and no form to ask any more; she ends it.
            now = me.locator(".help-now")
            await expect(now).to_contain_text("tina", timeout=MUST_COMPLETE_MS)
            await expect(now).to_contain_text("assistant")
            assert await me.get_by_role("button", name="Ask for help").count() == 0
            ended = time.monotonic()
            await me.get_by_role("button", name="End tina's access now").click()
            await me.wait_for_url("**/me#help-*")
            await expect(me.locator(".help-past")).to_contain_text("tina, assistant")

            # tina's open terminal is closed by the gateway, and nothing lets her back in.
            await eventually(lambda: all(id(ws) in closed_at for ws in open_sockets), timeout=MUST_COMPLETE)
            after = max(closed_at[id(ws)] for ws in open_sockets) - ended
            print(f"\n'End access now' to tina's VS Code WebSockets closed: {after:.2f} s")
            # Her workbench learns it at once: refused in VS Code's own protocol when it
            # reconnects, it stops and offers a reload, which says who ended it and when.
            cannot = ide.get_by_text("Cannot reconnect. Please reload the window.")
            await cannot.wait_for(timeout=MUST_COMPLETE_MS)
            print(f"'End access now' to tina's workbench saying so: {time.monotonic() - ended:.2f} s")
            # She presses Reload Window. VS Code reloads through its own shutdown (it saves its
            # state first); twice in parallel runs the dialog went and the page never reloaded
            # (VS Code's side; not found why), and a person then reloads the tab. What is ours
            # is what the reloaded page says, below; the print says which way it went.
            try:
                async with ide.expect_navigation(timeout=15_000):
                    await ide.get_by_role("button", name=re.compile("Reload Window")).click()
            except PlaywrightTimeoutError:
                print("VS Code did not reload after its Reload Window: the tab is reloaded by hand")
                await ide.reload()
            await expect(ide.locator("body")).to_contain_text(
                re.compile(r"alice ended your access at \d\d:\d\d UTC"), timeout=MUST_COMPLETE_MS)
            # A request with her cookie (what her tab would send), then a page load there.
            assert await with_cookies_of(tina, local, alice_vscode) == 401
            again = await ide.goto(alice_vscode)
            assert again is not None and again.status == 403

            # alice asks again, tina joins again; then tina leaves the course's staff: her way in
            # closes, whatever her browser still holds.
            await ask_for_help(alice, local, "one more thing")
            await board.goto(f"{platform(local)}/courses/{COURSE}")
            again_waiting = board.locator('#help li[data-student="alice"]')
            await again_waiting.get_by_role("button", name=re.compile("Join")).click()
            await board.wait_for_url(f"**/courses/{COURSE}/help/alice")
            back_in = await ide.goto(alice_vscode)
            assert back_in is not None and back_in.status == 200
            await kube.merge_patch(NAMESPACES, None, COURSE, {"metadata": {"annotations": {
                "userland.dev/assistants": ""}}})

            seen: list[int] = []

            async def shut_out() -> bool:
                seen.append(await with_cookies_of(tina, local, alice_vscode))
                return seen[-1] == 401
            await eventually(shut_out, timeout=MUST_COMPLETE, explain=lambda: f"statuses seen: {seen[-5:]}")
            gone = await board.goto(f"{platform(local)}/courses/{COURSE}")
            assert gone is not None and gone.status == 404
            await kube.merge_patch(NAMESPACES, None, COURSE, {"metadata": {"annotations": {
                "userland.dev/assistants": "tina"}}})

            # Bob never asked: tina's browser is refused at his address.
            bob = await tina.new_page()
            response = await bob.goto(f"http://bob.vscode.localhost:{local.port}/")
            assert response is not None and response.status == 403
            assert "This is bob" in (await bob.content()).replace("&#39;", "'")

            # An instructor opens a student's environment unasked only once the course allows it.
            board = await sign_in_to_the_platform(teacher, f"{platform(local)}/courses/{COURSE}", "teacher")
            await board.locator("#students").wait_for()
            assert await board.get_by_role("button", name=re.compile("Open as staff")).count() == 0
            await kube.merge_patch(NAMESPACES, None, COURSE, {"metadata": {"annotations": {
                "userland.dev/staff-access": "instructors"}}})

            async def offered() -> Any:
                await board.reload()
                return await board.get_by_role("button", name="Open as staff bob").count()
            await eventually(offered, timeout=MUST_COMPLETE)
            await board.get_by_role("button", name="Open as staff bob").click()
            await board.wait_for_url(f"**/courses/{COURSE}/help/bob")
            async with teacher.expect_page() as opened:
                await board.get_by_role("link", name="Open bob's JupyterLab").click()
            lab = await opened.value
            bob_lab = f"http://bob.jupyterlab.localhost:{local.port}/"
            await lab.wait_for_url(re.compile("^" + re.escape(bob_lab)), timeout=MUST_COMPLETE_MS)
    finally:
        for context in (alice, tina, teacher):
            with contextlib.suppress(Exception):
                await context.close()
        await asyncio.sleep(0)
