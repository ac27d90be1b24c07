"""Deletes, drift, missing and broken Templates, readiness: the operator heals and explains."""

from __future__ import annotations

from tests.operator.support import Cluster, OperatorRunner, exists, gone
from tests.support import eventually
from tests.support.clock import ManualClock
from tests.support.objects import template_body
from userland.platform.clients.kube import (
    DEPLOYMENTS,
    EVENTS,
    PVCS,
    SERVICES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    NotFound,
)
from userland.platform.model import naming


async def test_delete_collects_children_and_keeps_the_claim(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode", storage={"size": "1Gi", "mountPath": "/home/coder"})
    await cluster.create_userland("ann", "vscode")
    async with run_operator():
        await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "vscode-ann"))
        await eventually(lambda: exists(kube, PVCS, namespace, "vscode-ann-data"))
        await kube.delete(USERLANDS, namespace, "vscode-ann")
        # The real garbage collector removes what the Userland owned...
        await eventually(lambda: gone(kube, DEPLOYMENTS, namespace, "vscode-ann"), timeout=60)
        await eventually(lambda: gone(kube, SERVICES, namespace, "vscode-ann-svc"), timeout=60)
        # ...and the student's work survives (reclaimPolicy Retain, the default).
        assert await exists(kube, PVCS, namespace, "vscode-ann-data")
        # Re-adding the student gives the same claim back.
        await cluster.create_userland("ann", "vscode")
        await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "vscode-ann"))
        pvcs = (await kube.list(PVCS, namespace))["items"]
        assert [p["metadata"]["name"] for p in pvcs] == ["vscode-ann-data"]


async def test_reclaim_policy_delete_removes_the_claim_with_a_finalizer(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template(
        "scratch", storage={"size": "1Gi", "mountPath": "/work", "reclaimPolicy": "Delete"}
    )
    await cluster.create_userland("ann", "scratch")
    async with run_operator():
        await eventually(lambda: exists(kube, PVCS, namespace, "scratch-ann-data"))
        userland = await kube.get(USERLANDS, namespace, "scratch-ann")
        assert naming.FINALIZER_PVC in userland["metadata"]["finalizers"]
        await kube.delete(USERLANDS, namespace, "scratch-ann")
        await eventually(lambda: gone(kube, USERLANDS, namespace, "scratch-ann"))
        pvc_gone = await eventually(lambda: _pvc_deleting_or_gone(kube, namespace, "scratch-ann-data"))
        assert pvc_gone


async def _pvc_deleting_or_gone(kube: KubeClient, ns: str, name: str) -> bool:
    # pvc-protection may hold a deleted claim until no pod uses it: deleted means marked.
    try:
        pvc = await kube.get(PVCS, ns, name)
    except NotFound:
        return True
    return bool(pvc["metadata"].get("deletionTimestamp"))


async def test_drift_is_repaired_and_foreign_labels_are_kept(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode", image="demo:1")
    await cluster.create_userland("ann", "vscode")
    async with run_operator():
        await eventually(lambda: exists(kube, SERVICES, namespace, "vscode-ann-svc"))
        await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "vscode-ann"))
        # Someone deletes the Service: it comes back.
        await kube.delete(SERVICES, namespace, "vscode-ann-svc")
        await eventually(lambda: exists(kube, SERVICES, namespace, "vscode-ann-svc"))
        # Someone edits the image and adds their own label and annotation.
        await kube.merge_patch(
            DEPLOYMENTS,
            namespace,
            "vscode-ann",
            {
                "metadata": {"labels": {"team": "blue"}, "annotations": {naming.ANNOTATION_UPSTREAM: "x"}},
                "spec": {"template": {"spec": {"containers": [{"name": "ide", "image": "evil:1"}]}}},
            },
        )

        async def restored() -> dict | None:
            d = await kube.get(DEPLOYMENTS, namespace, "vscode-ann")
            image = d["spec"]["template"]["spec"]["containers"][0]["image"]
            return d if image == "demo:1" else None

        deployment = await eventually(restored)
        assert deployment["metadata"]["labels"]["team"] == "blue"
        assert deployment["metadata"]["annotations"][naming.ANNOTATION_UPSTREAM] == "x"
        # Someone strips our labels (so our watch no longer sees it): still repaired.
        await kube.merge_patch(
            SERVICES,
            namespace,
            "vscode-ann-svc",
            {
                "metadata": {"labels": {naming.LABEL_MANAGED_BY: None}},
                "spec": {"ports": [{"name": "http", "port": 9999, "targetPort": 9999, "protocol": "TCP"}]},
            },
        )

        async def service_repaired() -> bool:
            svc = await kube.get(SERVICES, namespace, "vscode-ann-svc")
            return (
                svc["metadata"]["labels"].get(naming.LABEL_MANAGED_BY) == naming.MANAGED_BY
                and svc["spec"]["ports"][0]["port"] == 8080
            )

        # The stripped Service left the operator's view as a delete; the operator re-creates,
        # meets 409 AlreadyExists, reads it and repairs it.
        await eventually(service_repaired)


