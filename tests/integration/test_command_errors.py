"""What `userland operator`, `userland gateway` and `userland web` say when they cannot start:
one line on stderr naming what to fix, exit status 2, never a Python traceback.

Real: the commands themselves, run as processes the way a Deployment or `make run` starts them,
and (for the operator's address) the real control plane, so the kubeconfig is a good one and
only the address is wrong.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import free_port

COMMANDS = ("operator", "gateway", "web")
SETTINGS = {"USERLAND_IDENTITY_SECRET": "s" * 40, "USERLAND_PUBLIC_URL": "http://localhost:8000",
            "USERLAND_REDIS_URL": "redis://127.0.0.1:1", "USERLAND_COOKIE_SECURE": "false"}


def run(*args: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("USERLAND_", "KUBERNETES_")) and k != "KUBECONFIG"}
    environment.update({**SETTINGS, "HOME": str(home), **(env or {})})
    return subprocess.run([sys.executable, "-m", "userland.cli.main", *args], env=environment,
                          capture_output=True, text=True, timeout=60, check=False)


def one_clear_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def listen(command: str) -> list[str]:
    """A free address for `command`: only the kubeconfig may be what is wrong."""
    return ["--listen", f"127.0.0.1:{free_port()}"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_kubeconfig(command: str, home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    line = one_clear_line(run(command, "--kubeconfig", str(missing), *listen(command), home=home),
                          f"userland {command}:", str(missing), "No such file")
    assert line.startswith(f"userland {command}: cannot read kubeconfig")


@pytest.mark.parametrize("command", COMMANDS)
def test_no_kubeconfig_at_all_outside_a_cluster(command: str, home: Path) -> None:
    # Not in a cluster, no --kubeconfig, no KUBECONFIG, no ~/.kube/config.
    one_clear_line(run(command, *listen(command), home=home), str(home / ".kube" / "config"), "--kubeconfig")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreadable_kubeconfig(command: str, home: Path, tmp_path: Path) -> None:
    # A folder where the file should be: unreadable for root too (chmod 000 is not).
    folder = tmp_path / "kubeconfig"
    folder.mkdir()
    one_clear_line(run(command, "--kubeconfig", str(folder), *listen(command), home=home),
                   "cannot read kubeconfig", "Is a directory")


@pytest.mark.parametrize(("content", "words"), [
    ("clusters: [\n  - name: {{", ("not valid YAML",)),
    ("just some text", ("is not a kubeconfig",)),
    ("apiVersion: v1\nkind: Config\ncurrent-context: missing\ncontexts: []\n",
     ("no context named 'missing'",)),
])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_kubeconfig_that_is_not_one(command: str, content: str, words: tuple[str, ...], home: Path,
                                      tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    one_clear_line(run(command, "--kubeconfig", str(path), *listen(command), home=home), str(path), *words)


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http"])
def test_the_operator_with_a_bad_listen_address(address: str, control_plane: Any, home: Path) -> None:
    result = run("operator", "--kubeconfig", str(control_plane.kubeconfig), "--listen", address, home=home)
    one_clear_line(result, "userland operator: --listen", repr(address), "host:port")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_the_operator_on_an_address_in_use(control_plane: Any, home: Path, taken_port: int) -> None:
    result = run("operator", "--kubeconfig", str(control_plane.kubeconfig), "--no-leader-election",
                 "--listen", f"127.0.0.1:{taken_port}", home=home)
    one_clear_line(result, f"cannot serve /healthz and /metrics on 127.0.0.1:{taken_port}", "in use")


def test_the_web_ui_on_an_address_in_use(control_plane: Any, home: Path, taken_port: int) -> None:
    result = run("web", "--kubeconfig", str(control_plane.kubeconfig), "--listen", f"127.0.0.1:{taken_port}",
                 home=home, env={"USERLAND_INTERNAL_LISTEN": "127.0.0.1:0"})
    one_clear_line(result, f"userland web: cannot serve on 127.0.0.1:{taken_port}", "in use")
    # Its internal listener (/healthz, /metrics) names itself.
    result = run("web", "--kubeconfig", str(control_plane.kubeconfig), "--listen", "127.0.0.1:0",
                 home=home, env={"USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{taken_port}"})
    one_clear_line(result, f"userland web: cannot serve on 127.0.0.1:{taken_port} (USERLAND_INTERNAL_LISTEN)",
                   "in use")
