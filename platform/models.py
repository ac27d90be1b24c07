"""Typed models of the Template and Userland custom resources.

`Template.from_object` / `Userland.from_object` turn a custom object (a dict from the API
server) into frozen dataclasses, raising `InvalidSpec` with the field path and what is wrong.
The API server validates with the CRD schema first; the checks here are for what a schema
cannot say, and so that nothing a user can put in a CR crashes a component.
The CRD schemas in deploy/crds/ describe the same fields; tests/unit/test_crd_schema.py
checks the two agree field by field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from userland.platform import naming

Phase = Literal["Pending", "Starting", "Ready", "Suspended", "Idle", "Failed"]
ReclaimPolicy = Literal["Retain", "Delete"]

# A Kubernetes quantity such as 2Gi or 500M (the API server checks it again on the PVC).
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
_DURATION_RE = re.compile(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$")


class InvalidSpec(ValueError):
    """A custom resource whose spec cannot be acted on; the message says why."""


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidSpec(f"{where} must be an object")
    return value


def _string(obj: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        if value is None:
            raise InvalidSpec(f"{where}.{key} is required")
        raise InvalidSpec(f"{where}.{key} must be a string")
    return value


def parse_duration(text: str) -> int:
    """Seconds in a Go-style duration such as `2h`, `90m` or `1h30m`."""
    match = _DURATION_RE.match(text)
    if not text or not match:
        raise InvalidSpec(f"invalid duration {text!r}: use hours, minutes, seconds like 2h or 1h30m")
    hours, minutes, seconds = (int(g[:-1]) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


@dataclass(frozen=True)
class ObjectRef:
    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> ObjectRef:
        return cls(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            generation=int(metadata.get("generation") or 0),
            resource_version=str(metadata.get("resourceVersion", "")),
        )


@dataclass(frozen=True)
class Routing:
    host: str | None = None
    path_prefix: str | None = None

    @classmethod
    def parse(cls, value: Any) -> Routing:
        obj = _mapping(value, "spec.routing")
        host = obj.get("host")
        prefix = obj.get("pathPrefix")
        if host is not None and not isinstance(host, str):
            raise InvalidSpec("spec.routing.host must be a string")
        if prefix is not None and (not isinstance(prefix, str) or not prefix.startswith("/")):
            raise InvalidSpec("spec.routing.pathPrefix must be a path starting with '/'")
        if not host and not prefix:
            raise InvalidSpec("spec.routing needs a host or a pathPrefix")
        return cls(host=host.lower() if host else None, path_prefix=prefix or None)


@dataclass(frozen=True)
class Storage:
    size: str
    mount_path: str
    storage_class_name: str | None = None
    reclaim_policy: ReclaimPolicy = "Retain"

    @classmethod
    def parse(cls, value: Any) -> Storage | None:
        if value is None:
            return None
        obj = _mapping(value, "spec.storage")
        size = _string(obj, "size", "spec.storage")
        if not _QUANTITY_RE.match(size):
            raise InvalidSpec(f"spec.storage.size {size!r} is not a quantity such as 2Gi")
        mount_path = _string(obj, "mountPath", "spec.storage")
        if not mount_path.startswith("/"):
            raise InvalidSpec("spec.storage.mountPath must be an absolute path")
        storage_class = obj.get("storageClassName")
        if storage_class is not None and not isinstance(storage_class, str):
            raise InvalidSpec("spec.storage.storageClassName must be a string")
        policy = obj.get("reclaimPolicy", "Retain")
        if policy not in ("Retain", "Delete"):
            raise InvalidSpec("spec.storage.reclaimPolicy must be Retain or Delete")
        return cls(size=size, mount_path=mount_path, storage_class_name=storage_class, reclaim_policy=policy)


@dataclass(frozen=True)
class TemplateSpec:
    routing: Routing
    port: int
    pod_spec: dict[str, Any]
    display_name: str = ""
    description: str = ""
    storage: Storage | None = None
    idle_timeout_seconds: int | None = None
    self_service: bool = False

    @classmethod
    def parse(cls, value: Any) -> TemplateSpec:
        obj = _mapping(value, "spec")
        port = obj.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise InvalidSpec("spec.port must be a port number between 1 and 65535")
        pod_spec = obj.get("podSpec")
        if not isinstance(pod_spec, dict):
            raise InvalidSpec("spec.podSpec is required and must be an object")
        containers = pod_spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise InvalidSpec("spec.podSpec.containers must list at least one container")
        if not all(isinstance(c, dict) for c in containers):
            raise InvalidSpec("spec.podSpec.containers must be objects")
        idle = obj.get("idleTimeout")
        if idle is not None and not isinstance(idle, str):
            raise InvalidSpec("spec.idleTimeout must be a duration such as 2h")
        self_service = obj.get("selfService", False)
        if not isinstance(self_service, bool):
            raise InvalidSpec("spec.selfService must be true or false")
        return cls(
            routing=Routing.parse(obj.get("routing")),
            port=port,
            pod_spec=pod_spec,
            display_name=str(obj.get("displayName") or ""),
            description=str(obj.get("description") or ""),
            storage=Storage.parse(obj.get("storage")),
            idle_timeout_seconds=parse_duration(idle) if idle else None,
            self_service=self_service,
        )


@dataclass(frozen=True)
class Template:
    ref: ObjectRef
    spec: TemplateSpec

    @property
    def name(self) -> str:
        return self.ref.name

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Template:
        ref = ObjectRef.from_metadata(_mapping(obj.get("metadata"), "metadata"))
        if not naming.is_valid_dns_label(ref.name):
            raise InvalidSpec(
                f"Template name {ref.name!r} must be a DNS label: at most 63 lowercase letters, digits or '-'"
            )
        return cls(ref=ref, spec=TemplateSpec.parse(obj.get("spec")))


@dataclass(frozen=True)
class UserlandSpec:
    user: str
    template: str
    suspended: bool = False

    @classmethod
    def parse(cls, value: Any) -> UserlandSpec:
        obj = _mapping(value, "spec")
        user = _string(obj, "user", "spec")
        template = _string(obj, "template", "spec")
        try:
            user = naming.normalize_login(user)
        except naming.InvalidName as err:
            raise InvalidSpec(f"spec.user: {err}") from None
        if not naming.is_valid_dns_label(template):
            raise InvalidSpec(f"spec.template {template!r} is not a valid Template name")
        suspended = obj.get("suspended", False)
        if not isinstance(suspended, bool):
            raise InvalidSpec("spec.suspended must be true or false")
        return cls(user=user, template=template, suspended=suspended)


@dataclass(frozen=True)
class Condition:
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: str = ""
    observed_generation: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
            "observedGeneration": self.observed_generation,
        }


@dataclass(frozen=True)
class Userland:
    ref: ObjectRef
    spec: UserlandSpec
    status: dict[str, Any] = field(default_factory=dict)
    deleting: bool = False
    finalizers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.ref.name

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Userland:
        metadata = _mapping(obj.get("metadata"), "metadata")
        return cls(
            ref=ObjectRef.from_metadata(metadata),
            spec=UserlandSpec.parse(obj.get("spec")),
            status=_mapping(obj.get("status"), "status"),
            deleting=bool(metadata.get("deletionTimestamp")),
            finalizers=tuple(metadata.get("finalizers") or ()),
        )
