"""`userland local` end to end: the command `make run` starts, used as a student would.

Real: everything. The command starts its own control plane (cached binaries), Redis, operator,
gateway and runner; the test signs in through the gateway's development login (following the
real redirects and the form with its single-use state), opens the demo environment, and then
stops the command with SIGINT and checks that nothing it started is left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import MUST_COMPLETE, eventually, free_port
from tests.support.make_run import (
    HTML,
    broken_banner_urls,
    browser,
    descendants,
    dev_login,
    environment_processes,
    mentioning,
    read_until_ready,
    still_running,
    stop_local,
)
from userland.platform.clients.kube import DAEMONSETS, TEMPLATES, USERLANDS, KubeClient

# Each test starts `userland local` itself (tests/support/make_run.py), not through a fixture.
pytestmark = pytest.mark.make_run

__all__ = ["HTML", "browser", "read_until_ready"]  # bench/ and older tests import them from here


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
        await read_until_ready(process, lines, stderr=tmp_path / "stderr")
        output = "".join(lines)
        assert f"Open        http://demo.localhost:{port}/" in output
        assert f"such as http://alice.demo.localhost:{port}/" in output
        assert f"export KUBECONFIG={state_dir}/kubeconfig" in output
        started = descendants(process.pid)
        # etcd, apiserver, controller-manager, redis, operator, web UI, gateway (the demo
        # environments are served by the runner itself)
        assert len(started) >= 7, started
        assert "Web UI      " in output and "teacher (instructor" in output and "admin (admin)" in output
        # Every address the banner sends a newcomer to answers (none is a 404 or an error).
        assert await broken_banner_urls(output) == [], output
        # The operator reports where each student reaches their environment.
        async with await KubeClient.connect(str(state_dir / "kubeconfig")) as kube:
            status = (await kube.get(USERLANDS, "classroom", "demo-alice")).get("status") or {}

            # Nothing to pull onto nodes here, and the Template says so (docs/capacity.md).
            async def images_local() -> dict[str, Any] | None:
                template = (await kube.get(TEMPLATES, "classroom", "demo")).get("status") or {}
                found = [c for c in template.get("conditions") or [] if c["type"] == "ImagesPulled"]
                return found[0] if found and found[0]["reason"] == "ImagesLocal" else None
            images = await eventually(images_local)
            assert (images["status"], images["message"]) == ("True", "images are local: nothing to pull")
            assert (await kube.list(DAEMONSETS, "classroom"))["items"] == []
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

        # `kill -USR1` prints where every thread is (for a start or a stop that hangs), and
        # nothing else happens: Ctrl-C below still ends it cleanly.
        process.send_signal(signal.SIGUSR1)
        await eventually(lambda: "most recent call first" in (tmp_path / "stderr").read_text(),
                         timeout=MUST_COMPLETE)
    finally:
        # SIGINT, what Ctrl-C in the terminal sends
        await stop_local(process, lines, state_dir, stderr=tmp_path / "stderr")
    assert process.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
    assert still_running(started) == [], "left running after Ctrl-C"
    assert mentioning(str(state_dir)) == []
    assert environment_processes(state_dir) == {}


def _apps_bin() -> Path:
    folder = Path(os.environ.get("USERLAND_APPS_BIN") or "/nonexistent")
    if not (folder / "userland-phpmyadmin").exists() or not (folder / "userland-mariadb").exists():
        pytest.skip(f"the real apps are not installed in {folder} (USERLAND_APPS_BIN): run `make local-apps`")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
async def test_make_run_with_the_real_apps_leaves_nothing_running(tmp_path: Path, signum: int) -> None:
    """MariaDB and phpMyAdmin (whose `php -S` forks four workers) for two students, then
    Ctrl-C, or the command killed outright (SIGKILL: no cleanup of its own can run): every
    process of every environment is gone, none still bound to a Pod's address."""
    apps = _apps_bin()
    port = free_port()
    state_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("USERLAND_GITHUB")}
    env["USERLAND_APPS_BIN"] = str(apps)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "userland.cli.main", "local", "--port", str(port),
        "--state-dir", str(state_dir), "--students", "alice,bob",
        stdout=asyncio.subprocess.PIPE, stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115, ASYNC230
        env=env, start_new_session=True,
    )
    lines: list[str] = []
    try:
        await read_until_ready(process, lines, stderr=tmp_path / "stderr")
        # Both students' phpMyAdmins serve, each a `php -S` with its workers.

        def php_servers() -> dict[int, str]:
            running = environment_processes(state_dir)
            servers = {pid: cmd for pid, cmd in running.items() if cmd.startswith("php -S ")}
            return servers if len(servers) >= 2 * 5 else {}

        servers = await eventually(php_servers, timeout=MUST_COMPLETE, interval=0.5)
        assert len({cmd.split()[2] for cmd in servers.values()}) == 2  # two Pods' addresses
        started = descendants(process.pid)  # the control plane, the services, every environment
        assert set(servers) <= set(started)
        process.send_signal(signum)
        await asyncio.wait_for(process.wait(), MUST_COMPLETE)
        if signum == signal.SIGINT:
            assert process.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
        # Killed outright, its reaper stops the environments a moment later (a minute at most:
        # on a machine loaded tenfold by other suites, 30 s once was not enough).
        await eventually(lambda: environment_processes(state_dir) == {}, timeout=MUST_COMPLETE, interval=0.2,
                         explain=lambda: f"still running: {environment_processes(state_dir)}")
        await eventually(lambda: still_running(started) == [], timeout=MUST_COMPLETE, interval=0.2)
        assert mentioning(str(state_dir)) == []
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        for pid in environment_processes(state_dir):  # never leave them to other tests
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
