"""The local runner against the real control plane: processes, Service annotation, Pod status.

The Deployments and Services are made here the way the operator makes them (same names and
labels); the real deployment and replicaset controllers create the Pods and report the
Deployment available once the runner has marked its Pods Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.operator.support import eventually
from userland.local.runner import LocalRunner
from userland.platform import naming
from userland.platform.kube import DEPLOYMENTS, PODS, SERVICES, KubeClient

JSON = dict[str, Any]


def labels(user: str, template: str) -> dict[str, str]:
    return {naming.LABEL_USER: user, naming.LABEL_TEMPLATE: template,
            naming.LABEL_USERLAND: f"{template}-{user}", naming.LABEL_MANAGED_BY: naming.MANAGED_BY}


def deployment_body(user: str, template: str, container: JSON | None = None) -> JSON:
    selector = {naming.LABEL_USER: user, naming.LABEL_TEMPLATE: template}
    container = container or {"name": "ide", "image": "demo:1", "command": ["no-such-ide-here"],
                              "args": ["--port", "8080", "--user", user]}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": naming.deployment_name(template, user), "labels": labels(user, template)},
            "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": labels(user, template)},
                                  "spec": {"containers": [container]}}}}


def service_body(user: str, template: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": naming.service_name(template, user), "labels": labels(user, template),
                         "annotations": {"someone.else/note": "kept"}},
            "spec": {"selector": {naming.LABEL_USER: user, naming.LABEL_TEMPLATE: template},
                     "ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}}


@pytest.fixture
async def runner(kube: KubeClient, namespace: str, tmp_path: Path) -> AsyncIterator[LocalRunner]:
    local = LocalRunner(kube, [namespace], log_dir=tmp_path, backoff=0.2, max_backoff=1.0)
    task = asyncio.create_task(local.run())
    await asyncio.wait_for(local.wait_synced(), 30)
    try:
        yield local
    finally:
        pids = [env.process.pid for env in local.environments.values() if env.process is not None]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Stopping the runner stops every process it started.
    assert not local.environments
    assert not [pid for pid in pids if alive(pid)]


async def annotation(kube: KubeClient, namespace: str, name: str) -> str | None:
    service = await kube.get(SERVICES, namespace, name)
    value = ((service["metadata"].get("annotations")) or {}).get(naming.ANNOTATION_UPSTREAM)
    return str(value) if value else None


async def available(kube: KubeClient, namespace: str, name: str) -> bool:
    deployment = await kube.get(DEPLOYMENTS, namespace, name)
    return bool((deployment.get("status") or {}).get("availableReplicas") == 1)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_demo_environment_lifecycle(kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    await kube.create(SERVICES, namespace, service_body("alice", "demo"))
    await kube.create(DEPLOYMENTS, namespace, deployment_body("alice", "demo"))
    key = (namespace, "demo-alice")

    # A process starts, its address lands on the Service, and it is alice's demo page.
    url = await eventually(lambda: annotation(kube, namespace, "demo-alice-svc"), timeout=30)
    assert url.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as http, http.get(url + "/demo/", headers={"X-User": "alice"}) as r:
        assert r.status == 200
        body = await r.text()
    assert 'id="owner">alice<' in body and "X-User: <code id=\"x-user\">alice</code>" in body
    service = await kube.get(SERVICES, namespace, "demo-alice-svc")
    assert service["metadata"]["annotations"]["someone.else/note"] == "kept"

    # Pods Ready -> the real controllers make the Deployment available.
    await eventually(lambda: available(kube, namespace, "demo-alice"), timeout=30)
    pods = (await kube.list(PODS, namespace))["items"]
    assert pods and all(p["status"]["phase"] == "Running" for p in pods)

    # Killed -> restarted on a new port; the annotation follows.
    env = runner.environments[key]
    assert env.process is not None
    first_pid = env.process.pid
    os.kill(first_pid, signal.SIGKILL)

    async def restarted() -> str | None:
        value = await annotation(kube, namespace, "demo-alice-svc")
        return value if value and value != url and env.process and env.process.pid != first_pid else None

    new_url = await eventually(restarted, timeout=30)
    assert env.starts == 2
    async with aiohttp.ClientSession() as http, http.get(new_url + "/") as r:
        assert r.status == 200
    await eventually(lambda: available(kube, namespace, "demo-alice"), timeout=30)

    # Scaled to 0 -> process stopped, annotation removed.
    assert env.process is not None
    pid = env.process.pid
    await kube.merge_patch(DEPLOYMENTS, namespace, "demo-alice", {"spec": {"replicas": 0}})

    async def stopped() -> bool:
        return not alive(pid) and await annotation(kube, namespace, "demo-alice-svc") is None

    await eventually(stopped, timeout=30)
    assert key not in runner.environments
    service = await kube.get(SERVICES, namespace, "demo-alice-svc")
    assert service["metadata"]["annotations"]["someone.else/note"] == "kept"


async def test_template_command_used_when_it_runs_here(
        kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    container = {"name": "files", "image": "python:3", "command": ["python3"],
                 "args": ["-m", "http.server", "--bind", "127.0.0.1", "$(PORT)"]}
    await kube.create(SERVICES, namespace, service_body("bob", "files"))
    await kube.create(DEPLOYMENTS, namespace, deployment_body("bob", "files", container))
    url = await eventually(lambda: annotation(kube, namespace, "files-bob-svc"), timeout=30)
    assert runner.environments[(namespace, "files-bob")].spec.kind == "template"
    async with aiohttp.ClientSession() as http, http.get(url + "/") as r:
        assert r.status == 200
        assert "Directory listing" in await r.text()
    await eventually(lambda: available(kube, namespace, "files-bob"), timeout=30)

    # The Template changes to a command that does not exist here: the demo replaces it.
    old = runner.environments[(namespace, "files-bob")]
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "files", "image": "python:3", "command": ["no-such-server"], "args": []}]}}}}
    await kube.merge_patch(DEPLOYMENTS, namespace, "files-bob", patch)

    async def replaced() -> str | None:
        env = runner.environments.get((namespace, "files-bob"))
        value = await annotation(kube, namespace, "files-bob-svc")
        return value if env is not None and env is not old and env.spec.kind == "demo" and env.ready \
            and value == env.url else None

    demo_url = await eventually(replaced, timeout=30)
    assert old.process is None
    async with aiohttp.ClientSession() as http, http.get(demo_url + "/") as r:
        assert 'id="owner">bob<' in await r.text()


async def test_process_that_keeps_dying_leaves_pods_not_ready(
        kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    # python3 -c exits at once: the runner retries with backoff, never marks the pod Ready.
    container = {"name": "bad", "image": "x", "command": ["python3"],
                 "args": ["-c", "import sys; sys.exit(3)", "$(PORT)"]}
    await kube.create(SERVICES, namespace, service_body("carol", "bad"))
    await kube.create(DEPLOYMENTS, namespace, deployment_body("carol", "bad", container))

    async def retried() -> bool:
        env = runner.environments.get((namespace, "bad-carol"))
        return env is not None and env.starts >= 3

    await eventually(retried, timeout=30)
    pods = (await kube.list(PODS, namespace))["items"]
    assert pods and not any(c.get("status") == "True" for p in pods
                            for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "Ready")
    assert await annotation(kube, namespace, "bad-carol-svc") is None
    assert not await available(kube, namespace, "bad-carol")
