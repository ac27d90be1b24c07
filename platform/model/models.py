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
from datetime import datetime
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from userland.platform.model import naming

Phase = Literal["Pending", "Starting", "Ready", "Suspended", "Idle", "Failed"]
ReclaimPolicy = Literal["Retain", "Delete"]
# An app whose WebSocket frames the gateway can read for activity ("": by size only).
WebSocketProtocol = Literal["", "vscode"]

# A Kubernetes quantity such as 2Gi or 500M (the API server checks it again on the PVC).
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
_DURATION_RE = re.compile(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$")
_RFC3339_RE = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
)


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


def is_rfc3339(text: str) -> bool:
    """A timestamp such as 2026-11-23T09:00:00Z (what Kubernetes and the web UI write)."""
    if not _RFC3339_RE.fullmatch(text):
        return False
    try:  # the pattern lets 2026-13-45 through; the calendar does not
        datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    offset = text[-6:]
    return text.endswith("Z") or (int(offset[1:3]) < 24 and int(offset[4:6]) < 60)


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


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_CLOCK_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime; None for anything else (an annotation a
    person mistyped is ignored, never fatal to an environment)."""
    if not isinstance(text, str) or not is_rfc3339(text):
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


# A background path: "/api/kernels*" (GET and HEAD), or "PUT /lab/api/workspaces*".
_BACKGROUND_RE = re.compile(r"^([A-Z]+ )?/")


@dataclass(frozen=True)
class Activity:
    """What does not count as the student using their environment (docs/sleep.md).

    `background_paths`: path patterns (`*` matches anything, `/` included) of GET/HEAD requests
    an open tab sends by itself (polling); a pattern after a method ("PUT /lab/api/workspaces*")
    is for that method (what a tab saves by itself). Anything else always counts.
    `quiet_frame_bytes`: WebSocket data frames from the browser of at most this many bytes do
    not count (keep-alives and acknowledgements, such as VS Code's 13-byte headers).
    `websocket_protocol`: frames are read as this app's protocol, and only messages that are
    not its own background traffic count ("vscode": proxy/rules/vscode_frames.py).
    """

    background_paths: tuple[str, ...] = ()
    quiet_frame_bytes: int = 0
    websocket_protocol: WebSocketProtocol = ""

    @classmethod
    def parse(cls, value: Any) -> Activity:
        if value is None:
            return cls()
        obj = _mapping(value, "spec.activity")
        paths = obj.get("backgroundPaths", [])
        if not isinstance(paths, list) or not all(
                isinstance(p, str) and _BACKGROUND_RE.match(p) for p in paths):
            raise InvalidSpec("spec.activity.backgroundPaths must be a list of paths starting with /, "
                              "each with a method before it if it is not for GET and HEAD (\"PUT /api/x*\")")
        quiet = obj.get("quietFrameBytes", 0)
        if not isinstance(quiet, int) or isinstance(quiet, bool) or not 0 <= quiet <= 65536:
            raise InvalidSpec("spec.activity.quietFrameBytes must be a number of bytes from 0 to 65536")
        protocol = obj.get("webSocketProtocol", "")
        if protocol not in get_args(WebSocketProtocol):
            raise InvalidSpec("spec.activity.webSocketProtocol must be \"vscode\" or left out")
        return cls(background_paths=tuple(paths), quiet_frame_bytes=quiet, websocket_protocol=protocol)


@dataclass(frozen=True)
class Lecture:
    days: tuple[int, ...]  # 0 is Monday
    start_minute: int  # minutes after midnight, in the schedule's time zone
    end_minute: int

    @classmethod
    def parse(cls, value: Any, where: str) -> Lecture:
        obj = _mapping(value, where)
        days = obj.get("days")
        if not isinstance(days, list) or not days or not all(d in _DAYS for d in days):
            raise InvalidSpec(f"{where}.days must list days such as [Mon, Wed] ({', '.join(_DAYS)})")
        minutes = []
        for key in ("start", "end"):
            match = _CLOCK_RE.match(str(obj.get(key) or ""))
            if match is None:
                raise InvalidSpec(f"{where}.{key} must be a time of day such as 09:15 (24-hour clock)")
            minutes.append(int(match.group(1)) * 60 + int(match.group(2)))
        if minutes[1] <= minutes[0]:
            raise InvalidSpec(f"{where}: end must be after start")
        return cls(days=tuple(sorted({_DAYS.index(d) for d in days})), start_minute=minutes[0],
                   end_minute=minutes[1])


@dataclass(frozen=True)
class Schedule:
    """Lectures: environments are woken `wake_before_seconds` ahead of each and kept awake
    until it ends; then the idle timeout applies again."""

    time_zone: str
    lectures: tuple[Lecture, ...]
    wake_before_seconds: int = 600

    @classmethod
    def parse(cls, value: Any) -> Schedule | None:
        if value is None:
            return None
        obj = _mapping(value, "spec.schedule")
        zone = obj.get("timeZone", "UTC")
        if not isinstance(zone, str) or not _known_time_zone(zone):
            raise InvalidSpec(
                f"spec.schedule.timeZone {zone!r} is not a time zone such as Europe/Berlin or UTC")
        lectures = obj.get("lectures")
        if not isinstance(lectures, list) or not lectures:
            raise InvalidSpec("spec.schedule.lectures must list at least one lecture")
        before = obj.get("wakeBefore", "10m")
        if not isinstance(before, str):
            raise InvalidSpec("spec.schedule.wakeBefore must be a duration such as 10m")
        parsed = tuple(Lecture.parse(lec, f"spec.schedule.lectures[{i}]") for i, lec in enumerate(lectures))
        return cls(time_zone=zone, lectures=parsed,
                   wake_before_seconds=parse_duration(before))


def _known_time_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


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
    activity: Activity = Activity()
    schedule: Schedule | None = None

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
            activity=Activity.parse(obj.get("activity")),
            schedule=Schedule.parse(obj.get("schedule")),
        )


@dataclass(frozen=True)
class Template:
    ref: ObjectRef
    spec: TemplateSpec
    # `userland.dev/wake-all`: "start all" asked at this time (None: never).
    wake_all: datetime | None = None

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
        wake_all = parse_time((obj["metadata"].get("annotations") or {}).get(naming.ANNOTATION_WAKE_ALL))
        return cls(ref=ref, spec=TemplateSpec.parse(obj.get("spec")), wake_all=wake_all)


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
    # `userland.dev/restartedAt`: the last restart asked for (None: never, or not a timestamp,
    # which is ignored rather than failing the student's environment).
    restarted_at: str | None = None
    # `userland.dev/last-activity`: when its student last used it, as far as the gateway knows.
    last_activity: datetime | None = None
    created: datetime | None = None
    # `userland.dev/started-at` and `-by`: a staff member pressed Start (the web UI writes both).
    started_at: datetime | None = None
    started_by: str = ""

    @property
    def name(self) -> str:
        return self.ref.name

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Userland:
        metadata = _mapping(obj.get("metadata"), "metadata")
        annotations = metadata.get("annotations") or {}
        restarted_at = annotations.get(naming.ANNOTATION_RESTARTED_AT)
        return cls(
            ref=ObjectRef.from_metadata(metadata),
            spec=UserlandSpec.parse(obj.get("spec")),
            status=_mapping(obj.get("status"), "status"),
            deleting=bool(metadata.get("deletionTimestamp")),
            finalizers=tuple(metadata.get("finalizers") or ()),
            restarted_at=restarted_at if isinstance(restarted_at, str) and is_rfc3339(restarted_at) else None,
            last_activity=parse_time(annotations.get(naming.ANNOTATION_LAST_ACTIVITY)),
            created=parse_time(metadata.get("creationTimestamp")),
            started_at=parse_time(annotations.get(naming.ANNOTATION_STARTED_AT)),
            started_by=str(annotations.get(naming.ANNOTATION_STARTED_BY) or "")[:100],
        )
