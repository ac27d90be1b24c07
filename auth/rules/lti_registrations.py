"""Whether an LtiRegistration works, as its status says it: the Ready condition an admin reads
with `kubectl get ltiregistrations`. Pure: the check's outcome in, the status to write out
(None when the object already says it, so a steady state writes nothing).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READY = "Ready"


@dataclass(frozen=True)
class Outcome:
    ready: bool
    reason: str
    message: str
    keys: int = 0


def invalid(message: str) -> Outcome:
    return Outcome(False, "InvalidSpec", message)


def duplicate(other: str) -> Outcome:
    return Outcome(False, "Duplicate", f"The LtiRegistration {other} already has this issuer and client "
                   "id; launches use that one. Delete one of the two.")


def key_set_fetched(count: int, url: str) -> Outcome:
    return Outcome(True, "KeySetFetched", f"The platform's key set ({url}) answered {count} key(s); "
                   "launches from this platform are accepted.", keys=count)


def key_set_failed(url: str, why: str) -> Outcome:
    return Outcome(False, "KeySetUnreachable",
                   f"The platform's key set ({url}) could not be read: {why}. Check keySetUrl (the "
                   "LMS shows it as its public keyset URL) and that this site can reach it; launches "
                   "are refused until it answers.")


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def status_patch(obj: Mapping[str, Any], outcome: Outcome, now: float | None = None) -> dict[str, Any] | None:
    """The status to write on `obj` for `outcome`, or None when it already says so."""
    metadata = _mapping(obj.get("metadata"))
    generation = metadata.get("generation") if isinstance(metadata.get("generation"), int) else 0
    status = _mapping(obj.get("status"))
    raw = status.get("conditions")
    conditions: list[Any] = raw if isinstance(raw, list) else []
    old: dict[str, Any] = next((c for c in conditions if isinstance(c, dict) and c.get("type") == READY), {})
    value = "True" if outcome.ready else "False"
    same = (old.get("status") == value and old.get("reason") == outcome.reason
            and old.get("message") == outcome.message)
    if same and status.get("observedGeneration") == generation and status.get("keys") == outcome.keys:
        return None
    moved = old.get("lastTransitionTime") if old.get("status") == value and old.get("lastTransitionTime") \
        else _stamp(time.time() if now is None else now)
    condition = {"type": READY, "status": value, "reason": outcome.reason, "message": outcome.message,
                 "lastTransitionTime": moved, "observedGeneration": generation}
    return {"status": {"observedGeneration": generation, "keys": outcome.keys, "conditions": [condition]}}
