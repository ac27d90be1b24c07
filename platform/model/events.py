"""The body of a core/v1 Event, as every component of Userland reports one (the operator, the
web UI's audit trail, the local runner playing the kubelet): one builder, so `kubectl
describe` and the web UI read the same shape whoever wrote it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from userland.platform.model.objects import meta as meta_of
from userland.platform.model.objects import rfc3339

JSON = dict[str, Any]
MAX_MESSAGE = 1024


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
    meta = meta_of(involved)
    when = now or rfc3339()
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
