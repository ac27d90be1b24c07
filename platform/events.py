"""The body of a core/v1 Event, as every component of Userland reports one (the operator, the
web UI's audit trail, the local runner playing the kubelet): one builder, so `kubectl
describe` and the web UI read the same shape whoever wrote it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]
MAX_MESSAGE = 1024


def timestamp(now: float | None = None) -> str:
    """RFC 3339 to the second, UTC, as Events and conditions carry it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def event_body(
    involved: JSON,
    event_type: str,
    reason: str,
    message: str,
    *,
    component: str,
    host: str,
    now: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JSON:
    meta = involved.get("metadata") or {}
    when = now or timestamp()
    name = f"{meta.get('name')}.{uuid.uuid4().hex[:12]}"
    metadata: JSON = {"name": name, "namespace": meta.get("namespace")}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }
