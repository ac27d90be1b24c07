"""A Prometheus for `make run` (`userland local --prometheus`): every part of the platform
scraped, the project's alert and recording rules loaded, on a loopback port.

Debian's `prometheus` package (scripts/install-deps.sh installs it) runs as a child of `userland
local`, with its data under the state folder (`.run/prometheus/`, two days kept). It scrapes the
control plane (the API server with the admin token, etcd), the operator, the gateway's and the
web UI's internal listeners and the local runner, and evaluates deploy/observability/rules/ (no
Alertmanager: the alerts show on its /classic/alerts page; Debian's 2.42 has no /alerts). A
newcomer opens its address and queries what docs/metrics.md lists; the tests query it the same
way (tests/observability/).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from userland.local.controlplane import ADMIN_TOKEN, ControlPlaneError, find_repo

DEFAULT_INTERVAL = 5.0
RETENTION = "2d"


def rule_files() -> list[Path]:
    """The project's rule files (alerts and recording rules), when run from a checkout."""
    try:
        folder = find_repo() / "deploy" / "observability" / "rules"
    except ControlPlaneError:
        return []
    return sorted(folder.glob("*.yaml"))


@dataclass(frozen=True)
class Targets:
    """Where each part of the local platform serves its metrics (host:port)."""

    apiserver: str
    etcd: str
    operator: str
    gateway: str
    web: str
    runner: str
    store: str = ""  # the assignment store, when the example assignment runs


def config(targets: Targets, *, interval: float = DEFAULT_INTERVAL, rules: list[Path] | None = None
           ) -> dict[str, Any]:
    """prometheus.yml as a dict. Job names are the components'; the rules and dashboards never
    depend on them (a cluster's Prometheus names its jobs its own way)."""
    every = f"{max(interval, 0.1):g}s"

    def static(job: str, target: str, **extra: Any) -> dict[str, Any]:
        return {"job_name": job, "static_configs": [{"targets": [target]}], **extra}

    return {
        "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
        "rule_files": [str(p) for p in (rule_files() if rules is None else rules)],
        "scrape_configs": [
            static("kube-apiserver", targets.apiserver, scheme="https",
                   tls_config={"insecure_skip_verify": True},  # its own self-signed certificate
                   authorization={"type": "Bearer", "credentials": ADMIN_TOKEN}),
            static("etcd", targets.etcd),
            static("userland-operator", targets.operator),
            static("userland-gateway", targets.gateway),
            static("userland-web", targets.web),
            static("userland-runner", targets.runner),
            *([static("userland-store", targets.store)] if targets.store else []),
        ],
    }


def command(state_dir: Path, port: int, config_path: Path) -> list[str]:
    program = shutil.which("prometheus")
    if program is None:
        raise FileNotFoundError("prometheus is not installed: run `make deps` (apt-get install prometheus)")
    data = state_dir / "prometheus" / "data"
    data.mkdir(parents=True, exist_ok=True)
    return [program, f"--config.file={config_path}", f"--storage.tsdb.path={data}",
            f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address=127.0.0.1:{port}"]


def write_config(state_dir: Path, targets: Targets, *, interval: float = DEFAULT_INTERVAL) -> Path:
    folder = state_dir / "prometheus"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config(targets, interval=interval), sort_keys=False))
    return path
