"""Small helpers every component needs on Kubernetes objects kept as plain JSON dicts.

Pure, no I/O: an object's metadata (never None), a condition of its status by type (the
`Ready` condition above all), and a time written the way the API server writes it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]


def meta(obj: Mapping[str, Any] | None) -> JSON:
    """`obj.metadata`, or an empty dict when the object (or its metadata) is missing."""
    found = (obj or {}).get("metadata")
    return found if isinstance(found, dict) else {}


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    found = meta(obj).get("labels")
    return found if isinstance(found, dict) else {}


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    found = meta(obj).get("annotations")
    return found if isinstance(found, dict) else {}


def condition(status: Mapping[str, Any] | None, kind: str) -> JSON:
    """The condition of type `kind` in a status (`{}` when there is none)."""
    for item in (status or {}).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") == kind:
            return item
    return {}


def ready_condition(status: Mapping[str, Any] | None) -> JSON:
    """The `Ready` condition of a status (`{}` when there is none)."""
    return condition(status, "Ready")


def rfc3339(moment: datetime | float | None = None) -> str:
    """A time as the API server writes it (`2026-11-25T21:37:08Z`, UTC, whole seconds);
    now when no time is given. A datetime without a zone is taken as UTC."""
    if moment is None:
        moment = time.time()
    if isinstance(moment, datetime):
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


def resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("resourceVersion") or "")
