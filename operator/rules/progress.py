"""How far a starting (or waking) environment's Pod has come, for `status.progress`: the steps
the waking page shows a student (docs/sleep.md), and whether it is stuck for good: a waiting
reason that will not change by itself (`final_reason`). From the Pod's own status, as the
kubelet (or `make run`'s runner) writes it: no Events need to be read.
"""

from __future__ import annotations

from typing import Any

from userland.platform.model import naming
from userland.platform.model.objects import condition, meta

JSON = dict[str, Any]
STEPS = ("Scheduled", "ImagePulled", "ContainerStarted", "Ready")
# Waiting reasons a container does not leave by itself: the image cannot be had, the program
# crashes as it starts, its configuration is missing, or (`make run`) the program is not
# installed on this machine. What each means in words, for the Ready condition's message.
FINAL_REASONS = {
    "ImagePullBackOff": "its image cannot be downloaded",
    "ErrImagePull": "its image cannot be downloaded",
    "InvalidImageName": "its image name is not valid",
    "ErrImageNeverPull": "its image is not on the node and may not be downloaded",
    "CrashLoopBackOff": "it keeps crashing as it starts",
    "CreateContainerConfigError": "its configuration is incomplete",
    "CreateContainerError": "its container cannot be created",
    "ProgramNotInstalled": "its program is not installed on this machine",
}
MESSAGE_LIMIT = 500  # characters of a Pod's own message kept (thousands of Pods are cached)
# Why a start waits for something outside the environment (it may come by itself: a quota
# freed, a node added, a volume bound), in words; the phase stays Starting.
BLOCKED_REASONS = {
    "QuotaExceeded": "not enough room in the course's quota",
    "StorageUnavailable": "its storage cannot be attached",
    "Unschedulable": "not enough room in the cluster",
}


def _condition(pod: JSON, kind: str) -> bool:
    return condition(pod.get("status"), kind).get("status") == "True"


def pod_ready(pod: JSON | None) -> bool:
    return pod is not None and _condition(pod, "Ready")


def pod_progress(pod: JSON | None) -> list[str]:
    """The steps `pod` has reached, in order; a step counts only once those before it have."""
    if pod is None or meta(pod).get("deletionTimestamp"):
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
    alive = [p for p in pods if not meta(p).get("deletionTimestamp")]
    return max(alive, default=None, key=lambda p: str(meta(p).get("creationTimestamp") or ""))


def final_reason(pod: JSON | None) -> tuple[str, str] | None:
    """(reason, the Pod's own message) of the first container (init containers first) that
    waits for a reason it will not leave by itself; None when there is none."""
    if pod is None or meta(pod).get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in FINAL_REASONS:
            return reason, str(waiting.get("message") or "")
    return None


def blocked_reason(deployment: JSON | None, pod: JSON | None) -> tuple[str, str] | None:
    """(BLOCKED_REASONS key, the cluster's own message) when a start waits on something outside
    the environment: the namespace's ResourceQuota refuses its Pod (the ReplicaSet's failure,
    which the deployment controller copies to the Deployment as `ReplicaFailure`), or the
    scheduler finds no place for it (its Pod's `PodScheduled` is False; a volume that cannot be
    bound or attached is a storage problem, anything else a lack of room). None otherwise."""
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        message = str(cond.get("message") or "")
        refused = cond.get("type") == "ReplicaFailure" and cond.get("status") == "True"
        if refused and "quota" in message.lower():
            return "QuotaExceeded", message[:MESSAGE_LIMIT]
    if pod is None or meta(pod).get("deletionTimestamp"):
        return None
    scheduled = condition(pod.get("status"), "PodScheduled")
    if scheduled.get("status") != "False" or scheduled.get("reason") != "Unschedulable":
        return None
    message = str(scheduled.get("message") or "")
    lowered = message.lower()
    if "persistentvolumeclaim" in lowered or "volume" in lowered:
        return "StorageUnavailable", message[:MESSAGE_LIMIT]
    return "Unschedulable", message[:MESSAGE_LIMIT]


def _trim_condition(cond: JSON) -> JSON:
    kept = {"type": cond.get("type"), "status": cond.get("status")}
    if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
        # Why the scheduler found no place (blocked_reason reads it).
        kept["reason"] = cond.get("reason")
        kept["message"] = str(cond.get("message") or "")[:MESSAGE_LIMIT]
    return kept


def _trim_container(container: JSON) -> JSON:
    state = container.get("state") or {}
    kept: JSON = {"imageID": container.get("imageID", ""), "state": {k: {} for k in state}}
    waiting = state.get("waiting") or {}
    if waiting.get("reason"):
        kept["state"]["waiting"] = {"reason": waiting["reason"],
                                    "message": str(waiting.get("message") or "")[:MESSAGE_LIMIT]}
    return kept


def trim_pod(obj: JSON) -> JSON:
    """What the operator keeps of a Pod (thousands of them): enough for pod_progress, for
    final_reason, blocked_reason and for how long it has been starting (its creation time); the
    node it runs on (an assignment's worker Pod must go where the volume is attached) and its
    phase; of a worker Pod, what work it does (its job annotation)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    trimmed: JSON = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "creationTimestamp",
                                          "deletionTimestamp", "resourceVersion", "uid") if k in meta},
        "spec": {"nodeName": (obj.get("spec") or {}).get("nodeName")},
        "status": {
            "phase": status.get("phase"),
            "conditions": [_trim_condition(c) for c in status.get("conditions") or []],
            "containerStatuses": [_trim_container(c) for c in status.get("containerStatuses") or []],
        },
    }
    job = (meta.get("annotations") or {}).get(naming.ANNOTATION_JOB)
    if job is not None:
        trimmed["metadata"]["annotations"] = {naming.ANNOTATION_JOB: job}
    if status.get("initContainerStatuses"):
        trimmed["status"]["initContainerStatuses"] = [
            _trim_container(c) for c in status["initContainerStatuses"]]
    if (meta.get("labels") or {}).get(naming.LABEL_COMPONENT) == naming.GRADER_COMPONENT:
        # A grading Pod: when its grader began and how each step ended (its time limit, its reason).
        trimmed["status"]["reason"] = status.get("reason")
        for key in ("initContainerStatuses", "containerStatuses"):
            trimmed["status"][key] = [_trim_step(c) for c in status.get(key) or []]
    return trimmed


def _trim_step(container: JSON) -> JSON:
    state = container.get("state") or {}
    kept: JSON = {"name": container.get("name", ""), "state": {}}
    if "running" in state:
        kept["state"]["running"] = {"startedAt": (state["running"] or {}).get("startedAt")}
    if "terminated" in state:
        ended = state["terminated"] or {}
        keys = ("reason", "exitCode", "startedAt", "finishedAt")
        kept["state"]["terminated"] = {k: ended.get(k) for k in keys}
    if "waiting" in state:
        waiting = state["waiting"] or {}
        kept["state"]["waiting"] = {"reason": waiting.get("reason"),
                                    "message": str(waiting.get("message") or "")[:MESSAGE_LIMIT]}
    return kept
