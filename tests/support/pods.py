"""Pods seen from a test: a container's status in a Pod, whether a process still lives."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def container_state(pod: JSON, name: str) -> JSON:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status["name"] == name:
            return dict(status)
    return {}
