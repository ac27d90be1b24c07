"""The real `userland operator` command: leader election, health, metrics, clean shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.operator.support import Cluster, exists
from tests.support import eventually, free_port
from userland.platform.clients.kube import DEPLOYMENTS, LEASES, KubeClient, NotFound


class OperatorProcess:
    def __init__(self, identity: str, kubeconfig: Path, namespace: str, log: Path) -> None:
        self.identity = identity
        self.port = free_port()
        env = {**os.environ, "USERLAND_NAMESPACES": namespace, "USERLAND_LEASE_NAMESPACE": namespace}
        self.log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "userland.cli.main",
                "operator",
                "--kubeconfig",
                str(kubeconfig),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--identity",
                identity,
                "--lease-duration",
                "3",
                "--workers",
                "4",
            ],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    async def get(self, path: str) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}{path}") as resp,
        ):
            return resp.status, await resp.text()

    async def is_leader(self) -> bool:
        try:
            _, text = await self.get("/metrics")
        except aiohttp.ClientError:
            return False
        return "userland_operator_leader 1.0" in text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def operators(control_plane, namespace: str, tmp_path: Path) -> Iterator[list[OperatorProcess]]:  # type: ignore[no-untyped-def]
    procs = [
        OperatorProcess(name, control_plane.kubeconfig, namespace, tmp_path / f"{name}.log")
        for name in ("op-a", "op-b")
    ]
    yield procs
    for proc in procs:
        proc.stop()


async def _holder(kube: KubeClient, ns: str) -> str | None:
    try:
        lease = await kube.get(LEASES, ns, "userland-operator")
    except NotFound:
        return None
    return str(lease["spec"].get("holderIdentity") or "") or None


async def test_two_operators_one_leader_and_takeover_after_a_crash(
    operators: list[OperatorProcess], cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    holder = await eventually(lambda: _holder(kube, namespace), timeout=30)
    leader = next(op for op in operators if op.identity == holder)
    standby = next(op for op in operators if op.identity != holder)
    await eventually(leader.is_leader, timeout=20)
    assert not await standby.is_leader()
    for op in operators:
        status, body = await eventually(lambda op=op: _healthy(op), timeout=20)
        assert status == 200, body
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode")
    await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "vscode-ann"), timeout=30)
    _, metrics = await leader.get("/metrics")
    # The Deployment's create, and the Template's server-side dry run (a create too).
    created = 'code="201",component="operator",resource="Deployment",verb="create"'
    assert f"userland_kube_requests_total{{{created}}} 2.0" in metrics
    # The environment figures come from the leader only: the standby's caches hold the same
    # objects, and a sum over both would count every environment twice.
    starting = f'userland_environments{{course="{namespace}",phase="Starting",template="vscode"}} 1.0'

    async def counted() -> bool:
        return starting in (await leader.get("/metrics"))[1]

    await eventually(counted, timeout=60)  # once its status (Starting) came back through the watch
    # Reconciles are timed as they finish.

    async def timed() -> bool:
        return "userland_operator_reconcile_duration_seconds_bucket" in (await leader.get("/metrics"))[1]

    await eventually(timed, timeout=60)
    _, standby_metrics = await standby.get("/metrics")
    assert "userland_operator_leader 0.0" in standby_metrics
    assert "userland_environments{" not in standby_metrics

    leader.proc.send_signal(signal.SIGKILL)  # a crash: the lease is not released
    leader.proc.wait()
    assert await eventually(lambda: _holder_is(kube, namespace, standby.identity), timeout=30)
    await cluster.create_userland("bob", "vscode")
    await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "vscode-bob"), timeout=30)
    lease = await kube.get(LEASES, namespace, "userland-operator")
    assert lease["spec"]["leaseTransitions"] >= 1

    standby.proc.send_signal(signal.SIGTERM)  # a clean stop gives the lease up
    assert await asyncio.to_thread(standby.proc.wait, 20) == 0
    assert await _holder(kube, namespace) is None


async def _healthy(op: OperatorProcess) -> tuple[int, str] | None:
    try:
        return await op.get("/healthz")
    except aiohttp.ClientError:
        return None


async def _holder_is(kube: KubeClient, ns: str, identity: str) -> bool:
    return await _holder(kube, ns) == identity


def test_a_bad_setting_stops_the_command_with_one_clear_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "userland.cli.main", "operator"],
        env={**os.environ, "USERLAND_UPSTREAM_MODE": "carrier-pigeon"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "USERLAND_UPSTREAM_MODE" in lines[0], result.stderr
