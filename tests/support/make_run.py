"""`userland local` (the command `make run` starts) seen from outside: its banner, a browser
that resolves `*.localhost` as Chromium does and signs in with the development login, and the
processes it leaves (none may be left once it has stopped)."""

from __future__ import annotations

import asyncio
import contextlib
import html
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import aiohttp
import aiohttp.abc

from tests.support.lti_launch_platform import read_form
from tests.support.procs import stat_fields
from tests.support.waiting import MUST_COMPLETE

HTML = {"Accept": "text/html"}
_DATA = re.compile(r'data-([a-z-]+)="([^"]*)"')  # an LTI step page's data- attributes


def descendants(root: int) -> dict[int, str]:
    """Live descendants of `root`: pid -> start time (to tell a reused pid apart)."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(int(entry))) is not None and fields[0] != "Z":
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
            if (fields := stat_fields(pid)) is not None and fields[0] != "Z" and fields[19] == start]


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
        fields = stat_fields(int(entry))
        if text in cmdline and fields is not None and fields[0] != "Z":
            found.append(int(entry))
    return found


async def read_until_ready(process: asyncio.subprocess.Process, lines: list[str], *,
                           within: float = MUST_COMPLETE, stderr: Path | None = None) -> None:
    """Read `userland local`'s output into `lines` until it says Ready. Fail at once, with its
    output (and `stderr`, the file its errors went to, if any), when it ends first: it died,
    whatever holds its pipe open. `within` is a safety net, not a claim about speed: start-up
    is work that must complete, slower on a loaded machine."""
    assert process.stdout is not None
    deadline = asyncio.get_running_loop().time() + within

    def failure(what: str) -> str:
        errors = stderr.read_text(errors="replace") if stderr is not None and stderr.exists() else ""
        status = f" (exit status {process.returncode})" if process.returncode is not None else ""
        said = "".join(lines) + (f"\n(stderr)\n{errors}" if errors else "")
        return f"userland local {what}{status}:\n{said}"

    while True:
        reading = asyncio.ensure_future(process.stdout.readline())
        try:
            while not reading.done():
                if process.returncode is not None:
                    # Ended: what it printed last is still in the pipe; read it, briefly.
                    await asyncio.wait({reading}, timeout=5)
                    if not reading.done():
                        raise AssertionError(failure("ended before it was ready"))
                elif asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(failure(f"was not ready within {within:g}s"))
                else:
                    await asyncio.wait({reading}, timeout=0.5)
        finally:
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
        raw = reading.result()
        if not raw:
            raise AssertionError(failure("ended before it was ready"))
        lines.append(raw.decode())
        if raw.startswith(b"Ready."):
            return


async def drain(process: asyncio.subprocess.Process, lines: list[str]) -> None:
    """Keep reading what `userland local` prints after Ready into `lines`: a pipe nobody reads
    fills, and a process writing to a full pipe stops (its Ctrl-C with it)."""
    assert process.stdout is not None
    while raw := await process.stdout.readline():
        lines.append(raw.decode(errors="replace"))


async def stop_local(process: asyncio.subprocess.Process, lines: list[str], state_dir: Path,
                     reader: asyncio.Future[None] | None = None, stderr: Path | None = None) -> None:
    """Stop `userland local` as Ctrl-C does (SIGINT) and wait until it has ended; its output goes
    on into `lines` meanwhile (read by `reader`, drain's task, if one runs already). If it has
    not ended within MUST_COMPLETE, fail with where it stands: SIGUSR1 makes it print every
    thread's stack (faulthandler), then what it printed, the tail of its log and its processes
    are in the error (with `stderr`, the file its errors went to, if any); its group is killed."""
    if process.returncode is not None:
        if reader is not None:
            reader.cancel()
        return
    if reader is None and process.stdout is not None:
        reader = asyncio.ensure_future(drain(process, lines))
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), MUST_COMPLETE)
    except TimeoutError:
        left = {pid: _command(pid) for pid in descendants(process.pid)}
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGUSR1)
        await asyncio.sleep(2)  # the stacks, printed by the process itself
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(_not_stopped(left, lines, state_dir, stderr)) from None
    finally:
        if reader is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(reader, 5)  # the pipe closes with the last process holding it
            reader.cancel()


def _not_stopped(left: dict[int, str], lines: list[str], state_dir: Path, stderr: Path | None) -> str:
    log = state_dir / "logs" / "local.log"
    tail = log.read_text(errors="replace").splitlines()[-60:] if log.exists() else []
    errors = stderr.read_text(errors="replace")[-20000:] if stderr is not None and stderr.exists() else ""
    return (f"userland local did not stop within {MUST_COMPLETE:g}s of Ctrl-C.\n"
            f"Its processes then: {left}\nIt printed:\n{''.join(lines)}\n(stderr)\n{errors}\n"
            "local.log (last lines):\n" + "\n".join(tail))


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


@contextlib.asynccontextmanager
async def userland_local(port: int, state_dir: Path, *args: str, env: Mapping[str, str] | None = None,
                         ready_within: float = MUST_COMPLETE) -> AsyncIterator[str]:
    """`userland local` (what `make run` starts) on `port`, until it says Ready; yields its banner.
    Stopped as Ctrl-C stops it (stop_local). GitHub credentials of the caller's environment are
    left out (the development login)."""
    environment = {k: v for k, v in (os.environ if env is None else env).items()
                   if not k.startswith("USERLAND_GITHUB")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state_dir), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=environment, start_new_session=True)
    lines: list[str] = []
    reader = None
    try:
        await read_until_ready(process, lines, within=ready_within)
        banner = "".join(lines)
        reader = asyncio.ensure_future(drain(process, lines))
        yield banner
    finally:
        await stop_local(process, lines, state_dir, reader)


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


def lms_browser(port: int, trace: aiohttp.TraceConfig | None = None) -> aiohttp.ClientSession:
    """A browser that, as Chromium and Firefox do, keeps Secure cookies of http://localhost."""
    jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[f"http://localhost:{port}"])
    return aiohttp.ClientSession(cookie_jar=jar, connector=aiohttp.TCPConnector(resolver=LoopbackResolver()),
                                 trace_configs=[trace] if trace is not None else None)

