"""The example objects `userland local` applies: the course, its Templates, its students.

The Templates are the very files an admin applies to a cluster (deploy/course/ and
deploy/examples/: VS Code, JupyterLab, MariaDB + phpMyAdmin), with one change, the one an
admin's overlay makes too: the host they are served on. Each is routed by
`<name>.localhost`, so each student has their own origin, such as
`http://alice.vscode.localhost:<port>/`, with no DNS set-up: browsers resolve every
`*.localhost` name to this machine. The platform itself is `http://localhost:<port>/`.

The `demo` Template is local only: its program is the runner's built-in demo environment,
which needs nothing installed, so `make run` shows something even before `make local-apps`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from userland.platform.model import naming
from userland.platform.model.bodies import userland_body

JSON = dict[str, Any]
NAMESPACE = "classroom"
DEMO_TEMPLATE = "demo"
DEMO_HOST = "demo.localhost"
DEFAULT_STUDENTS = ("alice", "bob", "carol")
# How many of the students (the first ones) also get every shipped Template.
APP_STUDENTS = 2
INSTRUCTOR = "teacher"  # named on the course namespace
ASSISTANT = "tina"  # an assistant of the course: help in the lab (students ask on /me, she joins)
ADMIN = "admin"  # USERLAND_ADMINS for the gateway
SHIPPED_TEMPLATES = (
    "deploy/course/template-vscode.yaml",
    "deploy/examples/template-jupyterlab.yaml",
    "deploy/examples/template-mariadb-phpmyadmin.yaml",
)


def local_host(template: str) -> str:
    return f"{template}.localhost"


def shipped_templates(repo: Path) -> list[JSON]:
    """The Templates of deploy/, as an admin applies them, routed by `<name>.localhost`."""
    found = []
    for path in SHIPPED_TEMPLATES:
        template = copy.deepcopy(yaml.safe_load((repo / path).read_text()))
        template["metadata"]["namespace"] = NAMESPACE
        template["spec"]["routing"] = {"host": local_host(template["metadata"]["name"])}
        found.append(template)
    return found


def course_metadata() -> JSON:
    """The merge patch that makes the example namespace a course for the web UI."""
    return {"metadata": {
        "labels": {"app.kubernetes.io/part-of": "userland", naming.LABEL_COURSE: "true"},
        "annotations": {naming.ANNOTATION_COURSE_TITLE: "Classroom (local)",
                        naming.ANNOTATION_INSTRUCTORS: INSTRUCTOR, naming.ANNOTATION_ASSISTANTS: ASSISTANT}}}


def demo_template() -> JSON:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "Template",
        "metadata": {"name": DEMO_TEMPLATE, "namespace": NAMESPACE},
        "spec": {
            "displayName": "Demo environment",
            "description": "Shows who you are signed in as and echoes over a WebSocket.",
            "routing": {"host": DEMO_HOST},
            "port": 8080,
            "podSpec": {
                "automountServiceAccountToken": False,
                "containers": [{
                    "name": "ide",
                    "image": "userland/demo-ide:1",
                    # The runner's built-in demo environment (local/containers.py).
                    "command": ["userland-demo-ide"],
                    "args": ["--port", "8080", "--user", "${USER}"],
                    "ports": [{"name": "http", "containerPort": 8080}],
                }],
            },
        },
    }


def templates(repo: Path | None) -> list[JSON]:
    """The demo, and the shipped Templates when the repository (deploy/) is at hand."""
    return [demo_template(), *(shipped_templates(repo) if repo is not None else [])]


def userland(user: str, template: str) -> JSON:
    return userland_body(template, user, namespace=NAMESPACE)


def add_student_command(template: str = DEMO_TEMPLATE, user: str = "dave") -> str:
    """A shell one-liner that adds a student (for the banner)."""
    name = naming.userland_name(template, user)
    return (f"printf 'apiVersion: {naming.API_VERSION}\\nkind: Userland\\nmetadata: {{name: {name}}}\\n"
            f"spec: {{user: {user}, template: {template}}}\\n' | kubectl apply -n {NAMESPACE} -f -")
