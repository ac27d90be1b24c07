"""Pure status computation for Userlands and Templates.

The status says what an admin or the web UI needs: a phase, a `Ready` condition whose
reason/message explain it, the Service and the URL, and `observedGeneration`.
`lastTransitionTime` moves only when the condition's status value changes.

What a Userland's status says, first match wins (each state is tested against every other in
tests/unit/test_status.py):

1. its own spec cannot be read: `Failed`, `InvalidSpec` (`invalid_userland_status`);
2. `spec.suspended`: `Suspended`, whatever else holds (a missing or broken Template, a
   duplicate, a conflict, a failing Pod): staff stopped it on purpose, and that is what a
   teacher filters by; the message adds what would stop it once resumed;
3. a problem that stops it before it runs (`Problem`): the Template is missing (`Pending`:
   it starts when the Template appears), invalid or refused by the API server, a duplicate,
   a taken name, a route another Template has (`Failed`);
4. asleep (the sleep verdict): `Idle`;
5. woken and waiting for its turn in the wake line: `Starting`, reason `Waking`;
6. its Deployment has an available replica: `Ready`;
7. its Pod waits for a reason it will not leave by itself (operator/rules/progress.py
   FINAL_REASONS: the image cannot be pulled, a crash loop, a configuration error, the
   program not installed under `make run`): `Failed` at once, the reason the Pod's own;
8. its Deployment gave up (`ProgressDeadlineExceeded`): `Failed`;
9. its Pod has existed for `start_timeout` seconds without becoming ready: `Failed`,
   `StartTimeout` (the bound is the operator's `--start-timeout`, 10 minutes by default;
   `start_deadline` says when to look again);
10. its start waits on something outside it (operator/rules/progress.py BLOCKED_REASONS: the
   course's quota refuses its Pod, no node has room, its volume cannot be attached): `Starting`,
   with that reason (`QuotaExceeded`, `Unschedulable`, `StorageUnavailable`): it may come by
   itself, and it says what the course waits for (and /metrics counts it, docs/metrics.md);
11. otherwise `Starting`.

All of it is level-triggered: when the Pod recovers, the next reconcile says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from userland.operator.rules.capacity.images import ImageProgress
from userland.operator.rules.capacity.readiness import Readiness
from userland.operator.rules.progress import (
    BLOCKED_REASONS,
    FINAL_REASONS,
    blocked_reason,
    final_reason,
    pod_ready,
)
from userland.operator.rules.sleep import Verdict
from userland.platform.model import naming
from userland.platform.model.models import Condition, Template, Userland, parse_time
from userland.platform.model.objects import condition, meta

# How long a Pod may take to become ready before its environment is said to have failed:
# generous enough for a large image's first pull on a busy node (5-10 minutes are reported).
DEFAULT_START_TIMEOUT = 600.0

JSON = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """Why a Userland cannot be made ready; `reason` is CamelCase as in Kubernetes."""

    reason: str
    message: str
    # Pending: it fixes itself when something appears (a Template); Failed otherwise.
    phase: str = "Failed"


def stamped_condition(old_conditions: list[JSON], new: Condition, now: str) -> JSON:
    """`new` as a dict, its lastTransitionTime kept from the old condition of its type when
    the status value did not change."""
    previous = condition({"conditions": old_conditions}, new.type)
    keep_time = bool(previous) and previous.get("status") == new.status
    stamped = new.to_dict()
    stamped["lastTransitionTime"] = previous.get("lastTransitionTime") if keep_time else now
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
    """A Pod of the Deployment's current spec is available. A status the deployment controller
    wrote for an older generation does not count (as `kubectl rollout status` reads it): just
    after a wake scales a sleeping environment back to 1, the status may still be the one from
    before it slept, with the old Pod counted, and the wake would be reported done at once."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return False
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
    pod: JSON | None = None,
    start_timeout: float | None = DEFAULT_START_TIMEOUT,
) -> JSON:
    """`sleep`: the sleep verdict (None: no Template yet); `waking`: woken from sleep and
    waiting for its turn (operator/rules/wake_rate.py); `progress`: the steps its Pod reached;
    `pod`: its newest Pod (final reasons, how long it has been starting); `start_timeout`:
    seconds a Pod may take to become ready (None: no bound)."""
    generation = userland.ref.generation
    sleeping_since = str(userland.status.get("sleepingSince") or "") if userland.status.get(
        "phase") == "Idle" else ""
    old = userland.status
    old_conditions = old.get("conditions") or []
    # Messages in words an instructor (and a student, should one read them) understands: the
    # app's own name, never "Deployment" or "environment environment". The cluster's details
    # stay in the children's own status and Events, for admins.
    name = display_name(template, userland.spec.template)

    def ready(value: Literal["True", "False"], reason: str, message: str) -> Condition:
        return Condition("Ready", value, reason, message, "", generation)

    if userland.spec.suspended:
        phase = "Suspended"
        blocked = f" (once resumed, it cannot start yet: {problem.message})" if problem is not None else ""
        condition = ready("False", "Suspended", f"{name} is suspended; resume it to start it again{blocked}")
    elif problem is not None:
        phase = problem.phase
        condition = ready("False", problem.reason, problem.message)
    elif sleep is not None and sleep.asleep:
        phase = "Idle"
        idle = template.spec.idle_timeout_seconds if template is not None else None
        after = f" after {_duration_words(idle)} without use" if idle else ""
        since_text = sleeping_since or now
        condition = ready("False", "Idle", f"{name} is asleep since {_clock(since_text)}{after}; "
                                           "it wakes when its student opens it")
    elif waking:
        phase = "Starting"
        condition = ready("False", "Waking", f"{name} is waking up (in line to start)")
    elif deployment_available(deployment):
        phase = "Ready"
        condition = ready("True", "Available", f"{name} is running")
    elif (stuck := final_reason(pod)) is not None:
        phase = "Failed"
        reason, pod_message = stuck
        said = f": {pod_message}" if pod_message else ""
        condition = ready("False", reason, f"{name} cannot start: {FINAL_REASONS[reason]}{said}")
    elif (failure := deployment_failure(deployment)) is not None:
        phase = "Failed"
        condition = ready("False", "ProgressDeadlineExceeded", f"{name} did not start in time ({failure})")
    elif (late := start_deadline(pod, start_timeout)) is not None and _at(now) >= late:
        phase = "Failed"
        assert start_timeout is not None
        reached = f"; it got as far as: {', '.join(progress)}" if progress else ""
        bound = _duration_words(int(start_timeout))
        condition = ready("False", "StartTimeout", f"{name} did not become ready within {bound}{reached}")
    elif (waiting_on := blocked_reason(deployment, pod)) is not None:
        phase = "Starting"
        reason, cluster_message = waiting_on
        said = f" ({cluster_message})" if cluster_message else ""
        condition = ready("False", reason, f"{name} is waiting to start: {BLOCKED_REASONS[reason]}{said}")
    else:
        phase = "Starting"
        condition = ready("False", "Starting", f"starting {name}")
    status: JSON = {
        "phase": phase,
        "conditions": [stamped_condition(old_conditions, condition, now)],
        "observedGeneration": generation,
    }
    # null removes it (the status is written as a merge patch).
    status["sleepingSince"] = (sleeping_since or now) if phase == "Idle" else None
    status["progress"] = list(progress or []) if phase in ("Starting", "Ready") else []
    if template is not None:
        status["service"] = naming.service_name(template.name, userland.spec.user)
        status["url"] = userland_url(template, public_url, userland.spec.user)
    return status


