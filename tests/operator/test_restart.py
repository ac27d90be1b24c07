"""Restart through the Userland: `userland.dev/restartedAt` rolls the pod template, nothing else does.

The web UI may not write Deployments or Pods; it sets the annotation on the Userland and the
operator carries it into the Deployment's pod template, so the real deployment controller
rolls out a new ReplicaSet (what `kubectl rollout restart` does).
"""

from __future__ import annotations

from typing import Any

from tests.operator.support import Cluster, OperatorRunner
from tests.support import eventually
from userland.operator.controller import Controller
from userland.platform.clients.kube import DEPLOYMENTS, USERLANDS, KubeClient, Resource
from userland.platform.model import naming

REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
SELECTOR = "userland.dev/user=koba1t,userland.dev/template=vscode"


def _restarted_at(obj: dict[str, Any]) -> str | None:
    annotations = obj["spec"]["template"]["metadata"].get("annotations") or {}
    value = annotations.get(naming.ANNOTATION_RESTARTED_AT)
    return str(value) if value is not None else None


def _userland_reconciles(controller: Controller) -> float:
    value = controller.metrics.registry.get_sample_value(
        "userland_operator_reconciles_total", {"kind": "Userland", "result": "ok"}
    )
    return value or 0.0


async def test_a_new_restart_annotation_rolls_the_pods_and_the_same_one_writes_nothing(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode")
    await cluster.create_userland("koba1t", "vscode")
    async with run_operator() as controller:

        async def replica_sets() -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = (await kube.list(REPLICASETS, namespace, label_selector=SELECTOR))[
                "items"
            ]
            return items

        first = await eventually(replica_sets)
        assert len(first) == 1
        assert _restarted_at(first[0]) is None
        generation = (await kube.get(DEPLOYMENTS, namespace, "vscode-koba1t"))["metadata"]["generation"]

        stamp = "2026-11-23T09:00:00Z"
        await kube.merge_patch(
            USERLANDS, namespace, "vscode-koba1t",
            {"metadata": {"annotations": {naming.ANNOTATION_RESTARTED_AT: stamp}}},
        )

        async def rolled() -> list[dict[str, Any]] | None:
            deployment = await kube.get(DEPLOYMENTS, namespace, "vscode-koba1t")
            sets = await replica_sets()
            return sets if _restarted_at(deployment) == stamp and len(sets) == 2 else None

        sets = await eventually(rolled)
        # The real deployment controller made a new ReplicaSet from the new pod template.
        assert sorted(str(_restarted_at(s)) for s in sets) == sorted(["None", stamp])
        deployment = await kube.get(DEPLOYMENTS, namespace, "vscode-koba1t")
        # One change of the Deployment's spec. (Write attempts may be two: the deployment
        # controller's own writes can make the operator's first PUT a 409, then it retries.)
        assert deployment["metadata"]["generation"] == generation + 1
        updates = controller.client.writes[("update", "Deployment")]

        # The same stamp again, with another annotation so the Userland really changes and is
        # reconciled: nothing to roll, so no write.
        before = _userland_reconciles(controller)
        await kube.merge_patch(
            USERLANDS, namespace, "vscode-koba1t",
            {"metadata": {"annotations": {naming.ANNOTATION_RESTARTED_AT: stamp, "note": "seen"}}},
        )

        async def reconciled() -> bool:
            return _userland_reconciles(controller) > before

        await eventually(reconciled)
        assert controller.client.writes[("update", "Deployment")] == updates  # not even an attempt
        after = await kube.get(DEPLOYMENTS, namespace, "vscode-koba1t")
        # (Its resourceVersion may still move: the deployment controller writes its status.)
        assert after["metadata"]["generation"] == generation + 1
        assert len(await replica_sets()) == 2
