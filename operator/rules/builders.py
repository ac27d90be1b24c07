"""Pure builders: what a Userland's children should be. No I/O here.

`desired_children(userland, template, settings)` returns plain dicts ready to send to the
API server, each carrying a hash of itself in the `userland.dev/spec-hash` annotation, so
the reconciler can tell "nothing changed" without a write.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from userland.platform.model import naming
from userland.platform.model.models import Template, Userland
from userland.platform.model.settings import Settings

JSON = dict[str, Any]
USER_PLACEHOLDER = "${USER}"
DATA_VOLUME = "userland-data"


@dataclass(frozen=True)
class Children:
    deployment: JSON
    service: JSON
    pvc: JSON | None


def spec_hash(obj: JSON) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def child_labels(userland: Userland) -> dict[str, str]:
    return {
        naming.LABEL_USER: userland.spec.user,
        naming.LABEL_TEMPLATE: userland.spec.template,
        naming.LABEL_USERLAND: naming.label_value(userland.name),
        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
    }


def selector_labels(userland: Userland) -> dict[str, str]:
    # A Deployment's selector is immutable: only labels that never change for a Userland.
    return {naming.LABEL_USER: userland.spec.user, naming.LABEL_TEMPLATE: userland.spec.template}


def owner_reference(kind: str, name: str, uid: str) -> JSON:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def substitute_user(pod_spec: JSON, user: str) -> JSON:
    """A copy of `pod_spec` with `${USER}` replaced in every container's env values and args."""
    spec = copy.deepcopy(pod_spec)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            for env in container.get("env") or []:
                if isinstance(env, dict) and isinstance(env.get("value"), str):
                    env["value"] = env["value"].replace(USER_PLACEHOLDER, user)
            if isinstance(container.get("args"), list):
                container["args"] = [
                    a.replace(USER_PLACEHOLDER, user) if isinstance(a, str) else a for a in container["args"]
                ]
    return spec


def _with_storage(pod_spec: JSON, claim: str, mount_path: str) -> JSON:
    # Every container sees the student's volume (MariaDB + phpMyAdmin share one pod), init
    # containers too (they prepare the home: VS Code's first settings).
    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != DATA_VOLUME]
    volumes.append({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
    pod_spec["volumes"] = volumes
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != DATA_VOLUME]
        mounts.append({"name": DATA_VOLUME, "mountPath": mount_path})
        container["volumeMounts"] = mounts
    return pod_spec


def _stamp(obj: JSON) -> JSON:
    obj["metadata"].setdefault("annotations", {})[naming.ANNOTATION_SPEC_HASH] = spec_hash(obj)
    return obj


def desired_deployment(userland: Userland, template: Template, *, asleep: bool = False,
                       keep_pod_spec: JSON | None = None) -> JSON:
    """`asleep`: scaled to zero by the sleep verdict (operator/rules/sleep.py); storage is kept.
    `keep_pod_spec`: the Pod spec it runs now, kept while the Template's new images are pulled
    onto the nodes (operator/rules/capacity/images.py `hold_rollout`)."""
    user, tpl = userland.spec.user, template.name
    labels = child_labels(userland)
    pod_spec = substitute_user(template.spec.pod_spec, user)
    storage = template.spec.storage
    if storage is not None:
        pod_spec = _with_storage(pod_spec, naming.pvc_name(tpl, user), storage.mount_path)
    if keep_pod_spec is not None:
        pod_spec = copy.deepcopy(keep_pod_spec)
    # Two pods must never mount one volume at once: stop the old before starting the new.
    strategy: JSON = (
        {"type": "Recreate", "rollingUpdate": None} if storage is not None else {"type": "RollingUpdate"}
    )
    pod_metadata: JSON = {"labels": labels}
    if userland.restarted_at is not None:
        # A new value changes the pod template, so the Deployment rolls its pods (the same
        # mechanism as `kubectl rollout restart`); without one the template carries no
        # annotation, so Deployments made before restarts existed keep their hash.
        pod_metadata["annotations"] = {naming.ANNOTATION_RESTARTED_AT: userland.restarted_at}
    return _stamp(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": naming.deployment_name(tpl, user),
                "namespace": userland.ref.namespace,
                "labels": labels,
                "ownerReferences": [owner_reference("Userland", userland.name, userland.ref.uid)],
            },
            "spec": {
                "replicas": 0 if userland.spec.suspended or asleep else 1,
                "selector": {"matchLabels": selector_labels(userland)},
                "strategy": strategy,
                "template": {"metadata": pod_metadata, "spec": pod_spec},
            },
        }
    )


