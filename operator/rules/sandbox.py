"""The sandbox every Pod an Assignment runs shares (pure builders): the worker Pods that hand out,
collect and return (operator/rules/assignment/pods.py) and the grading Pods
(operator/rules/grading/pods.py) are built from here, so a hardening made once holds for both.

- `sandboxed_pod`: the Pod's frame: no service account token, no service links, seccomp
  RuntimeDefault, a deadline, a restart policy, owned by its Assignment, its job summarised in an
  annotation (what the operator reads back);
- `container_security`: a container's: no privilege, no escalation, every capability dropped
  (unless some are named back), a read-only root unless said otherwise;
- `job_env`: the only credentials such a Pod holds: its signed job, the token the store checks it
  by, and the store's address;
- `store_only_policy`: the NetworkPolicy: nothing in; out only TCP to the store's Pods on its port
  (and DNS when the Pods find the store by name).
"""

from __future__ import annotations

import json
from typing import Any

from userland.operator.rules.builders import owner_reference, spec_hash
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import Job, job_token

JSON = dict[str, Any]


def container_security(*, read_only_root: bool = True, add: tuple[str, ...] = (), **user: Any) -> JSON:
    """A container with no privilege: `add` names the capabilities given back (none by default);
    `user` is runAsUser, runAsGroup, runAsNonRoot as given."""
    security: JSON = {"allowPrivilegeEscalation": False, "privileged": False, **user,
                      "capabilities": {"drop": ["ALL"], **({"add": list(add)} if add else {})}}
    if read_only_root:
        security["readOnlyRootFilesystem"] = True
    return security


def job_env(job: Job, store_secret: str, store_url: str, scratch: str) -> list[JSON]:
    """The job, its token and the store's address; HOME and TMPDIR on a writable volume."""
    return [
        {"name": "USERLAND_JOB", "value": job.to_json()},
        {"name": "USERLAND_JOB_TOKEN", "value": job_token(store_secret, job.scope)},
        {"name": "USERLAND_STORE_URL", "value": store_url},
        {"name": "HOME", "value": scratch},
        {"name": "TMPDIR", "value": scratch},
    ]


def sandboxed_pod(assignment: Assignment, *, name: str, labels: dict[str, str], summary: JSON, spec: JSON,
                  deadline: int, restart: str, pod_security: JSON | None = None) -> JSON:
    """A Pod of `assignment` running `spec` (containers, volumes, placement) in the sandbox."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": assignment.ref.namespace,
            "labels": labels,
            "annotations": {naming.ANNOTATION_JOB: json.dumps(summary, separators=(",", ":"))},
            "ownerReferences": [owner_reference("Assignment", assignment.name, assignment.ref.uid)],
        },
        "spec": {
            "restartPolicy": restart,
            "activeDeadlineSeconds": deadline,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {**(pod_security or {}), "seccompProfile": {"type": "RuntimeDefault"}},
            **spec,
        },
    }


def store_only_policy(assignment: Assignment, *, name: str, component: str, store_labels: dict[str, str],
                      store_namespace: str, store_port: int, dns: bool) -> JSON:
    """Nothing connects to `assignment`'s Pods of `component`; they connect only to the store's Pods
    on its port, and to DNS when `dns` (without it the store's address must be an IP address)."""
    peer: JSON = {"podSelector": {"matchLabels": dict(store_labels)}}
    if store_namespace:
        peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": store_namespace}}
    egress: list[JSON] = [{"to": [peer], "ports": [{"protocol": "TCP", "port": store_port}]}]
    if dns:
        egress.append({"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    policy: JSON = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": assignment.ref.namespace,
            "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_ASSIGNMENT: assignment.name},
            "annotations": {},
            "ownerReferences": [owner_reference("Assignment", assignment.name, assignment.ref.uid)],
        },
        "spec": {
            "podSelector": {"matchLabels": {naming.LABEL_ASSIGNMENT: assignment.name,
                                            naming.LABEL_COMPONENT: component}},
            # Ingress listed with no rule: nothing may connect.
            "policyTypes": ["Ingress", "Egress"],
            "egress": egress,
        },
    }
    policy["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH] = spec_hash(policy)
    return policy
