"""`kubectl apply -k deploy/` on a real node: every Deployment available with the shipped
probes, security contexts and limits, as the kubelet applied them; the example Templates
accepted; NetworkPolicies that select the right Pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.cluster.conftest import (
    COURSE,
    DEPLOYMENTS,
    NODE,
    REPO,
    SYSTEM,
    Platform,
    kubectl,
    kubectl_json,
    wait_until,
)


def shipped() -> dict[tuple[str, str], dict[str, Any]]:
    """deploy/ as kustomize renders it (what the admin applies), by (kind, name)."""
    docs = yaml.safe_load_all(kubectl("kustomize", str(REPO / "deploy")))
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


def contains(got: Any, want: Any) -> bool:
    """`want` is in `got`, the API server's defaults (such as a probe's scheme) aside."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and contains(got[k], v) for k, v in want.items())
    return bool(got == want)


def quantity_bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def cgroup_of(pod: dict[str, Any], controller: str) -> Path:
    """The Pod's cgroup on this node (cgroupfs driver, under the node's own cgroup root)."""
    qos = pod["status"]["qosClass"].lower()
    base = Path("/sys/fs/cgroup") / controller / NODE.namespace / "kubepods"
    pod_folder = f"pod{pod['metadata']['uid']}"
    return base / pod_folder if qos == "guaranteed" else base / qos / pod_folder


def test_every_deployment_is_available(platform: Platform) -> None:
    rendered = shipped()
    for name in DEPLOYMENTS:
        live = kubectl_json("-n", SYSTEM, "get", "deployment", name)
        want = rendered[("Deployment", name)]["spec"]["replicas"]
        assert live["status"].get("availableReplicas") == want, (name, live["status"])
        assert live["status"].get("readyReplicas") == want


def test_pods_run_with_the_shipped_security_contexts_probes_and_limits(platform: Platform) -> None:
    rendered = shipped()
    for name in DEPLOYMENTS:
        spec = rendered[("Deployment", name)]["spec"]["template"]["spec"]
        pods = kubectl_json("-n", SYSTEM, "get", "pods", "-l", f"app.kubernetes.io/name={name}")["items"]
        running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        assert running, name
        for pod in running:
            assert pod["status"]["phase"] == "Running"
            assert contains(pod["spec"]["securityContext"], spec["securityContext"]), name
            pairs = zip(pod["spec"]["containers"], spec["containers"], strict=True)
            for container, shipped_container in pairs:
                # What deploy/ ships reached the kubelet unchanged ...
                for key in ("securityContext", "readinessProbe", "livenessProbe"):
                    if key in shipped_container:
                        assert contains(container[key], shipped_container[key]), (name, key, container[key])
                assert container["resources"] == shipped_container["resources"], name
            statuses = pod["status"]["containerStatuses"]
            # ... and the kubelet ran it: ready (readiness probes pass), never restarted
            # (liveness probes pass, the read-only root filesystem and dropped capabilities
            # are enough for it to run) ...
            assert all(s["ready"] for s in statuses), (name, statuses)
            assert all(s["restartCount"] == 0 for s in statuses), (name, statuses)
            # ... inside the memory limit the kernel enforces for it.
            limit = quantity_bytes(spec["containers"][0]["resources"]["limits"]["memory"])
            pod_cgroup = cgroup_of(pod, "memory")
            enforced = int((pod_cgroup / "memory.limit_in_bytes").read_text())
            assert enforced == limit, (name, pod_cgroup, enforced)


def test_processes_run_as_the_shipped_unprivileged_users(platform: Platform) -> None:
    # The user a container's processes really have, read from the node's /proc through their
    # cgroup: not what the Pod spec asks, what the kernel sees.
    expected = {"userland-operator": 10001, "userland-gateway": 10001, "userland-web": 10001,
                "userland-redis": 999, "userland-store": 10001}
    for name, uid in expected.items():
        pods = kubectl_json("-n", SYSTEM, "get", "pods", "-l", f"app.kubernetes.io/name={name}")["items"]
        pod = next(p for p in pods if not p["metadata"].get("deletionTimestamp"))
        pids = [int(line) for f in cgroup_of(pod, "pids").glob("*/cgroup.procs")
                for line in f.read_text().split()]
        uids = set()
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            (line,) = [x for x in status.splitlines() if x.startswith("Uid:")]
            uids.add(int(line.split()[1]))
            caps = next(x for x in status.splitlines() if x.startswith("CapEff:")).split()[1]
            if int(line.split()[1]) != 65535:  # the pause process
                assert int(caps, 16) == 0, (name, pid, caps)  # capabilities: drop ALL
        assert uid in uids, (name, uids)
        assert 0 not in uids, (name, uids)


