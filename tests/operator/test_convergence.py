"""Restarts converge exactly, the steady state writes nothing, and resyncs are free."""

from __future__ import annotations

from tests.operator.support import Cluster, OperatorRunner, caught_up
from tests.support import eventually
from userland.platform.clients.kube import DEPLOYMENTS, EVENTS, SERVICES, USERLANDS, KubeClient

USERS = [f"student{i:02d}" for i in range(40)]


async def _children(kube: KubeClient, ns: str) -> tuple[list[str], list[str]]:
    deployments = sorted(d["metadata"]["name"] for d in (await kube.list(DEPLOYMENTS, ns))["items"])
    services = sorted(s["metadata"]["name"] for s in (await kube.list(SERVICES, ns))["items"])
    return deployments, services


async def test_operator_restarted_mid_work_converges_with_nothing_missing_or_extra(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode")
    for user in USERS:
        await cluster.create_userland(user, "vscode")
    async with run_operator(workers=2) as first:
        # Stop the first operator as soon as it has done part of the work.
        await eventually(lambda: _some_written(first), interval=0.01)
    partial, _ = await _children(kube, namespace)
    assert 0 < len(partial) < len(USERS), "the first operator should be stopped mid-work"
    async with run_operator() as second:

        async def complete() -> bool:
            deployments, services = await _children(kube, namespace)
            return len(deployments) == len(USERS) and len(services) == len(USERS)

        await eventually(complete, timeout=60)
        deployments, services = await _children(kube, namespace)
        assert deployments == sorted(f"vscode-{u}" for u in USERS)
        assert services == sorted(f"vscode-{u}-svc" for u in USERS)
        # Whatever the first one left half done was finished, not duplicated or re-created.
        creates = second.client.writes[("create", "Deployment")]
        assert creates == len(USERS) - len(partial)


async def _some_written(controller) -> bool:  # type: ignore[no-untyped-def]
    return controller.client.writes[("create", "Deployment")] >= 5


async def test_steady_state_makes_zero_writes(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode", storage={"size": "1Gi", "mountPath": "/home/coder"})
    for user in USERS[:10]:
        await cluster.create_userland(user, "vscode")
    await cluster.create_userland("ghost", "missing-template")
    async with run_operator() as controller:

        async def settled() -> bool:
            statuses = [
                (u.get("status") or {}).get("phase") for u in (await kube.list(USERLANDS, namespace))["items"]
            ]
            return statuses.count("Starting") == 10 and statuses.count("Pending") == 1

        await eventually(settled)
        # Until the watches have brought every earlier write (no event of them still on its way).
        await caught_up(controller, kube, namespace)
        await _drain(controller)
        before = sum(controller.client.writes.values())
        # Every object is reconciled again (as the periodic resync does), twice.
        for _ in range(2):
            controller.enqueue_all()
            await _drain(controller)
        # Whatever it wrote would come back as watch events: wait until they all have.
        await caught_up(controller, kube, namespace)
        await _drain(controller)
        writes = sum(controller.client.writes.values()) - before
        assert writes == 0, dict(controller.client.writes)
        reconciles = sum(
            s.value
            for m in controller.metrics.reconciles.collect()
            for s in m.samples
            if s.name.endswith("_total")
        )
        assert reconciles > 2 * 11, "the resyncs must really have reconciled everything"


async def _drain(controller) -> None:  # type: ignore[no-untyped-def]
    async def empty() -> bool:
        return controller.queue.depth == 0 and not controller.queue._active

    await eventually(empty, interval=0.05)
    await controller.events.flush()


async def test_a_restarted_operator_writes_nothing_and_records_no_events(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    """A restart lists every child afresh (list items carry no kind/apiVersion): nothing may
    look "changed outside the operator" because of how it was read."""
    await cluster.create_template("vscode", storage={"size": "1Gi", "mountPath": "/home/coder"})
    for user in USERS[:5]:
        await cluster.create_userland(user, "vscode")
    async with run_operator() as first:

        async def all_phases(phase: str) -> bool:
            items = (await kube.list(USERLANDS, namespace))["items"]
            return len(items) == 5 and all((u.get("status") or {}).get("phase") == phase for u in items)

        await eventually(lambda: all_phases("Starting"))
        # The replicaset controller makes the Pods a moment after the Deployments: mark them
        # ready once all five exist (marking whichever exist so far left some never ready).
        async def all_pods_ready() -> bool:
            return await cluster.make_pods_ready("userland.dev/template=vscode") == 5

        await eventually(all_pods_ready)
        await eventually(lambda: all_phases("Ready"))
        await _drain(first)
    events_before = {e["metadata"]["name"] for e in (await kube.list(EVENTS, namespace))["items"]}
    async with run_operator() as second:
        await _drain(second)
        await caught_up(second, kube, namespace)  # watch events of anything it might have written
        await _drain(second)
        assert dict(second.client.writes) == {}
    new_events = [f"{e['reason']}: {e['message']}" for e in (await kube.list(EVENTS, namespace))["items"]
                  if e["metadata"]["name"] not in events_before]
    assert new_events == []
