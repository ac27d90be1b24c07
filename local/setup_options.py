"""What `userland local` is asked for (`LocalOptions`, from the command line) and everything
that can be checked before starting anything (`preflight`); local/setup.py starts it all."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from userland.local import examples
from userland.local import prometheus as local_prometheus
from userland.local.controlplane import DEFAULT_CACHE, ControlPlaneError, find_repo
from userland.platform.model.settings import env_name

GITHUB_ID, GITHUB_SECRET = env_name("github_client_id"), env_name("github_client_secret")


class SetupError(Exception):
    """Something that stops `userland local`; str() is one line saying what and what to do."""


@dataclass(frozen=True)
class LocalOptions:
    state_dir: Path
    port: int = 8000
    students: tuple[str, ...] = examples.DEFAULT_STUDENTS
    reset: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    k8s_cache: Path = DEFAULT_CACHE
    # A Prometheus scraping everything, with the project's rules (local/prometheus.py), and how
    # often it scrapes and evaluates.
    prometheus: bool = False
    prometheus_interval: float = local_prometheus.DEFAULT_INTERVAL
    # Every example Template's idleTimeout (`make run IDLE=1m`, to try sleep); None: as shipped.
    idle: str | None = None

    @property
    def public_url(self) -> str:
        return f"http://localhost:{self.port}"

    def origin(self, template_host: str, student: str | None = None) -> str:
        """A Template's address (`student` None) or a student's own origin under it."""
        return f"http://{student + '.' if student else ''}{template_host}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def github(self) -> bool:
        return bool(self.env.get(GITHUB_ID) and self.env.get(GITHUB_SECRET))


def default_state_dir() -> Path:
    try:
        return find_repo() / ".run"
    except ControlPlaneError:
        return Path.cwd() / ".run"


def port_is_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port`. SO_REUSEADDR as the gateway's own socket has it: a
    port whose last connections are only in TIME_WAIT (the previous `make run`, stopped a moment
    ago) is free for a listener, and refusing it would make a restart wait a minute for nothing."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def preflight(options: LocalOptions) -> None:
    """Everything that can be checked before starting anything; raises SetupError."""
    if not 0 < options.port < 65536:
        raise SetupError(f"--port {options.port} is not a port number")
    if not port_is_free(options.port):
        raise SetupError(f"port {options.port} is already in use on 127.0.0.1: "
                         "stop what uses it or choose another with --port")
    for program, package in (("etcd", "etcd-server"), ("redis-server", "redis-server"),
                             ("openssl", "openssl")):
        if shutil.which(program) is None:
            raise SetupError(f"{program} is not installed: run `make deps` (or apt-get install {package})")
    for binary in ("kube-apiserver", "kube-controller-manager"):
        if not (options.k8s_cache / "bin" / binary).exists():
            raise SetupError(f"{binary} is not built in {options.k8s_cache}/bin: "
                             "run `make control-plane` once (it builds for a few minutes)")
    if options.prometheus and shutil.which("prometheus") is None:
        raise SetupError("prometheus is not installed: run `make deps` (or apt-get install prometheus)")
    env = options.env
    if bool(env.get(GITHUB_ID)) != bool(env.get(GITHUB_SECRET)):
        raise SetupError(f"set both {GITHUB_ID} and {GITHUB_SECRET}, or neither "
                         "(then the development login is used)")