def test_the_example_templates_are_accepted(platform: Platform) -> None:
    def ready() -> list[str]:
        items = kubectl_json("-n", COURSE, "get", "templates")["items"]
        names = []
        for item in items:
            conditions = (item.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                names.append(item["metadata"]["name"])
        return sorted(names) if len(names) == 4 else []

    # The operator checked each podSpec with a server-side dry run of its Deployment.
    assert wait_until(ready, "Templates Ready", timeout=60) == ["jupyterlab", "mariadb", "testenv", "vscode"]


def _selected(namespace: str, selector: dict[str, Any]) -> set[str]:
    labels = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
    args = ["-n", namespace, "get", "pods"] + (["-l", labels] if labels else [])
    return {p["metadata"]["name"] for p in kubectl_json(*args)["items"]
            if not p["metadata"].get("deletionTimestamp")}


def test_network_policies_select_the_right_pods(platform: Platform) -> None:
    # NOTE: the bridge CNI of this node does not enforce NetworkPolicies (no policy engine runs
    # here), so traffic the policies forbid would still pass on this node. What can be checked
    # is what each policy applies to: that it selects exactly the Pods it is meant for.
    policies = {p["metadata"]["name"]: p for p in
                kubectl_json("-n", SYSTEM, "get", "networkpolicies")["items"]}
    system_pods = _selected(SYSTEM, {})
    assert _selected(SYSTEM, policies["default-deny-ingress"]["spec"]["podSelector"]) == system_pods
    for policy, component in (("userland-gateway", "userland-gateway"), ("userland-web", "userland-web"),
                              ("userland-redis", "userland-redis"), ("userland-store", "userland-store"),
                              ("userland-operator-metrics", "userland-operator")):
        selected = _selected(SYSTEM, policies[policy]["spec"]["podSelector"])
        component_pods = _selected(SYSTEM, {"matchLabels": {"app.kubernetes.io/name": component}})
        assert selected and selected == component_pods
    # Redis admits exactly the gateway's and the web UI's Pods.
    admitted = set()
    for peer in policies["userland-redis"]["spec"]["ingress"][0]["from"]:
        admitted |= _selected(SYSTEM, peer["podSelector"])
    assert admitted == (_selected(SYSTEM, {"matchLabels": {"app.kubernetes.io/name": "userland-gateway"}})
                        | _selected(SYSTEM, {"matchLabels": {"app.kubernetes.io/name": "userland-web"}}))


def test_a_students_policy_admits_only_the_gateway(platform: Platform, student_pod: dict[str, Any]) -> None:
    # The operator's per-Template policy (userland-testenv): it selects the students' Pods of
    # that Template and admits only Pods labelled like the gateway, from the namespace whose
    # kubernetes.io/metadata.name label deploy/namespace.yaml sets (1.20 does not set it).
    policy = kubectl_json("-n", COURSE, "get", "networkpolicy", "userland-testenv")
    selected = _selected(COURSE, policy["spec"]["podSelector"])
    assert student_pod["metadata"]["name"] in selected
    assert all(p.startswith("testenv-") for p in selected), selected
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    namespaces = kubectl_json("get", "namespaces", "-l", ",".join(
        f"{k}={v}" for k, v in peer["namespaceSelector"]["matchLabels"].items()))["items"]
    assert [n["metadata"]["name"] for n in namespaces] == [SYSTEM]
    assert _selected(SYSTEM, peer["podSelector"]) == _selected(
        SYSTEM, {"matchLabels": {"app.kubernetes.io/name": "userland-gateway"}})
    assert [p["port"] for p in rule["ports"]] == [8080]