async def lms_launch(http: aiohttp.ClientSession, port: int, lms: str, who: str) -> aiohttp.ClientResponse:
    """A click on the LMS course's link for `who`, through to where Userland sends them."""
    async with http.get(f"{lms}/start/{who}", headers=HTML) as form_page:
        text = await form_page.text()
        assert form_page.status == 200, text
        assert [(r.url.host, r.url.path) for r in form_page.history] == [
            ("127.0.0.1", f"/start/{who}"), ("localhost", "/lti/login")]
    action, fields = read_form(text)
    assert action == f"http://localhost:{port}/lti/launch" and set(fields) == {"id_token", "state"}
    # The LMS's page posts the form to Userland (a cross-site POST, from the LMS's site).
    async with http.post(action, data=fields, headers={**HTML, "Origin": lms}) as launched:
        page = await launched.text()
        assert launched.status == 200, page
    data = {k: html.unescape(v) for k, v in _DATA.findall(page)}
    assert data.get("mode") == "continue", page  # not framed: it goes on in this window
    return await http.get(urljoin(f"http://localhost:{port}/", data["url"]), headers=HTML)



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
        if not entry.name.isdigit() or (fields := stat_fields(int(entry.name))) is None or fields[0] == "Z":
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


# Where the banner points at something to open: every http:// address it prints.
BANNER_URL = re.compile(r"http://[A-Za-z0-9.<>:-]+(?:/[^\s;,)`']*)?")


async def broken_banner_urls(banner: str) -> list[tuple[str, int | str]]:
    """Every address the banner prints, opened as a newcomer would (signed out, no redirects
    followed): those that answer 404 or a server error, or not at all. A sign-in redirect or a
    page that asks to sign in is fine: the address is right."""
    broken: list[tuple[str, int | str]] = []
    async with browser() as http:
        for url in sorted(set(BANNER_URL.findall(banner))):
            url = url.rstrip(".")
            if "<" in url:
                continue  # a pattern ("<port>"), not an address
            if url.endswith(".git"):
                url += "/info/refs?service=git-upload-pack"  # what git itself asks a repository first
            try:
                async with http.get(url, headers=HTML, allow_redirects=False,
                                    timeout=aiohttp.ClientTimeout(total=30)) as response:
                    if response.status == 404 or response.status >= 500:
                        broken.append((url, response.status))
            except aiohttp.ClientError as err:
                broken.append((url, type(err).__name__))
    return broken