def start_deadline(pod: JSON | None, start_timeout: float | None) -> datetime | None:
    """When a Pod that is not ready yet has taken too long (None: no Pod, or no bound)."""
    if pod is None or start_timeout is None or meta(pod).get("deletionTimestamp") or pod_ready(pod):
        return None
    created = parse_time(meta(pod).get("creationTimestamp"))
    return None if created is None else created + timedelta(seconds=start_timeout)


def _at(rfc3339: str) -> datetime:
    parsed = parse_time(rfc3339)
    assert parsed is not None, rfc3339
    return parsed


def invalid_userland_status(obj: JSON, message: str, *, now: str) -> JSON:
    """The status of a Userland whose spec cannot be read (precedence 1 above)."""
    generation = int(meta(obj).get("generation") or 0)
    condition = Condition("Ready", "False", "InvalidSpec", message, "", generation)
    return {
        "phase": "Failed",
        "conditions": [stamped_condition((obj.get("status") or {}).get("conditions") or [], condition, now)],
        "observedGeneration": generation,
    }


def _clock(rfc3339: str) -> str:
    """`2026-11-23T14:02:09Z` as `14:02 UTC` (the date when it is not today's is in sleepingSince)."""
    return f"{rfc3339[11:16]} UTC" if len(rfc3339) >= 16 else rfc3339


def _duration_words(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p) or "0 s"


def template_status(template_obj: JSON, userland_count: int, problem: Problem | None, *, now: str,
                    images: ImageProgress | None = None, lecture: Readiness | None = None) -> JSON:
    """`images`: on how many nodes its images are (None: not known, its spec is invalid);
    `lecture`: whether its course will be ready for the next lecture (None: no schedule)."""
    generation = int(meta(template_obj).get("generation") or 0)
    old = template_obj.get("status") or {}
    if problem is None:
        ready = Condition("Ready", "True", "Valid", "the Template applies cleanly", "", generation)
    else:
        ready = Condition("Ready", "False", problem.reason, problem.message, "", generation)
    conditions = [ready]
    if images is not None:
        conditions.append(Condition("ImagesPulled", images.condition_status(), images.reason, images.message,
                                    "", generation))
    if lecture is not None:
        conditions.append(Condition("LectureReady", lecture.status, lecture.reason, lecture.message, "",
                                    generation))
    return {
        "userlands": userland_count,
        "observedGeneration": generation,
        "conditions": [stamped_condition(old.get("conditions") or [], c, now) for c in conditions],
    }


def status_changed(old: JSON, new: JSON) -> bool:
    return any(old.get(key) != value for key, value in new.items())
