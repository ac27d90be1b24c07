"""What the web UI keeps of each watched object: only the fields its pages read.

Each function takes an object from the API server and returns a much smaller dict of the same
shape (metadata/spec/status), so the informers' caches stay small at thousands of objects and
the pure dashboard code reads them like the originals. `metadata.namespace/name/resourceVersion`
are always kept: the informer keys and versions objects by them.
"""

from __future__ import annotations

from typing import Any

from userland.platform.model import naming
from userland.platform.model.lti_links import (
    ANNOTATION_LINKS,
    ANNOTATION_LTI_ASSISTANTS,
    ANNOTATION_LTI_INSTRUCTORS,
)

JSON = dict[str, Any]

# Userland annotations the pages show (roster details and sleep/wake's last activity).
_KEPT_ANNOTATIONS = (*naming.ROSTER_DETAILS.values(), naming.ANNOTATION_LAST_ACTIVITY,
                     naming.ANNOTATION_COURSE_TITLE, naming.ANNOTATION_INSTRUCTORS,
                     naming.ANNOTATION_ASSISTANTS, naming.ANNOTATION_STAFF_ACCESS,
                     naming.ANNOTATION_HELP_LIMIT, ANNOTATION_LTI_INSTRUCTORS, ANNOTATION_LTI_ASSISTANTS,
                     ANNOTATION_LINKS, naming.ANNOTATION_LTI_REMOVE_AFTER_DAYS)
_KEPT_LABELS = (naming.LABEL_USER, naming.LABEL_TEMPLATE, naming.LABEL_USERLAND, naming.LABEL_COURSE)


def _meta(obj: JSON, *, labels: bool = False, annotations: bool = False) -> JSON:
    meta = obj.get("metadata") or {}
    out: JSON = {k: meta[k] for k in ("name", "namespace", "resourceVersion", "creationTimestamp",
                                      "deletionTimestamp") if meta.get(k)}
    if labels:
        out["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k in _KEPT_LABELS}
    if annotations:
        out["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items()
                              if k in _KEPT_ANNOTATIONS}
    return out


def _ready(conditions: Any) -> list[JSON]:
    return [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in conditions or [] if isinstance(c, dict) and c.get("type") == "Ready"]


def namespace(obj: JSON) -> JSON:
    return {"metadata": _meta(obj, labels=True, annotations=True)}


def userland(obj: JSON) -> JSON:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "metadata": _meta(obj, annotations=True),
        "spec": {k: spec[k] for k in ("user", "template", "suspended") if k in spec},
        "status": {**{k: status[k] for k in ("phase", "url") if k in status},
                   "conditions": _ready(status.get("conditions"))},
    }


def template(obj: JSON) -> JSON:
    spec = obj.get("spec") or {}
    storage = spec.get("storage") or {}
    slim_spec: JSON = {k: spec[k] for k in ("displayName", "description") if spec.get(k)}
    if storage:
        slim_spec["storage"] = {"reclaimPolicy": storage.get("reclaimPolicy", "Retain")}
    conditions = (obj.get("status") or {}).get("conditions")
    status: JSON = {"conditions": _ready(conditions)}
    # Whether the course will be ready for the Template's next lecture (docs/capacity.md).
    lecture = [c for c in conditions or [] if isinstance(c, dict) and c.get("type") == "LectureReady"]
    if lecture:
        status["lecture"] = {"status": str(lecture[0].get("status") or ""),
                             "message": str(lecture[0].get("message") or "")[:500]}
    return {"metadata": _meta(obj), "spec": slim_spec, "status": status}


def deployment(obj: JSON) -> JSON:
    status = obj.get("status") or {}
    progressing = [{k: c.get(k) for k in ("type", "status", "reason", "message")}
                   for c in status.get("conditions") or [] if c.get("type") == "Progressing"]
    return {"metadata": _meta(obj, labels=True),
            "status": {"availableReplicas": int(status.get("availableReplicas") or 0),
                       "conditions": progressing}}


def pod(obj: JSON) -> JSON:
    status = obj.get("status") or {}
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    waiting = []
    for cs in statuses:
        # Why a container is not running: waiting, or stopped (terminated; the local runner
        # reports a program that is not installed so), or its last stop while it backs off.
        current = cs.get("state") or {}
        states = [current.get("waiting") or current.get("terminated") or {}]
        if states[0].get("reason") == "CrashLoopBackOff":
            states.append((cs.get("lastState") or {}).get("terminated") or {})
        for state in states:
            if state.get("reason") and state.get("reason") not in ("Completed", "Error"):
                waiting.append({"reason": state.get("reason"),
                                "message": str(state.get("message") or "")[:300]})
    slim: JSON = {"metadata": _meta(obj, labels=True),
                  "status": {"phase": status.get("phase", ""), "waiting": waiting,
                             "restarts": sum(int(cs.get("restartCount") or 0) for cs in statuses)}}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            slim["status"]["unschedulable"] = str(cond.get("message") or cond.get("reason") or "")[:300]
    return slim


def event(obj: JSON) -> JSON:
    involved = obj.get("involvedObject") or {}
    slim: JSON = {"metadata": _meta(obj), "type": obj.get("type", ""),
                  "involvedObject": {"kind": involved.get("kind", ""), "name": involved.get("name", "")}}
    if slim["type"] == "Warning":  # only warnings explain failures: normal ones are kept as stubs
        slim.update(reason=obj.get("reason", ""), message=str(obj.get("message") or "")[:300],
                    count=int(obj.get("count") or 1),
                    lastTimestamp=obj.get("lastTimestamp") or obj.get("eventTime")
                    or (obj.get("metadata") or {}).get("creationTimestamp") or "")
    return slim


def assignment(obj: JSON) -> JSON:
    """An Assignment as the pages read it: its spec, its status (every student's entry), and
    the times staff last asked to hand out again, collect now, or return uploaded feedback."""
    meta = obj.get("metadata") or {}
    kept = (naming.ANNOTATION_HANDOUT_AT, naming.ANNOTATION_COLLECT_NOW, naming.ANNOTATION_FEEDBACK_AT)
    slim_meta = _meta(obj)
    slim_meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k in kept}
    # The store keeps each Assignment object's work under its uid (a name made again is another).
    slim_meta["uid"] = str(meta.get("uid") or "")
    return {"metadata": slim_meta, "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}