async def test_missing_template_is_reported_and_recovers_by_itself(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_userland("ann", "later")
    async with run_operator():
        ready = await eventually(lambda: _reason(cluster, "later-ann", "TemplateNotFound"))
        assert ready["status"] == "False" and "later" in ready["message"]
        assert (await cluster.userland_status("later-ann"))["phase"] == "Pending"
        await cluster.create_template("later")
        await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "later-ann"))
        ready = await eventually(lambda: _reason(cluster, "later-ann", "Starting"))
        assert ready["status"] == "False"


async def _reason(cluster: Cluster, name: str, reason: str) -> dict | None:
    ready = await cluster.ready_condition(name)
    return ready if ready.get("reason") == reason else None


async def test_a_podspec_the_api_server_refuses_is_reported_with_its_message(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    bad = template_body("broken")
    bad["spec"]["podSpec"]["containers"][0]["name"] = "Not_A_DNS_Label"
    await kube.create(TEMPLATES, namespace, bad)
    await cluster.create_userland("ann", "broken")
    await cluster.create_userland("bob", "broken")
    async with run_operator() as controller:
        for name in ("broken-ann", "broken-bob"):
            ready = await eventually(lambda n=name: _reason(cluster, n, "InvalidPodSpec"))
            assert "Not_A_DNS_Label" in ready["message"]  # the API server's own words
        assert (await cluster.userland_status("broken-ann"))["phase"] == "Failed"

        async def template_invalid() -> dict | None:
            status = (await kube.get(TEMPLATES, namespace, "broken")).get("status") or {}
            conds = status.get("conditions") or []
            return status if conds and conds[0]["reason"] == "InvalidPodSpec" else None

        status = await eventually(template_invalid)
        assert status["conditions"][0]["status"] == "False"
        assert await eventually(lambda: _template_count(kube, namespace, "broken", 2))
        # Fixing the Template heals every Userland.
        await kube.merge_patch(
            TEMPLATES,
            namespace,
            "broken",
            {"spec": {"podSpec": {"containers": [{"name": "ide", "image": "demo:1"}]}}},
        )
        await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "broken-bob"))
        await eventually(lambda: _reason(cluster, "broken-bob", "Starting"))
        assert controller.health()[0]


