"""`userland local` refuses to start with one clear line when it cannot work (nothing started)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
from pathlib import Path

import pytest

from userland.cli.main import main
from userland.local.controlplane import DEFAULT_CACHE, free_port
from userland.local.examples import add_student_command, demo_template, userland
from userland.local.setup_options import LocalOptions, SetupError, preflight


def test_busy_port_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["local", "--port", str(port), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"userland local: port {port} is already in use on 127.0.0.1: "
        "stop what uses it or choose another with --port"]
    assert not (tmp_path / "state").exists()


def test_missing_control_plane_binaries(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match=r"kube-apiserver is not built in .*: run `make control-plane`"):
        preflight(LocalOptions(state_dir=tmp_path, port=free_port(), k8s_cache=tmp_path / "none", env={}))


@pytest.mark.control_plane  # preflight passes only where `make control-plane` has built it
def test_half_configured_github_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="USERLAND_GITHUB_CLIENT_SECRET"):
        preflight(LocalOptions(state_dir=tmp_path, port=free_port(), k8s_cache=DEFAULT_CACHE,
                               env={"USERLAND_GITHUB_CLIENT_ID": "abc"}))


def test_invalid_student_login(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "--students", "alice,-bad-"]) == 2
    assert "--students" in capsys.readouterr().err


def test_an_idle_time_that_is_no_duration_is_one_clear_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "--idle", "soon", "--state-dir", str(tmp_path / "state")]) == 2
    assert capsys.readouterr().err.strip() == (
        "userland local: --idle 'soon' is not a duration: write it like 1m, 90s or 2h")
    assert not (tmp_path / "state").exists()


def test_make_run_passes_idle_through() -> None:
    """`make run IDLE=1m` runs `userland local --idle 1m` (make's dry run prints the command)."""
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(["make", "-n", "-C", str(repo), "run", "IDLE=1m", "SKIP_APPS=1"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert ".venv/bin/userland local --idle 1m" in result.stdout, result.stdout


def test_examples_route_the_demo_by_host_and_name_like_the_web_ui() -> None:
    template = demo_template()
    assert template["spec"]["routing"] == {"host": "demo.localhost"}  # alice.demo.localhost is hers
    assert userland("Alice", "demo")["metadata"]["name"] == "demo-alice"
    assert "metadata: {name: demo-dave}" in add_student_command()


def _in_time_wait(port: int) -> bool:
    """Whether /proc/net/tcp lists a connection of 127.0.0.1:`port` in TIME_WAIT (state 06)."""
    local = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(row.split()[1] == local and row.split()[3] == "06" for row in rows)


@pytest.mark.control_plane  # preflight passes only where `make control-plane` has built it
def test_a_port_left_in_time_wait_is_free(tmp_path: Path) -> None:
    """The previous `make run` stopped a moment ago: its port has connections in TIME_WAIT,
    which the gateway's own listener (SO_REUSEADDR) does not mind; neither may the check."""
    with socket.socket() as listener:
        # As the gateway's (aiohttp's) listener: its connections' TIME_WAIT carry the flag too.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        server_side, _ = listener.accept()
        server_side.close()  # the side that closes first keeps the TIME_WAIT
        client.recv(1)
        client.close()
    assert _in_time_wait(port), "the test needs a connection in TIME_WAIT"
    preflight(LocalOptions(state_dir=tmp_path, port=port, k8s_cache=DEFAULT_CACHE, env={}))
    # And a listener can really take it, as the gateway will.
    with socket.socket() as gateway:
        gateway.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        gateway.bind(("127.0.0.1", port))
        gateway.listen()


def test_make_run_takes_a_port(tmp_path: Path) -> None:
    """`make run PORT=8100` runs `userland local --port 8100` (make -n prints, runs nothing)."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "MAKEFLAGS", "MFLAGS")}
    out = subprocess.run(["make", "-n", "-s", "-C", str(repo), "run", "PORT=8100"], capture_output=True,
                         text=True, check=True, env=env).stdout
    assert "userland local --port 8100" in out
    default = subprocess.run(["make", "-n", "-s", "-C", str(repo), "run"], capture_output=True,
                             text=True, check=True, env=env).stdout
    assert "userland local" in default and "--port" not in default


async def test_a_part_that_does_not_stop_is_logged_with_its_stack_and_left(
        caplog: pytest.LogCaptureFixture) -> None:
    """Ctrl-C ends `userland local` whatever one part does: a runner task that ignores its
    cancellation is waited for `limit` seconds, then logged (where it is stuck) and left."""
    from userland.local.stopping import within as _within

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # a cleanup that never ends, as a hung process wait would be

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    task.cancel()
    with caplog.at_level(logging.WARNING, logger="userland.local.setup"):
        await _within(task, 0.2, "the local runner and its environments")
    assert not task.done()
    [record] = [r for r in caplog.records
                if r.getMessage() == "a part did not stop in time: going on without it"]
    assert record.__dict__["part"] == "the local runner and its environments"
    assert "stubborn" in record.__dict__["stack"] and "asyncio.sleep(3600)" in record.__dict__["stack"]
    task.get_coro().close()  # type: ignore[union-attr]


async def test_a_part_that_stops_is_waited_for_and_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    from userland.local.stopping import within as _within

    task = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    task.cancel()
    with caplog.at_level(logging.INFO, logger="userland.local.setup"):
        await _within(task, 30, "the local runner and its environments")
    assert task.cancelled()
    assert caplog.records == []
