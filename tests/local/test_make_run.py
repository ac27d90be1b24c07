"""`userland local` end to end: the command `make run` starts, used as a student would.

Real: everything. The command starts its own control plane (cached binaries), Redis, operator,
gateway and runner; the test signs in through the gateway's development login (following the
real redirects and the form with its single-use state), opens the demo environment, and then
stops the command with SIGINT and checks that nothing it started is left running.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from userland.local.controlplane import free_port
from userland.platform.kube import USERLANDS, KubeClient

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


async def dev_login(http: aiohttp.ClientSession, base: str, login: str) -> aiohttp.ClientResponse:
    """Open /demo/ signed out, follow the redirects to the form, submit it; the final response."""
    async with http.get(f"{base}/demo/", headers=HTML) as form_page:
        assert form_page.status == 200, await form_page.text()
        assert form_page.url.path == "/auth/dev-login"
        assert [r.status for r in form_page.history] == [302, 302]
        form = await form_page.text()
    state = re.search(r'name="state" value="([^"]+)"', form)
    assert state, form
    response = await http.post(f"{base}/auth/dev-login", data={"state": state.group(1), "login": login},
                               headers=HTML)
    return response


@pytest.mark.slow
async def test_make_run_end_to_end(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://localhost:{port}"
    state_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("USERLAND_GITHUB")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state_dir), "--students", "alice,bob",
        stdout=asyncio.subprocess.PIPE, stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115, ASYNC230
        env=env, start_new_session=True,
    )
    lines: list[str] = []
    started: dict[int, str] = {}
    try:
        await asyncio.wait_for(read_until_ready(process, lines), STARTUP_TIMEOUT)
        output = "".join(lines)
        assert f"Open        {base}/demo/" in output
        assert f"export KUBECONFIG={state_dir}/kubeconfig" in output
        started = descendants(process.pid)
        # etcd, apiserver, controller-manager, redis, operator, gateway, two demo environments
        assert len(started) >= 8, started
        # The operator reports where each student reaches their environment.
        async with await KubeClient.connect(str(state_dir / "kubeconfig")) as kube:
            status = (await kube.get(USERLANDS, "classroom", "demo-alice")).get("status") or {}
        assert status.get("url") == f"{base}/demo/", status

        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as alice:
            response = await dev_login(alice, base, "alice")
            async with response:
                assert response.status == 200, await response.text()
                assert response.url.path == "/demo/"
                page = await response.text()
            assert '<code id="owner">alice</code>' in page
            assert 'X-User: <code id="x-user">alice</code>' in page
            assert '<td id="signature">present</td>' in page
            # A spoofed identity header is replaced by the gateway.
            async with alice.get(f"{base}/demo/x", headers={**HTML, "X-User": "bob"}) as spoofed:
                text = await spoofed.text()
                assert 'id="x-user">alice<' in text and '<code id="path">/demo/x</code>' in text
            async with alice.get(f"{base}/", headers=HTML) as home:
                text = await home.text()
                assert home.status == 200, text
                assert "Signed in as <strong>alice</strong>" in text and '<a href="demo/">' in text
            async with alice.ws_connect(f"{base}/demo/ws") as ws:
                await ws.send_str("hello through the gateway")
                assert await ws.receive_str(timeout=10) == "hello through the gateway"

        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as bob:
            response = await dev_login(bob, base, "bob")
            async with response:
                page = await response.text()
            assert '<code id="owner">bob</code>' in page and "alice" not in page
            async with bob.get(f"{base}/demo/", headers={**HTML, "X-User": "alice"}) as again:
                assert "alice" not in await again.text()

        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as mallory:
            response = await dev_login(mallory, base, "mallory")
            async with response:
                assert response.status == 403
                assert "alice" not in await response.text()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
            try:
                await asyncio.wait_for(process.wait(), 40)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                raise
    assert process.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
    assert still_running(started) == [], "left running after Ctrl-C"
    assert mentioning(str(state_dir)) == []
