"""`userland local` refuses to start with one clear line when it cannot work (nothing started)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from userland.cli.main import main
from userland.local.controlplane import DEFAULT_CACHE, free_port
from userland.local.examples import add_student_command, demo_template, userland
from userland.local.setup import LocalOptions, SetupError, preflight


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


def test_half_configured_github_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="USERLAND_GITHUB_CLIENT_SECRET"):
        preflight(LocalOptions(state_dir=tmp_path, port=free_port(), k8s_cache=DEFAULT_CACHE,
                               env={"USERLAND_GITHUB_CLIENT_ID": "abc"}))


def test_invalid_student_login(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "--students", "alice,-bad-"]) == 2
    assert "--students" in capsys.readouterr().err


def test_examples_route_the_demo_by_path_and_name_like_the_web_ui() -> None:
    template = demo_template()
    assert template["spec"]["routing"] == {"pathPrefix": "/demo/"}
    assert userland("Alice", "demo")["metadata"]["name"] == "demo-alice"
    assert "metadata: {name: demo-dave}" in add_student_command()
