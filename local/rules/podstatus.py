"""The status a kubelet would report for a local Pod (pure): phase, the four conditions,
container statuses with their state, readiness and restart count, the Pod's address.

The real deployment and replicaset controllers, the operator, the web UI (failure reasons in
plain words) and `kubectl get pods` read this exactly as they read a real node's reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from userland.local.rules.podplan import Unrunnable

JSON = dict[str, Any]


@dataclass
class ContainerState:
    """What the Pod's status says of one container (see podstatus.py)."""

    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    ready: bool = False
    restarts: int = 0
    last_exit: dict[str, object] = field(default_factory=dict)


def _condition(kind: str, ok: bool, since: str, reason: str = "", message: str = "") -> JSON:
    condition: JSON = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": since}
    if not ok and reason:
        condition["reason"] = reason
        if message:
            condition["message"] = message
    return condition


def container_status(state: ContainerState, *, image_id: str = "") -> JSON:
    if state.state == "running":
        current: JSON = {"running": {"startedAt": state.started_at}}
    elif state.state == "terminated":
        current = {
            "terminated": {
                "exitCode": state.exit_code,
                "reason": state.reason,
                "message": state.message,
                "startedAt": state.started_at,
                "finishedAt": state.finished_at,
            }
        }
    else:
        waiting: JSON = {"reason": state.reason}
        if state.message:
            waiting["message"] = state.message
        current = {"waiting": waiting}
    status: JSON = {
        "name": state.name,
        "image": state.image,
        "imageID": image_id,
        "ready": state.ready,
        "started": state.state == "running",
        "restartCount": state.restarts,
        "state": current,
        "lastState": {"terminated": dict(state.last_exit)} if state.last_exit else {},
    }
    return status


def pod_status(
    *,
    address: str,
    start_time: str,
    since: str,
    unrunnable: Unrunnable | None,
    init_states: Sequence[ContainerState],
    states: Sequence[ContainerState],
    initialized: bool,
    finished: str | None = None,
    deadline_exceeded: bool = False,
) -> JSON:
    """`since` is the time to stamp conditions with (the caller keeps the previous one when a
    condition's value did not change); `finished`: Succeeded or Failed, a Pod that ran to
    completion (its containers ended and will not restart)."""
    if unrunnable is not None:
        states = [
            ContainerState(s.name, s.image, reason=unrunnable.reason, message=unrunnable.message)
            if not unrunnable.container or s.name == unrunnable.container
            else s
            for s in states
        ]
    ready = bool(states) and unrunnable is None and initialized and all(s.ready for s in states)
    not_ready = [s.name for s in states if not s.ready]
    why = f"containers with unready status: [{' '.join(not_ready)}]" if not_ready else ""
    running = initialized and unrunnable is None and all(s.state == "running" for s in states)
    phase = finished or ("Running" if running else "Pending")
    not_ready_reason = "ContainersNotReady"
    if finished is not None:
        not_ready_reason, why = "PodCompleted", ""
    status: JSON = {
        "phase": phase,
        "conditions": [
            _condition(
                "Initialized",
                initialized,
                since,
                "ContainersNotInitialized",
                "containers with incomplete status: init containers",
            ),
            _condition("Ready", ready, since, not_ready_reason, why),
            _condition("ContainersReady", ready, since, not_ready_reason, why),
            _condition("PodScheduled", True, since),
        ],
        "hostIP": address,
        "podIP": address,
        "podIPs": [{"ip": address}],
        "startTime": start_time,
        # The "image" is a local program: once it is found runnable, it is as good as pulled
        # (the waking page's "software ready" step, as a kubelet reports it with imageID).
        "containerStatuses": [container_status(s, image_id="" if unrunnable else f"local://{s.image}")
                              for s in states],
    }
    if deadline_exceeded:
        status["reason"] = "DeadlineExceeded"
        status["message"] = "Pod was active on the node longer than the specified deadline"
    if init_states:
        status["initContainerStatuses"] = [container_status(s, image_id="" if unrunnable else f"local://{s.image}")
                                           for s in init_states]
    return status


_VOLATILE = frozenset({"lastTransitionTime", "startTime", "startedAt", "finishedAt"})


def _without_times(value: Any) -> Any:
    # Nulls go too: the API server adds `lastProbeTime: null` to conditions.
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in _VOLATILE and v is not None}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def same_status(new: JSON, old: JSON) -> bool:
    """Whether `old` (from the API server) already says what `new` says, times aside. Only the
    fields we report are compared: the API server adds its own (qosClass, ...)."""
    return bool(_without_times(new) == _without_times({k: old.get(k) for k in new}))


def keep_transition_times(new: JSON, old: JSON) -> JSON:
    """`new` with the earlier lastTransitionTime of every condition whose status did not
    change, and the earlier startTime: times move only when something happened."""
    before = {
        (c.get("type"), c.get("status")): c.get("lastTransitionTime")
        for c in old.get("conditions") or []
        if isinstance(c, dict)
    }
    conditions = []
    for condition in new.get("conditions") or []:
        since = before.get((condition.get("type"), condition.get("status")))
        conditions.append({**condition, "lastTransitionTime": since} if since else condition)
    kept = {**new, "conditions": conditions}
    if old.get("startTime"):
        kept["startTime"] = old["startTime"]
    return kept
