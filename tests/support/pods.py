"""Pods seen from a test: a container's status in a Pod."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def container_state(pod: JSON, name: str) -> JSON:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status["name"] == name:
            return dict(status)
    return {}
