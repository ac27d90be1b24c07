"""Memory and start time of the real apps (run by hand: `python bench/local_apps_bench.py`,
after `make local-apps`).

Each app is started with the command line the tests use (tests/local/test_local_apps.py, the
same as the shipped Templates), as an unprivileged user (`nobody` when run as root) with a
fresh home, on a free loopback port. Measured per app: seconds from start to its first 200,
then the memory of its whole process tree (RSS summed, as `ps` shows it, and PSS, which shares
common pages fairly) idle 5 s after start, and again while Debian's Chromium holds it open
after real use, straight at the student's own origin (http://alice.<app>.localhost:PORT/):
  vscode      the workbench, a terminal running a command;
  jupyterlab  a notebook computing 6*7 (kernel over the WebSocket) and a terminal;
  mariadb     MariaDB + phpMyAdmin: phpMyAdmin's home and its databases page.
Prints a table and writes bench/results/local_apps.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from playwright.async_api import Page, async_playwright

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.local.test_local_apps import (  # noqa: E402  (the tests' command lines, one source)
    Database,
    Student,
    code_server_argv,
    jupyterlab_argv,
    started,
    until_listening,
    until_ok,
)
from userland.local.controlplane import free_port  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def memory(pids: list[int]) -> dict[str, float]:
    rss = pss = 0
    count = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
            count += 1
    return {"rss_mib": round(rss / 1024, 1), "pss_mib": round(pss / 1024, 1), "processes": count}


def sample(*processes: asyncio.subprocess.Process) -> dict[str, float]:
    pids = [pid for process in processes for pid in tree(process.pid)]
    return memory(pids)


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Page]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield await browser.new_page(viewport={"width": 1280, "height": 800})
        finally:
            await browser.close()


async def use_code_server(page: Page, url: str) -> None:
    await page.goto(url)
    await page.wait_for_selector(".monaco-workbench .part.editor", timeout=120_000)
    await page.wait_for_timeout(3000)
    await page.keyboard.press("F1")
    await page.wait_for_selector(".quick-input-widget input", timeout=30_000)
    await page.keyboard.type("Terminal: Create New Terminal")
    await page.wait_for_timeout(1000)
    await page.keyboard.press("Enter")
    screen = page.locator(".terminal-wrapper.active .xterm-screen")
    await screen.wait_for(timeout=60_000)
    await page.wait_for_timeout(2000)
    await screen.click()
    await page.keyboard.type("echo bench-$((6*7)) > ~/bench.txt\n")
    await page.wait_for_timeout(2000)


async def use_jupyterlab(page: Page, url: str) -> None:
    await page.goto(url + "lab?reset")
    await page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=120_000)
    cell = page.locator(".jp-Notebook .jp-Cell .cm-content >> visible=true").first
    await cell.wait_for(timeout=60_000)
    await page.wait_for_timeout(1500)
    await cell.click()
    await page.keyboard.type("6*7")
    await page.keyboard.press("Shift+Enter")
    await page.locator(".jp-OutputArea-output >> visible=true").first.wait_for(timeout=60_000)
    await page.click("[data-command='launcher:create']")
    await page.locator(".jp-LauncherCard", has_text="Terminal").first.click()
    screen = page.locator(".jp-Terminal .xterm-screen >> visible=true").first
    await screen.wait_for(timeout=60_000)
    await page.wait_for_timeout(1500)
    await screen.click()
    await page.keyboard.type("echo bench-$((6*7)) > ~/bench.txt\n")
    await page.wait_for_timeout(2000)


async def use_phpmyadmin(page: Page, url: str) -> None:
    await page.goto(url)
    await page.wait_for_selector("#pma_navigation_tree a:text-is('alice')", timeout=60_000)
    await page.goto(url + "index.php?route=/server/databases")
    await page.wait_for_selector("#dbStatsForm tr.db-row", timeout=60_000)


@dataclass(frozen=True)
class Run:
    """One app's run: who runs it, on which port, where its logs go."""

    who: Student
    port: int
    logs: Path
    http: aiohttp.ClientSession


Started = tuple[tuple[asyncio.subprocess.Process, ...], str]