def desired_service(userland: Userland, template: Template) -> JSON:
    user, tpl = userland.spec.user, template.name
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": naming.service_name(tpl, user),
                "namespace": userland.ref.namespace,
                "labels": child_labels(userland),
                "ownerReferences": [owner_reference("Userland", userland.name, userland.ref.uid)],
            },
            "spec": {
                "type": "ClusterIP",
                "selector": selector_labels(userland),
                "ports": [
                    {
                        "name": "http",
                        "port": template.spec.port,
                        "targetPort": template.spec.port,
                        "protocol": "TCP",
                    }
                ],
            },
        }
    )


def desired_pvc(userland: Userland, template: Template) -> JSON | None:
    """The student's volume. No ownerReference: it outlives the Userland unless the
    Template's reclaimPolicy is Delete (then the operator's finalizer removes it)."""
    storage = template.spec.storage
    if storage is None:
        return None
    spec: JSON = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name is not None:
        spec["storageClassName"] = storage.storage_class_name
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": naming.pvc_name(template.name, userland.spec.user),
                "namespace": userland.ref.namespace,
                "labels": child_labels(userland),
            },
            "spec": spec,
        }
    )


def desired_children(userland: Userland, template: Template, *, asleep: bool = False,
                     keep_pod_spec: JSON | None = None) -> Children:
    return Children(
        deployment=desired_deployment(userland, template, asleep=asleep, keep_pod_spec=keep_pod_spec),
        service=desired_service(userland, template),
        pvc=desired_pvc(userland, template),
    )


def desired_network_policy(template: Template, settings: Settings) -> JSON:
    """Only the gateway's pods may connect to a Template's environments, on its port.

    One policy per Template (owned by it) covers every student's pod of that Template;
    students' pods are not gateway pods, so they cannot reach each other.
    """
    peer: JSON = {"podSelector": {"matchLabels": dict(settings.gateway_pod_labels)}}
    if settings.gateway_namespace:
        peer["namespaceSelector"] = {
            "matchLabels": {"kubernetes.io/metadata.name": settings.gateway_namespace}
        }
    return _stamp(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": naming.network_policy_name(template.name),
                "namespace": template.ref.namespace,
                "labels": {naming.LABEL_TEMPLATE: template.name, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
                "ownerReferences": [owner_reference("Template", template.name, template.ref.uid)],
            },
            "spec": {
                "podSelector": {
                    "matchLabels": {
                        naming.LABEL_TEMPLATE: template.name,
                        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
                    }
                },
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": template.spec.port}]}],
            },
        }
    )


def contains(actual: Any, desired: Any) -> bool:
    """True when every field `desired` sets has that value in `actual`.

    Fields the API server defaults (or others add) are ignored; a desired None means the
    field must be absent. Lists must have the same length, each item contained.
    """
    if isinstance(desired, dict):
        if not isinstance(actual, dict):
            return False
        return all(
            (actual.get(key) is None) if value is None else contains(actual.get(key), value)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(contains(a, d) for a, d in zip(actual, desired, strict=True))
        )
    if isinstance(desired, bool) or isinstance(actual, bool):
        return actual is desired
    if isinstance(desired, int | float) and isinstance(actual, str):
        return str(desired) == actual  # quantities come back as strings
    return bool(actual == desired)
