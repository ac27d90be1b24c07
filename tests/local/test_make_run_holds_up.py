"""`userland local` keeps running when one of its parts falls over: each child (Redis, the web
UI, the operator, the gateway) is killed in turn and comes back by itself, and afterwards a
student still signs in and reaches their environment.

Real: everything, as in test_make_run.py (whose helpers this uses): the command with its own
control plane, Redis, operator, web UI, gateway and runner. The test kills the children it
finds under the command's process (SIGKILL, by pid) and watches for their successors.
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

from tests.support import MUST_COMPLETE, free_port
from tests.support.make_run import (
    browser,
    descendants,
    dev_login,
    drain,
    mentioning,
    read_until_ready,
    still_running,
    stop_local,
)

# Each test starts `userland local` itself (tests/support/make_run.py), not through a fixture.
pytestmark = pytest.mark.make_run

ROLES = ("redis", "web", "operator", "gateway")


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def children_by_role(root: int) -> dict[str, int]:
    """The command's own children that play one of ROLES (not the students' environments)."""
    found = {}
    for pid in descendants(root):
        argv = _cmdline(pid)
        if _parent(pid) != root or not argv:
            continue
        if argv[0].startswith("redis-server"):
            found["redis"] = pid
        elif "userland.cli.main" in argv and len(argv) > argv.index("userland.cli.main") + 1:
            role = argv[argv.index("userland.cli.main") + 1]
            if role in ROLES:
                found[role] = pid
    return found


def health_port(role: str, pid: int) -> int:
    """Where a child answers /healthz: the gateway on its internal listener (USERLAND_INTERNAL_LISTEN,
    in its environment), the others where they listen."""
    if role != "gateway":
        return listen_port(pid)
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    (listen,) = [v.split("=", 1)[1] for v in environ if v.startswith("USERLAND_INTERNAL_LISTEN=")]
    return int(listen.rsplit(":", 1)[1])


def listen_port(pid: int) -> int:
    """The port a child serves on, from its command line (`--listen 127.0.0.1:N`, `--port N`,
    or redis-server's rewritten title `redis-server 127.0.0.1:N`)."""
    text = " ".join(_cmdline(pid))
    found = re.search(r"(?:--listen \S+:|--port |127\.0\.0\.1:)(\d+)", text)
    assert found, text
    return int(found.group(1))


async def answers(role: str, port: int) -> bool:
    try:
        if role == "redis":
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"PING\r\n")
            line = await asyncio.wait_for(reader.readline(), 2)
            writer.close()
            return line.startswith(b"+PONG")
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/healthz",
                                                            timeout=aiohttp.ClientTimeout(total=2)) as r:
            return r.status == 200
    except (OSError, aiohttp.ClientError, TimeoutError):
        return False


@pytest.mark.slow
# Start-up, then each of the children killed and awaited in turn (the control plane's too): on a
# loaded machine each comes back in up to a minute or more, past the 300 s every test gets.
@pytest.mark.timeout(600)
async def test_every_child_that_dies_comes_back_and_the_platform_keeps_working(tmp_path: Path) -> None:
    port = free_port()
    state_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("USERLAND_GITHUB")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state_dir), "--students", "alice",
        stdout=asyncio.subprocess.PIPE, stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115, ASYNC230
        env=env, start_new_session=True,
    )
    lines: list[str] = []
    started: dict[int, str] = {}
    reader: asyncio.Task[None] | None = None
    try:
        await read_until_ready(process, lines, stderr=tmp_path / "stderr")
        reader = asyncio.create_task(drain(process, lines))
        first = children_by_role(process.pid)
        assert set(first) == set(ROLES), first
        ports = {role: listen_port(pid) for role, pid in first.items()}
        health = {role: health_port(role, pid) for role, pid in first.items()}
        assert ports["gateway"] == port and health["gateway"] != port

        for role in ROLES:
            old = children_by_role(process.pid)[role]
            os.kill(old, signal.SIGKILL)  # a child of the command this test started

            async def replaced(role: str = role, old: int = old) -> bool:
                pid = children_by_role(process.pid).get(role)
                return pid is not None and pid != old and await answers(role, health[role])

            deadline = asyncio.get_running_loop().time() + MUST_COMPLETE
            while not await replaced():
                assert process.returncode is None, "userland local stopped:\n" + "".join(lines[-20:])
                assert asyncio.get_running_loop().time() < deadline, f"the {role} did not come back"
                await asyncio.sleep(0.2)
            assert listen_port(children_by_role(process.pid)[role]) == ports[role]  # same address
        output = "".join(lines)
        for role in ROLES:
            name = "Redis" if role == "redis" else f"the {role}"
            assert f"  {name} stopped (exit status -9); starting it again in 1 s" in output, output
            assert f"  {name} is running again (restarts: 1)" in output, output
        assert "signed-in sessions were in it: sign in again" in output
        log = (state_dir / "logs" / "local.log").read_text()
        assert log.count('"child exited, restarting it"') >= 4 and log.count('"child restarted"') >= 4

        # Everything works again: a student signs in (Redis is new) and reaches her environment.
        async with browser() as alice:
            response = await dev_login(alice, port, "alice")
            async with response:
                assert response.status == 200, await response.text()
                assert response.url.host == "alice.demo.localhost"
                assert '<code id="owner">alice</code>' in await response.text()
        started = descendants(process.pid)
    finally:
        await stop_local(process, lines, state_dir, reader, stderr=tmp_path / "stderr")
    assert process.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
    assert still_running(started) == [], "left running after Ctrl-C"
    assert mentioning(str(state_dir)) == []
