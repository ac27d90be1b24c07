"""How far a starting (or waking) environment's Pod has come, for `status.progress`: the steps
the waking page shows a student (docs/sleep.md). From the Pod's own status, as the kubelet (or
`make run`'s runner) writes it: no Events need to be read.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
STEPS = ("Scheduled", "ImagePulled", "ContainerStarted", "Ready")


def _condition(pod: JSON, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_progress(pod: JSON | None) -> list[str]:
    """The steps `pod` has reached, in order; a step counts only once those before it have."""
    if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return []
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    reached = [
        _condition(pod, "PodScheduled"),
        # The image is there once the runtime knows its ID (or a container ran from it).
        bool(containers) and all(c.get("imageID") or "running" in (c.get("state") or {})
                                 or "terminated" in (c.get("state") or {}) for c in containers),
        bool(containers) and all("running" in (c.get("state") or {}) for c in containers),
        _condition(pod, "Ready"),
    ]
    steps: list[str] = []
    for step, done in zip(STEPS, reached, strict=True):
        if not done:
            break
        steps.append(step)
    return steps


def newest_pod(pods: list[JSON]) -> JSON | None:
    """The Pod a student will reach: the newest that is not going away."""
    alive = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    return max(alive, default=None,
               key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))


def trim_pod(obj: JSON) -> JSON:
    """What the operator keeps of a Pod (thousands of them): enough for pod_progress."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "creationTimestamp",
                                          "deletionTimestamp", "resourceVersion", "uid") if k in meta},
        "status": {
            "conditions": [{"type": c.get("type"), "status": c.get("status")}
                           for c in status.get("conditions") or []],
            "containerStatuses": [
                {"imageID": c.get("imageID", ""), "state": {k: {} for k in (c.get("state") or {})}}
                for c in status.get("containerStatuses") or []],
        },
    }
