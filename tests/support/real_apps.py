"""`userland local` (what `make run` starts) with the real apps, as browser tests use it: the
command started on a free port with its own state, the development login, and the steps of
using VS Code's workbench that need patience (a terminal through the command palette)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from tests.support.make_run import drain, read_until_ready, stop_local
from tests.support.runner import assert_own_program_runs
from tests.support.waiting import MUST_COMPLETE, eventually
from userland.local.controlplane import find_repo, free_port
from userland.local.runner_host import app_bin_dirs

APPS = ("code-server", "jupyter-lab", "userland-mariadb", "userland-phpmyadmin")


def apps_installed() -> bool:
    path = ":".join(str(b) for b in app_bin_dirs(dict(os.environ), find_repo()))
    return all(shutil.which(app, path=path) for app in APPS)


@dataclass
class Local:
    port: int
    state_dir: Path
    lines: list[str]

    @property
    def public(self) -> str:
        return f"http://localhost:{self.port}"

    def template(self, name: str) -> str:
        return f"http://{name}.localhost:{self.port}/"

    def origin(self, name: str, student: str) -> str:
        return f"http://{student}.{name}.localhost:{self.port}/"

    def volume(self, template: str, student: str) -> Path:
        return self.state_dir / "environments" / "volumes" / "classroom" / f"{template}-{student}-data"


@contextlib.asynccontextmanager
async def started_local(tmp_path: Path, students: str = "alice,bob") -> AsyncIterator[Local]:
    port = free_port()
    os.chmod(tmp_path, 0o755)  # the environments' account passes through to its folders
    assert_own_program_runs(tmp_path / "probe")  # assignments' worker Pods run it
    state_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("USERLAND_GITHUB")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state_dir), "--students", students,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)
    lines: list[str] = []
    reader = None
    try:
        await read_until_ready(process, lines)
        assert "not installed here" not in "".join(lines), "".join(lines)
        reader = asyncio.ensure_future(drain(process, lines))
        yield Local(port, state_dir, lines)
    finally:
        await stop_local(process, lines, state_dir, reader)


async def sign_in(context: BrowserContext, url: str, login: str) -> Page:
    """Open `url` signed out: the gateway's handoff leads to the development login; sign in."""
    page = await context.new_page()
    await page.goto(url)
    await page.get_by_label(re.compile("name", re.I)).first.fill(login)
    await page.get_by_role("button", name=re.compile("sign in", re.I)).click()
    return page


async def sign_in_to_the_platform(context: BrowserContext, url: str, login: str) -> Page:
    """Open a web UI page (`url`, on the platform's own host) signed out: its "Please sign in"
    page links to the development login; sign in, and land back on `url`."""
    page = await context.new_page()
    await page.goto(url)
    await page.get_by_role("link", name="Sign in").click()
    await page.get_by_label(re.compile("name", re.I)).first.fill(login)
    await page.get_by_role("button", name=re.compile("sign in", re.I)).click()
    await page.wait_for_url(url)
    return page


async def wait_until_answering(page: Page, url: str, own_host: str) -> None:
    """Open `url`; while the environment is still starting the gateway's page reloads itself."""
    await page.goto(url)
    await page.wait_for_url(re.compile(rf"^http://{re.escape(own_host)}:\d+/"), timeout=60_000)


def vscode_shells() -> set[int]:
    """The shells VS Code's terminals run here (TERM_PROGRAM=vscode in their environment), by
    pid; empty where other accounts' environments cannot be read (not root)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (proc / "comm").read_text().strip() in {"bash", "sh", "dash", "zsh"} and \
                    b"TERM_PROGRAM=vscode" in (proc / "environ").read_bytes().split(b"\0"):
                found.add(int(proc.name))
    return found


async def open_terminal(page: Page) -> None:
    """Open a terminal, and return once its shell runs: keys typed before the shell has started
    can be lost on a loaded machine (a hand-out test's typed line never arrived). The terminal
    comes through the command palette; while the workbench is still settling (the welcome page
    opening, extensions starting) it may take the focus and close the palette, so try again a
    few times before giving up."""
    before = vscode_shells()
    await _open_terminal(page)
    if os.geteuid() == 0:  # only root reads the environment accounts' processes
        await eventually(lambda: vscode_shells() - before, timeout=MUST_COMPLETE)


async def type_in_terminal(page: Page, line: str, done: Callable[[], Any]) -> None:
    """Type `line` (and Enter) into the visible terminal until `done()` says it ran, as a person
    types again when nothing happened: on a loaded machine the workbench can take the focus back
    (the welcome page opening, an extension starting) while the keys are typed, and they go
    elsewhere. `line` must be safe to run twice."""
    deadline = asyncio.get_running_loop().time() + MUST_COMPLETE
    while True:
        await page.locator(".xterm-helper-textarea >> visible=true").first.focus()
        await page.keyboard.type(line + "\n")
        try:
            await eventually(done, timeout=30)
            return
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise


async def _open_terminal(page: Page) -> None:
    row = page.locator(".quick-input-list .monaco-list-row").first
    # The visible one: a slow first try may end up with two terminals, of which only the
    # active tab's is shown (the first one's stays hidden behind it).
    terminal = page.locator(".xterm-helper-textarea >> visible=true").first
    for _ in range(6):
        if await terminal.count():
            # An earlier try's terminal came up after all: close this try's palette, which
            # would otherwise stay open over the workbench (and its dialogs) with its text.
            if await row.count():
                await page.keyboard.press("Escape")
                await row.wait_for(state="hidden", timeout=10_000)
            return
        await page.keyboard.press("Escape")
        await page.keyboard.press("F1")
        await page.keyboard.type("Terminal: Create New Terminal")
        try:
            await row.wait_for(timeout=10_000)
            await page.keyboard.press("Enter")
            await terminal.wait_for(timeout=10_000)
            return
        except PlaywrightTimeout:
            continue
    await terminal.wait_for(timeout=1_000)  # fails with the locator's own message


