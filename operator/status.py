"""Pure status computation for Userlands and Templates.

The status says what an admin or the web UI needs: a phase, a `Ready` condition whose
reason/message explain it, the Service and the URL, and `observedGeneration`.
`lastTransitionTime` moves only when the condition's status value changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from userland.platform import naming
from userland.platform.models import Condition, Template, Userland

JSON = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """Why a Userland cannot be made ready; `reason` is CamelCase as in Kubernetes."""

    reason: str
    message: str
    # Pending: it fixes itself when something appears (a Template); Failed otherwise.
    phase: str = "Failed"


def _condition(old_conditions: list[JSON], new: Condition, now: str) -> JSON:
    previous = next((c for c in old_conditions if c.get("type") == new.type), None)
    keep_time = previous is not None and previous.get("status") == new.status
    stamped = new.to_dict()
    stamped["lastTransitionTime"] = (previous or {}).get("lastTransitionTime") if keep_time else now
    return stamped


def userland_url(template: Template, public_url: str) -> str:
    scheme = "http" if public_url.startswith("http://") else "https"
    routing = template.spec.routing
    if routing.host:
        return f"{scheme}://{routing.host}/"
    base = public_url.rstrip("/") if public_url else ""
    return f"{base}{routing.path_prefix}"


def deployment_available(deployment: JSON | None) -> bool:
    if not deployment:
        return False
    status = deployment.get("status") or {}
    return int(status.get("availableReplicas") or 0) >= 1


def deployment_failure(deployment: JSON | None) -> str | None:
    """The message of a Deployment that gave up progressing, if it did."""
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "Progressing"
            and cond.get("status") == "False"
            and cond.get("reason") == "ProgressDeadlineExceeded"
        ):
            return str(cond.get("message") or "the Deployment did not progress in time")
    return None


def userland_status(
    userland: Userland,
    template: Template | None,
    deployment: JSON | None,
    problem: Problem | None,
    *,
    public_url: str,
    now: str,
) -> JSON:
    generation = userland.ref.generation
    old = userland.status
    old_conditions = old.get("conditions") or []
    if problem is not None:
        phase = problem.phase
        ready = Condition("Ready", "False", problem.reason, problem.message, "", generation)
    elif userland.spec.suspended:
        phase = "Suspended"
        ready = Condition(
            "Ready",
            "False",
            "Suspended",
            "the environment is suspended; resume it to start it again",
            "",
            generation,
        )
    elif deployment_available(deployment):
        phase = "Ready"
        ready = Condition("Ready", "True", "Available", "the environment is running", "", generation)
    elif (failure := deployment_failure(deployment)) is not None:
        phase = "Failed"
        ready = Condition("Ready", "False", "ProgressDeadlineExceeded", failure, "", generation)
    else:
        phase = "Starting"
        ready = Condition(
            "Ready",
            "False",
            "Starting",
            "waiting for the environment's Deployment to become available",
            "",
            generation,
        )
    status: JSON = {
        "phase": phase,
        "conditions": [_condition(old_conditions, ready, now)],
        "observedGeneration": generation,
    }
    if template is not None:
        status["service"] = naming.service_name(template.name, userland.spec.user)
        status["url"] = userland_url(template, public_url)
    return status


def template_status(template_obj: JSON, userland_count: int, problem: Problem | None, *, now: str) -> JSON:
    metadata = template_obj.get("metadata") or {}
    generation = int(metadata.get("generation") or 0)
    old = template_obj.get("status") or {}
    if problem is None:
        ready = Condition("Ready", "True", "Valid", "the Template applies cleanly", "", generation)
    else:
        ready = Condition("Ready", "False", problem.reason, problem.message, "", generation)
    return {
        "userlands": userland_count,
        "observedGeneration": generation,
        "conditions": [_condition(old.get("conditions") or [], ready, now)],
    }


def status_changed(old: JSON, new: JSON) -> bool:
    return any(old.get(key) != value for key, value in new.items())