async def test_an_invalid_quantity_is_explained_in_the_templates_terms(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    """`memory: 1Gb` is a 400 the API server explains with its JSON decoder's trace; the admin
    reads the Template's own field path, the value and what to write instead."""
    bad = template_body("sql")
    bad["spec"]["podSpec"]["containers"].append(
        {"name": "db", "image": "mariadb:11", "resources": {"limits": {"memory": "1Gb"}}})
    await kube.create(TEMPLATES, namespace, bad)
    await cluster.create_userland("ann", "sql")
    expected = (
        'the API server refused it: spec.podSpec.containers[1].resources.limits.memory: "1Gb" is not a '
        "valid quantity: write a number and a unit such as 512Mi, 2Gi (memory, storage) or 500m (CPU) "
        '("Gb" is not a unit: did you mean "1Gi"?)'
    )
    async with run_operator():

        async def template_refused() -> dict | None:
            status = (await kube.get(TEMPLATES, namespace, "sql")).get("status") or {}
            conds = status.get("conditions") or []
            return conds[0] if conds and conds[0]["reason"] == "InvalidPodSpec" else None

        assert (await eventually(template_refused))["message"] == expected
        ready = await eventually(lambda: _reason(cluster, "sql-ann", "InvalidPodSpec"))
        assert ready["message"] == expected


async def _template_count(kube: KubeClient, ns: str, name: str, count: int) -> bool:
    status = (await kube.get(TEMPLATES, ns, name)).get("status") or {}
    return status.get("userlands") == count


async def test_a_template_that_makes_no_sense_never_crashes_the_operator(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    # The schema passes a container's fields through as-is: wrong types must not hurt us.
    nonsense = template_body("odd")
    nonsense["spec"]["podSpec"] = {
        "containers": [{"name": "ide", "image": "x", "env": "oops", "args": {"not": "a list"}}]
    }
    await kube.create(TEMPLATES, namespace, nonsense)
    await cluster.create_userland("ann", "odd")
    await cluster.create_template("fine")
    await cluster.create_userland("bob", "fine")
    async with run_operator() as controller:
        ready = await eventually(lambda: _reason(cluster, "odd-ann", "InvalidPodSpec"))
        assert "env" in ready["message"] or "args" in ready["message"]
        await eventually(lambda: exists(kube, DEPLOYMENTS, namespace, "fine-bob"))
        assert controller.health()[0]


async def test_ready_once_the_deployment_is_available(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode")
    async with run_operator():
        await eventually(lambda: _reason(cluster, "vscode-ann", "Starting"))
        selector = f"{naming.LABEL_USER}=ann,{naming.LABEL_TEMPLATE}=vscode"
        # The replicaset controller makes the Pod; then we play the kubelet.
        assert await eventually(lambda: cluster.make_pods_ready(selector), timeout=30)
        ready = await eventually(lambda: _reason(cluster, "vscode-ann", "Available"), timeout=30)
        assert ready["status"] == "True"
        status = await cluster.userland_status("vscode-ann")
        assert status["phase"] == "Ready"
        assert status["service"] == "vscode-ann-svc"
        assert status["url"] == "https://ann.vscode.example.edu/"  # her own origin
        userland = await kube.get(USERLANDS, namespace, "vscode-ann")
        assert status["observedGeneration"] == userland["metadata"]["generation"]

        # The story for `kubectl describe`: what was created, and that it became ready.
        async def reasons() -> set[str]:
            events = (await kube.list(EVENTS, namespace))["items"]
            found = {e["reason"] for e in events if e["involvedObject"]["name"] == "vscode-ann"}
            return found if {"Created", "Available"} <= found else set()

        assert await eventually(reasons)


async def test_last_transition_time_moves_only_when_the_status_changes(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode", suspended=True)
    clock = ManualClock()
    async with run_operator(clock=clock):
        first = await eventually(lambda: _reason(cluster, "vscode-ann", "Suspended"))
        clock.advance(120)  # a new time would show in a moved lastTransitionTime
        await kube.merge_patch(USERLANDS, namespace, "vscode-ann", {"spec": {"suspended": False}})
        second = await eventually(lambda: _reason(cluster, "vscode-ann", "Starting"))
        # Same status value (False), new reason: the transition time stays.
        assert second["lastTransitionTime"] == first["lastTransitionTime"]
        assert second["observedGeneration"] == first["observedGeneration"] + 1
        # A new value moves it, to the operator's time.
        assert await eventually(lambda: cluster.make_pods_ready("userland.dev/user=ann"))
        third = await eventually(lambda: _reason(cluster, "vscode-ann", "Available"))
        assert third["lastTransitionTime"] == clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
