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
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.abc
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
        assert f"Open        http://demo.localhost:{port}/" in output
        assert f"such as http://alice.demo.localhost:{port}/" in output
        assert f"export KUBECONFIG={state_dir}/kubeconfig" in output
        started = descendants(process.pid)
        # etcd, apiserver, controller-manager, redis, operator, web UI, gateway (the demo
        # environments are served by the runner itself)
        assert len(started) >= 7, started
        assert "Web UI      " in output and "teacher (instructor" in output and "admin (admin)" in output
        # The operator reports where each student reaches their environment.
        async with await KubeClient.connect(str(state_dir / "kubeconfig")) as kube:
            status = (await kube.get(USERLANDS, "classroom", "demo-alice")).get("status") or {}
        alice_origin = f"http://alice.demo.localhost:{port}"
        assert status.get("url") == f"{alice_origin}/", status

        async with browser() as alice:
            response = await dev_login(alice, port, "alice")
            async with response:
                assert response.status == 200, await response.text()
                assert (response.url.host, response.url.path) == ("alice.demo.localhost", "/")
                page = await response.text()
            assert '<code id="owner">alice</code>' in page
            assert 'X-User: <code id="x-user">alice</code>' in page
            assert '<td id="signature">present</td>' in page
            # A spoofed identity header is replaced by the gateway.
            async with alice.get(f"{alice_origin}/x", headers={**HTML, "X-User": "bob"}) as spoofed:
                text = await spoofed.text()
                assert 'id="x-user">alice<' in text and '<code id="path">/x</code>' in text
            # The platform's own host is the web UI: a student lands on their environments.
            async with alice.get(f"{base}/", headers=HTML) as home:
                text = await home.text()
                assert home.status == 200, text
                assert home.url.path == "/me"
                assert "My environments" in text and f'href="{alice_origin}/"' in text and "bob" not in text
            async with alice.get(f"{base}/courses/classroom", headers=HTML) as refused:
                assert refused.status == 404
            async with alice.ws_connect(f"{alice_origin}/ws", origin=alice_origin) as ws:
                await ws.send_str("hello through the gateway")
                assert await ws.receive_str(timeout=10) == "hello through the gateway"

        async with browser() as bob:
            response = await dev_login(bob, port, "bob")
            async with response:
                page = await response.text()
                assert response.url.host == "bob.demo.localhost"
            assert '<code id="owner">bob</code>' in page and "alice" not in page
            # Alice's origin is not his: a 403 page with a link to his own.
            async with bob.get(f"{alice_origin}/", headers={**HTML, "X-User": "alice"}) as theirs:
                assert theirs.status == 403
                text = await theirs.text()
                assert f'href="http://bob.demo.localhost:{port}/"' in text and "owner" not in text

        # The instructor named on the course sees the class dashboard through the gateway.
        async with browser() as teacher:
            response = await dev_login(teacher, port, "teacher")
            response.close()
            async with teacher.get(f"{base}/", headers=HTML) as home:
                assert home.url.path == "/courses" and "Classroom (local)" in await home.text()
            async with teacher.get(f"{base}/courses/classroom", headers=HTML) as dashboard:
                text = await dashboard.text()
                assert dashboard.status == 200, text
                assert 'id="student-alice"' in text and 'id="student-bob"' in text and "Ready" in text

        async with browser() as mallory:
            response = await dev_login(mallory, port, "mallory")
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
