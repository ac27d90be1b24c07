"""Pure status computation for Userlands and Templates.

The status says what an admin or the web UI needs: a phase, a `Ready` condition whose
reason/message explain it, the Service and the URL, and `observedGeneration`.
`lastTransitionTime` moves only when the condition's status value changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from userland.operator.sleep import Verdict
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


def userland_url(template: Template, public_url: str, user: str) -> str:
    """Where the student opens the environment: for a host route their own origin,
    `https://<user>.<host>/` (on the platform's port, as the gateway serves it)."""
    parts = urlsplit(public_url)
    scheme = "http" if parts.scheme == "http" else "https"
    routing = template.spec.routing
    if routing.host:
        try:
            port = f":{parts.port}" if parts.port else ""
        except ValueError:
            port = ""
        return f"{scheme}://{user.lower()}.{routing.host.lower()}{port}{routing.path_prefix or '/'}"
    base = public_url.rstrip("/") if public_url else ""
    return f"{base}{routing.path_prefix}"


def display_name(template: Template | None, template_name: str) -> str:
    """What people call the app: the Template's displayName (`VS Code`), else its name."""
    if template is not None and template.spec.display_name:
        return template.spec.display_name
    return template_name


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
            return str(cond.get("message") or "it made no progress in time")
    return None


def userland_status(
    userland: Userland,
    template: Template | None,
    deployment: JSON | None,
    problem: Problem | None,
    *,
    public_url: str,
    now: str,
    sleep: Verdict | None = None,
    waking: bool = False,
    progress: list[str] | None = None,
) -> JSON:
    """`sleep`: the sleep verdict (None: no Template yet); `waking`: woken from sleep and
    waiting for its turn (operator/wake_rate.py); `progress`: the steps its Pod reached."""
    generation = userland.ref.generation
    sleeping_since = str(userland.status.get("sleepingSince") or "") if userland.status.get(
        "phase") == "Idle" else ""
    old = userland.status
    old_conditions = old.get("conditions") or []
    # Messages in words an instructor (and a student, should one read them) understands: the
    # app's own name, never "Deployment" or "environment environment". The cluster's details
    # stay in the children's own status and Events, for admins.
    name = display_name(template, userland.spec.template)
    if problem is not None:
        phase = problem.phase
        ready = Condition("Ready", "False", problem.reason, problem.message, "", generation)
    elif userland.spec.suspended:
        phase = "Suspended"
        ready = Condition(
            "Ready", "False", "Suspended", f"{name} is suspended; resume it to start it again", "", generation
        )
    elif sleep is not None and sleep.asleep:
        phase = "Idle"
        idle = template.spec.idle_timeout_seconds if template is not None else None
        after = f" after {_duration_words(idle)} without use" if idle else ""
        since_text = sleeping_since or now
        ready = Condition(
            "Ready", "False", "Idle",
            f"{name} is asleep since {_clock(since_text)}{after}; it wakes when its student opens it",
            "", generation,
        )
    elif waking:
        phase = "Starting"
        ready = Condition("Ready", "False", "Waking", f"{name} is waking up (in line to start)", "",
                          generation)
    elif deployment_available(deployment):
        phase = "Ready"
        ready = Condition("Ready", "True", "Available", f"{name} is running", "", generation)
    elif (failure := deployment_failure(deployment)) is not None:
        phase = "Failed"
        ready = Condition(
            "Ready", "False", "ProgressDeadlineExceeded", f"{name} did not start in time ({failure})", "",
            generation,
        )
    else:
        phase = "Starting"
        ready = Condition("Ready", "False", "Starting", f"starting {name}", "", generation)
    status: JSON = {
        "phase": phase,
        "conditions": [_condition(old_conditions, ready, now)],
        "observedGeneration": generation,
    }
    # null removes it (the status is written as a merge patch).
    status["sleepingSince"] = (sleeping_since or now) if phase == "Idle" else None
    status["progress"] = list(progress or []) if phase in ("Starting", "Ready") else []
    if template is not None:
        status["service"] = naming.service_name(template.name, userland.spec.user)
        status["url"] = userland_url(template, public_url, userland.spec.user)
    return status


def _clock(rfc3339: str) -> str:
    """`2026-11-23T14:02:09Z` as `14:02 UTC` (the date when it is not today's is in sleepingSince)."""
    return f"{rfc3339[11:16]} UTC" if len(rfc3339) >= 16 else rfc3339


def _duration_words(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p) or "0 s"


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
