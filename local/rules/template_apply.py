"""What `userland local` does with each example Template when it starts again (pure).

A state folder from an earlier run holds the Templates as they were left: the user may have
changed one (an `idleTimeout` set with kubectl to try sleep). Writing the shipped Template over
it reverted that silently, and a longer idle time woke every environment that had gone to sleep
(an asleep environment whose last use is within the new idle time is due awake: operator/rules/sleep.py).
So after each write here the Template records the digest of its spec as the API server stored
it (`APPLIED_ANNOTATION`; the server adds defaults, so it is read back, not computed from what
was sent). Then, for a Template found:
- missing: created;
- it has everything this run wants (fields the server or the user added aside): left alone;
- its spec is still what was stored at our last write (the digest matches): ours, untouched,
  so it takes what this run wants (a newer shipped version, another `--idle`);
- anything else was changed here (or comes from a run before the digest existed): kept as it
  is, and the banner says so and how to take the shipped one back (annotate it `RESET`).
`--idle` (`make run IDLE=1m`) sets every example Template's `idleTimeout`, to try sleep and wake.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Literal

from userland.platform.model import naming
from userland.platform.model.models import InvalidSpec, parse_duration

JSON = dict[str, Any]
APPLIED_ANNOTATION = naming.ANNOTATION_LOCAL_APPLIED_SPEC
RESET = "reset"  # the annotation's value that asks for the shipped Template back
Step = Literal["create", "same", "update", "kept"]


def parse_idle(text: str) -> str:
    """An `--idle` value as the Template's `idleTimeout` takes it; ValueError in words."""
    value = text.strip()
    try:
        seconds = parse_duration(value)
    except InvalidSpec:
        raise ValueError(f"--idle {text!r} is not a duration: write it like 1m, 90s or 2h") from None
    if seconds < 10:
        raise ValueError(f"--idle {text!r} is too short to use an environment at all: 10s or more")
    return value


def desired(template: JSON, idle: str | None) -> JSON:
    """The Template as this run wants it: the shipped one, with `idle` as its idleTimeout."""
    wanted = copy.deepcopy(template)
    if idle:
        wanted["spec"]["idleTimeout"] = idle
    return wanted


def spec_digest(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def contains(actual: Any, wanted: Any) -> bool:
    """Every field `wanted` sets has that value in `actual` (what the server or the user added
    aside); lists item by item, of the same length."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(contains(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (isinstance(actual, list) and len(actual) == len(wanted)
                and all(contains(a, w) for a, w in zip(actual, wanted, strict=True)))
    return bool(actual == wanted and type(actual) is type(wanted))


def recorded(current: JSON) -> str | None:
    return ((current.get("metadata") or {}).get("annotations") or {}).get(APPLIED_ANNOTATION)


def step(current: JSON | None, wanted: JSON) -> Step:
    """What to do with a Template found as `current` (None: not there) when `wanted` is what
    this run would write."""
    if current is None:
        return "create"
    spec = current.get("spec")
    if contains(spec, wanted["spec"]):
        return "same"
    if recorded(current) in (spec_digest(spec), RESET):
        return "update"
    return "kept"


def record_patch(stored: JSON) -> JSON:
    """The merge patch that records `stored`'s spec (the object as the server returned it)."""
    return {"metadata": {"annotations": {APPLIED_ANNOTATION: spec_digest(stored.get("spec"))}}}


def kept_words(names: list[str], namespace: str) -> str:
    """The banner's line for the Templates kept as the user changed them."""
    which = ", ".join(names)
    return (f"{which} kept as changed here (not as shipped); to take the shipped one back: "
            f"kubectl annotate template NAME -n {namespace} {APPLIED_ANNOTATION}={RESET} --overwrite, "
            "then make run again")
