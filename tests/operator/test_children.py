"""A Userland becomes a Deployment, a Service (+ PVC) and its Template a NetworkPolicy."""

from __future__ import annotations

from tests.operator.support import Cluster, OperatorRunner, get_or_none
from tests.support import eventually
from userland.platform.clients.kube import (
    DEPLOYMENTS,
    NETWORK_POLICIES,
    PVCS,
    SERVICES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
)
from userland.platform.model import naming


async def test_children_have_the_contracted_names_labels_owner_port_and_user(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode", port=8443)
    userland = await cluster.create_userland("Koba1t", "vscode")
    async with run_operator():
        deployment = await eventually(lambda: get_or_none(kube, DEPLOYMENTS, namespace, "vscode-koba1t"))
        service = await eventually(lambda: get_or_none(kube, SERVICES, namespace, "vscode-koba1t-svc"))
        policy = await eventually(lambda: get_or_none(kube, NETWORK_POLICIES, namespace, "userland-vscode"))

    labels = {
        naming.LABEL_USER: "koba1t",
        naming.LABEL_TEMPLATE: "vscode",
        naming.LABEL_MANAGED_BY: "userland-operator",
    }
    for child in (deployment, service):
        assert labels.items() <= child["metadata"]["labels"].items()
        [owner] = child["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "userland.dev/v1alpha1",
            "kind": "Userland",
            "name": "vscode-koba1t",
            "uid": userland["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--user", "koba1t"]
    assert container["env"] == [{"name": "HOME_USER", "value": "/home/koba1t"}]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["type"] == "ClusterIP"
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8443, 8443)]
    assert service["spec"]["selector"] == {naming.LABEL_USER: "koba1t", naming.LABEL_TEMPLATE: "vscode"}
    # Only the gateway's pods may connect, and only on the Template's port.
    assert policy["spec"]["podSelector"]["matchLabels"][naming.LABEL_TEMPLATE] == "vscode"
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "userland-gateway"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "Template"


async def test_storage_gives_a_claim_a_mount_and_recreate(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("db", storage={"size": "1Gi", "mountPath": "/var/lib/mysql"})
    await cluster.create_userland("alice", "db")
    async with run_operator():
        pvc = await eventually(lambda: get_or_none(kube, PVCS, namespace, "db-alice-data"))
        deployment = await eventually(lambda: get_or_none(kube, DEPLOYMENTS, namespace, "db-alice"))
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "ownerReferences" not in pvc["metadata"], "a retained claim must outlive its Userland"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "userland-data", "persistentVolumeClaim": {"claimName": "db-alice-data"}} in pod[
        "volumes"
    ]
    assert {"name": "userland-data", "mountPath": "/var/lib/mysql"} in pod["containers"][0]["volumeMounts"]


async def test_long_names_are_valid_dns_labels_and_distinct(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    template = "a-very-long-template-name-for-the-advanced-course"  # 49 characters
    users = ["a" * 39, "a" * 38 + "b"]
    await cluster.create_template(template)
    for i, user in enumerate(users):
        await cluster.create_userland(user, template, name=f"long-{i}")
    async with run_operator():

        # The operator writes each Userland's Deployment, then its Service: wait for all four,
        # not for the Deployments alone (the second Service may not exist yet when they do).
        async def children() -> tuple[list[dict], list[dict]] | None:
            deployments = (await kube.list(DEPLOYMENTS, namespace))["items"]
            services = (await kube.list(SERVICES, namespace))["items"]
            return (deployments, services) if len(deployments) == 2 and len(services) == 2 else None

        deployments, services = await eventually(children)
    names = {d["metadata"]["name"] for d in deployments}
    assert len(names) == 2
    assert all(naming.is_valid_dns_label(n) and naming.is_valid_dns_label(n + "-svc") for n in names)
    assert {s["metadata"]["name"] for s in services} == {n + "-svc" for n in names}


async def test_template_edit_reaches_every_userland(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode", image="demo:1")
    for user in ("ann", "bob", "cyd"):
        await cluster.create_userland(user, "vscode")
    async with run_operator():

        async def images() -> set[str]:
            items = (await kube.list(DEPLOYMENTS, namespace))["items"]
            return {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in items if len(items) == 3}

        assert await eventually(images) == {"demo:1"}
        await kube.merge_patch(
            TEMPLATES,
            namespace,
            "vscode",
            {
                "spec": {
                    "podSpec": {
                        "containers": [{"name": "ide", "image": "demo:2", "args": ["--user", "${USER}"]}]
                    }
                }
            },
        )
        await eventually(lambda: _all_equal(images, {"demo:2"}))
        deployment = await kube.get(DEPLOYMENTS, namespace, "vscode-bob")
        # A key the Template dropped (env) is gone: the update replaced the pod spec.
        assert "env" not in deployment["spec"]["template"]["spec"]["containers"][0]


async def _all_equal(fetch, expected):  # type: ignore[no-untyped-def]
    return await fetch() == expected


async def test_suspend_scales_to_zero_and_reports_it(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode", suspended=True)
    async with run_operator():
        deployment = await eventually(lambda: get_or_none(kube, DEPLOYMENTS, namespace, "vscode-ann"))
        assert deployment["spec"]["replicas"] == 0
        status = await eventually(lambda: _phase(cluster, "vscode-ann", "Suspended"))
        assert status["conditions"][0]["reason"] == "Suspended"
        await kube.merge_patch(USERLANDS, namespace, "vscode-ann", {"spec": {"suspended": False}})
        await eventually(lambda: _replicas(kube, namespace, "vscode-ann", 1))


async def _phase(cluster: Cluster, name: str, phase: str):  # type: ignore[no-untyped-def]
    status = await cluster.userland_status(name)
    return status if status.get("phase") == phase else None


async def _replicas(kube: KubeClient, ns: str, name: str, replicas: int) -> bool:
    return bool((await kube.get(DEPLOYMENTS, ns, name))["spec"]["replicas"] == replicas)
