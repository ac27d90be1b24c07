"""`userland local` (the command `make run` starts) seen from outside: its banner, a browser
that resolves `*.localhost` as Chromium does and signs in with the development login, and the
processes it leaves (none may be left once it has stopped)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.abc

STARTUP_TIMEOUT = 60
HTML = {"Accept": "text/html"}


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def descendants(root: int) -> dict[int, str]:
    """Live descendants of `root`: pid -> start time (to tell a reused pid apart)."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
            starts[int(entry)] = fields[19]
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = starts[pid]
                frontier.append(pid)
    return found


def still_running(pids: dict[int, str]) -> list[int]:
    return [pid for pid, start in pids.items()
            if (fields := _stat(pid)) is not None and fields[0] != "Z" and fields[19] == start]


def mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = _stat(int(entry))
        if text in cmdline and fields is not None and fields[0] != "Z":
            found.append(int(entry))
    return found


async def read_until_ready(process: asyncio.subprocess.Process, lines: list[str]) -> None:
    assert process.stdout is not None
    while True:
        raw = await process.stdout.readline()
        if not raw:
            raise AssertionError("userland local ended before it was ready:\n" + "".join(lines))
        lines.append(raw.decode())
        if raw.startswith(b"Ready."):
            return


@contextlib.asynccontextmanager
async def userland_local(port: int, state_dir: Path, *args: str, env: Mapping[str, str] | None = None,
                         ready_within: float = 120) -> AsyncIterator[str]:
    """`userland local` (what `make run` starts) on `port`, until it says Ready; yields its banner.
    Stopped as Ctrl-C stops it (SIGINT), and killed with its group if it does not stop in a minute.
    GitHub credentials of the caller's environment are left out (the development login)."""
    environment = {k: v for k, v in (os.environ if env is None else env).items()
                   if not k.startswith("USERLAND_GITHUB")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state_dir), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=environment, start_new_session=True)
    lines: list[str] = []
    try:
        await asyncio.wait_for(read_until_ready(process, lines), ready_within)
        yield "".join(lines)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                raise


class LoopbackResolver(aiohttp.abc.AbstractResolver):
    """`*.localhost` is this machine, as browsers resolve it (the C library may not)."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[Any]:
        assert host == "localhost" or host.endswith(".localhost"), host
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


def browser() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True),
                                 connector=aiohttp.TCPConnector(resolver=LoopbackResolver()))


async def dev_login(http: aiohttp.ClientSession, port: int, login: str) -> aiohttp.ClientResponse:
    """Open the demo Template's address signed out, follow the redirects (to the platform's
    handoff, its login, the form), submit the form; the final response."""
    async with http.get(f"http://demo.localhost:{port}/", headers=HTML) as form_page:
        assert form_page.status == 200, await form_page.text()
        assert form_page.url.path == "/auth/dev-login"
        assert [(r.status, r.url.host, r.url.path) for r in form_page.history] == [
            (302, "demo.localhost", "/"), (302, "localhost", "/auth/handoff"),
            (302, "localhost", "/auth/login")]
        form = await form_page.text()
    state = re.search(r'name="state" value="([^"]+)"', form)
    assert state, form
    response = await http.post(f"http://localhost:{port}/auth/dev-login",
                               data={"state": state.group(1), "login": login}, headers=HTML)
    return response


async def sign_in(http: aiohttp.ClientSession, port: int, login: str, url: str) -> aiohttp.ClientResponse:
    """Open `url` signed out, follow the redirects to the development login, submit it."""
    async with http.get(url, headers=HTML) as form_page:
        assert form_page.url.path == "/auth/dev-login", await form_page.text()
        state = re.search(r'name="state" value="([^"]+)"', await form_page.text())
    assert state
    return await http.post(f"http://localhost:{port}/auth/dev-login",
                           data={"state": state.group(1), "login": login}, headers=HTML)


def environment_processes(state_dir: Path) -> dict[int, str]:
    """Live processes of students' environments of the `userland local` using `state_dir`:
    those whose command line, working folder or environment names the state folder or the
    folder the environments live in (`<state>/environments` may link to /var/lib/userland-local/,
    where the environments' account can reach it): pid -> command line."""
    roots = {str(state_dir.resolve())}
    with contextlib.suppress(OSError):
        roots.add(str((state_dir / "environments").resolve()))
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (fields := _stat(int(entry.name))) is None or fields[0] == "Z":
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            seen = [cmdline]
            with contextlib.suppress(OSError):
                seen.append(os.readlink(entry / "cwd"))
            with contextlib.suppress(OSError):
                seen.append((entry / "environ").read_bytes().decode(errors="replace"))
            if any(root in text for root in roots for text in seen):
                found[int(entry.name)] = cmdline
    return found