async def start_vscode(run: Run, stack: contextlib.AsyncExitStack) -> Started:
    log = run.logs / "code-server.log"
    argv = run.who.argv(code_server_argv(run.port, run.who.home))
    process = await stack.enter_async_context(started(argv, run.who.env(), log))
    await until_ok(run.http, f"http://127.0.0.1:{run.port}/healthz", process, log)
    return (process,), f"http://alice.vscode.localhost:{run.port}/"


async def start_jupyterlab(run: Run, stack: contextlib.AsyncExitStack) -> Started:
    log = run.logs / "jupyterlab.log"
    argv = run.who.argv(jupyterlab_argv(run.port, run.who.home))
    process = await stack.enter_async_context(started(argv, run.who.env(), log))
    await until_ok(run.http, f"http://127.0.0.1:{run.port}/api/status", process, log)
    return (process,), f"http://alice.jupyter.localhost:{run.port}/"


async def start_mariadb(run: Run, stack: contextlib.AsyncExitStack) -> Started:
    db = Database("alice", free_port(), run.port, run.who.home / "db")
    argv, env = db.mariadb(run.who)
    server = await stack.enter_async_context(started(argv, env, run.logs / "mariadb.log"))
    argv, env = db.phpmyadmin(run.who)
    web = await stack.enter_async_context(started(argv, env, run.logs / "phpmyadmin.log"))
    await until_listening(db.db_port, server, run.logs / "mariadb.log")
    await until_ok(run.http, f"http://127.0.0.1:{run.port}/", web, run.logs / "phpmyadmin.log")
    return (server, web), f"http://alice.pma.localhost:{run.port}/"


APPS: dict[str, tuple[Callable[[Run, contextlib.AsyncExitStack], Awaitable[Started]],
                      Callable[[Page, str], Awaitable[None]]]] = {
    "vscode": (start_vscode, use_code_server),
    "jupyterlab": (start_jupyterlab, use_jupyterlab),
    "mariadb": (start_mariadb, use_phpmyadmin),
}


def line(name: str, ready: float, idle: dict[str, float], used: dict[str, float]) -> str:
    def mem(m: dict[str, float]) -> str:
        return f"RSS {m['rss_mib']:6.1f} MiB PSS {m['pss_mib']:6.1f} MiB ({m['processes']:.0f} proc)"
    return f"{name:11} ready {ready:5.1f} s   idle {mem(idle)}   in use {mem(used)}"


async def measure(name: str, run: Run) -> dict[str, Any]:
    start, use = APPS[name]
    async with contextlib.AsyncExitStack() as stack:
        began = time.monotonic()
        processes, url = await start(run, stack)
        ready = time.monotonic() - began
        await asyncio.sleep(5)
        idle = sample(*processes)
        async with chromium() as page:
            await use(page, url)
            await asyncio.sleep(3)
            used = sample(*processes)
    print(line(name, ready, idle, used), flush=True)
    return {"app": name, "ready_s": round(ready, 2), "idle": idle, "in_use": used}


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("apps", nargs="*", default=list(APPS), help=f"some of: {' '.join(APPS)}")
    options = parser.parse_args()
    unknown = set(options.apps) - set(APPS)
    if unknown:
        parser.error(f"unknown app(s) {', '.join(sorted(unknown))} (known: {' '.join(APPS)})")
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    else:
        uid, gid = os.getuid(), os.getgid()
    logs = Path(tempfile.mkdtemp(prefix="userland-apps-bench-logs-"))
    results = []
    async with aiohttp.ClientSession() as http:
        for app in options.apps:
            home = Path(tempfile.mkdtemp(prefix="userland-apps-bench-", dir="/tmp"))
            os.chown(home, uid, gid)
            try:
                results.append(await measure(app, Run(Student(uid, gid, home), free_port(), logs, http)))
            finally:
                shutil.rmtree(home, ignore_errors=True)
    out = REPO / "bench" / "results" / "local_apps.json"
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M"), "load": os.getloadavg(),
                               "results": results}, indent=2) + "\n")
    print(f"written to {out.relative_to(REPO)}; logs in {logs}")


if __name__ == "__main__":
    asyncio.run(main())
