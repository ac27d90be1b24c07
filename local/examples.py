"""The example objects `userland local` applies: a demo Template, optionally VS Code, students.

The demo Template's container command does not exist on a developer's machine on purpose, so
the local runner starts the built-in demo environment for it. It is routed by path prefix
(`/demo/`), which needs no DNS names: everything is on http://localhost:<port>/.
"""

from __future__ import annotations

import shutil
from typing import Any

from userland.platform import naming

JSON = dict[str, Any]
NAMESPACE = "classroom"
DEMO_TEMPLATE = "demo"
DEMO_PREFIX = "/demo/"
VSCODE_TEMPLATE = "vscode"
VSCODE_PREFIX = "/vscode/"
DEFAULT_STUDENTS = ("alice", "bob", "carol")


def demo_template() -> JSON:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "Template",
        "metadata": {"name": DEMO_TEMPLATE, "namespace": NAMESPACE},
        "spec": {
            "displayName": "Demo environment",
            "description": "Shows who you are signed in as and echoes over a WebSocket.",
            "routing": {"pathPrefix": DEMO_PREFIX},
            "port": 8080,
            "podSpec": {
                "automountServiceAccountToken": False,
                "containers": [{
                    "name": "ide",
                    "image": "userland/demo-ide:1",
                    # Not installed anywhere: locally the runner starts its demo environment.
                    "command": ["userland-demo-ide"],
                    "args": ["--port", "8080", "--user", "${USER}"],
                    "ports": [{"name": "http", "containerPort": 8080}],
                }],
            },
        },
    }


def vscode_template() -> JSON:
    """VS Code (code-server) under /vscode/, for machines that have code-server on PATH.

    Like deploy/examples/template-vscode.yaml, but routed by path and without storage (there is
    no volume provisioner locally); the runner rewrites --bind-addr to a loopback port.
    """
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "Template",
        "metadata": {"name": VSCODE_TEMPLATE, "namespace": NAMESPACE},
        "spec": {
            "displayName": "VS Code",
            "description": "Browser IDE (code-server), running on this machine.",
            "routing": {"pathPrefix": VSCODE_PREFIX},
            "port": 8080,
            "podSpec": {
                "automountServiceAccountToken": False,
                "containers": [{
                    "name": "code-server",
                    "image": "codercom/code-server:4.96.4",
                    "command": ["code-server"],
                    "args": ["--auth", "none", "--bind-addr", "0.0.0.0:8080", "--disable-telemetry",
                             "--disable-update-check"],
                    "env": [{"name": "STUDENT", "value": "${USER}"}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                }],
            },
        },
    }


def templates() -> list[JSON]:
    found = [demo_template()]
    if shutil.which("code-server"):
        found.append(vscode_template())
    return found


def userland(user: str, template: str) -> JSON:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "Userland",
        "metadata": {"name": naming.userland_name(template, user), "namespace": NAMESPACE},
        "spec": {"user": user, "template": template},
    }


def add_student_command(template: str = DEMO_TEMPLATE, user: str = "dave") -> str:
    """A shell one-liner that adds a student (for the banner)."""
    name = naming.userland_name(template, user)
    return (f"printf 'apiVersion: {naming.API_VERSION}\\nkind: Userland\\nmetadata: {{name: {name}}}\\n"
            f"spec: {{user: {user}, template: {template}}}\\n' | kubectl apply -n {NAMESPACE} -f -")
