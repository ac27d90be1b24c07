"""What the local runner starts for one Deployment: pure functions over its pod template.

The Template's own command is used only when it surely works here: the first container has a
`command` whose executable is on PATH, and the command line can be told a port, either by a
`$(PORT)` reference (Kubernetes' own variable syntax; PORT is set for the process) or by a
`--port` / `--bind-addr` option whose value is rewritten to the chosen loopback port.
Anything else runs the built-in demo environment. `$(PORT)` in the planned command line is
replaced with the port picked at each start.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from userland.platform import naming

PORT_REF = "$(PORT)"
LOOPBACK = "127.0.0.1"
DEMO_MODULE = "userland.local.demo_env"

Which = Callable[[str], str | None]


@dataclass(frozen=True)
class LaunchSpec:
    kind: Literal["template", "demo"]
    argv: tuple[str, ...]
    # Extra environment for the process (the container's literal `env` values).
    env: tuple[tuple[str, str], ...] = ()

    def command(self, port: int) -> list[str]:
        return [arg.replace(PORT_REF, str(port)) for arg in self.argv]

    def environment(self, port: int) -> dict[str, str]:
        return {**dict(self.env), "PORT": str(port)}


def _strings(value: Any) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return list(value)


def _told_a_port(argv: list[str]) -> list[str] | None:
    """`argv` with its port option pointed at `$(PORT)` on loopback, or None if it has none."""
    told = any(PORT_REF in arg for arg in argv)
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--port", "--bind-addr") and i + 1 < len(argv):
            out += [arg, PORT_REF if arg == "--port" else f"{LOOPBACK}:{PORT_REF}"]
            told = True
            i += 2
            continue
        if arg.startswith("--port="):
            arg, told = f"--port={PORT_REF}", True
        elif arg.startswith("--bind-addr="):
            arg, told = f"--bind-addr={LOOPBACK}:{PORT_REF}", True
        out.append(arg)
        i += 1
    return out if told else None


def template_command(container: dict[str, Any], which: Which = shutil.which) -> list[str] | None:
    """The container's command line made to listen on `$(PORT)`, or None when not usable here."""
    command = _strings(container.get("command"))
    args = _strings(container.get("args") or [])
    if not command or args is None:
        return None
    executable = which(command[0])
    if executable is None:
        return None
    return _told_a_port([executable, *command[1:], *args])


def container_env(container: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The literal env values (no valueFrom: there are no Secrets or field refs here)."""
    pairs = []
    for item in container.get("env") or []:
        if not isinstance(item, dict):
            continue
        name, value = item.get("name"), item.get("value")
        if isinstance(name, str) and isinstance(value, str):
            pairs.append((name, value))
    return tuple(pairs)


def owner_of(deployment: dict[str, Any]) -> tuple[str, str]:
    """(user, template) from the operator's labels."""
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    return str(labels.get(naming.LABEL_USER) or ""), str(labels.get(naming.LABEL_TEMPLATE) or "")


def demo_spec(user: str, template: str, python: str = sys.executable) -> LaunchSpec:
    return LaunchSpec(
        kind="demo",
        argv=(python, "-m", DEMO_MODULE, "--port", PORT_REF, "--user", user, "--template", template),
    )


def plan_launch(deployment: dict[str, Any], *, python: str = sys.executable,
                which: Which = shutil.which) -> LaunchSpec:
    user, template = owner_of(deployment)
    pod_spec = (((deployment.get("spec") or {}).get("template") or {}).get("spec")) or {}
    containers = pod_spec.get("containers") or []
    first = containers[0] if containers and isinstance(containers[0], dict) else {}
    argv = template_command(first, which)
    if argv is not None:
        return LaunchSpec(kind="template", argv=tuple(argv), env=container_env(first))
    return demo_spec(user, template, python)


def wanted_replicas(deployment: dict[str, Any]) -> int:
    if (deployment.get("metadata") or {}).get("deletionTimestamp"):
        return 0
    replicas = (deployment.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)
