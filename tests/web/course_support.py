"""Helpers to make a test namespace a real course, the way an admin does, and to act as the web UI.

Real: kubectl's kustomize renders deploy/course/ through an overlay that sets the namespace
(the documented recipe for a second course), kubectl applies it and deploy/rbac/ to the real
control plane, and the web UI's ServiceAccount talks with its own bearer token (`web-token`
in the API server's token file, tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import KubeClient

REPO = Path(__file__).resolve().parents[2]
KUBECTL = "/usr/bin/kubectl"
WEB_TOKEN = "web-token"


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBECTL, f"--kubeconfig={plane.kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def apply_rbac(plane: ControlPlane) -> None:
    """The base's namespace and RBAC (deploy/namespace.yaml, deploy/rbac/)."""
    for args in (["apply", "-f", str(REPO / "deploy" / "namespace.yaml")],
                 ["apply", "-k", str(REPO / "deploy" / "rbac")]):
        result = kubectl(plane, *args)
        assert result.returncode == 0, result.stderr


def kustomize(folder: Path | str) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_course(namespace: str, *, instructors: str = "teacher",
                  assistants: str = "ta1") -> list[dict[str, Any]]:
    """deploy/course/ for `namespace`: an overlay with `namespace:` and the staff annotations."""
    with tempfile.TemporaryDirectory(prefix="course-") as folder:
        base = os.path.relpath(REPO / "deploy" / "course", folder)
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": namespace,
            "resources": [base],
            "patches": [{
                "target": {"kind": "Namespace"},
                "patch": yaml.safe_dump([
                    {"op": "replace", "path": "/metadata/annotations/userland.dev~1instructors",
                     "value": instructors},
                    {"op": "replace", "path": "/metadata/annotations/userland.dev~1assistants",
                     "value": assistants},
                ]),
            }],
        }
        (Path(folder) / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
        return kustomize(folder)


def make_course(plane: ControlPlane, namespace: str, *, only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Apply the rendered course (or only the given kinds of it) to the control plane."""
    docs = [d for d in render_course(namespace) if not only or d["kind"] in only]
    result = kubectl(plane, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr
    return docs


@asynccontextmanager
async def web_client(plane: ControlPlane, folder: Path) -> AsyncIterator[KubeClient]:
    """A KubeClient authenticated as the web UI's ServiceAccount."""
    path = plane.write_kubeconfig(folder / "web.kubeconfig", WEB_TOKEN)
    async with await KubeClient.connect(str(path)) as client:
        yield client
