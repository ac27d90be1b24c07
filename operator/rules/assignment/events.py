"""Which Kubernetes Events an Assignment's status change tells (pure), as operator/rules/status_events.py
does for Userlands and Templates: the story `kubectl describe assignment` reads.

An Event when the Ready condition's reason or status changes, said once, with its message:
`Normal` when it is ready, or while work goes on as planned (Scheduled, Fetching, HandingOut,
Collecting); `Warning` for the rest (a source that cannot be had, a store that does not answer,
students who could not receive it: what an admin should look at). The "Fetched" Event is not a
status change: the reconciler tells it when the store fetched a commit.
"""

from __future__ import annotations

from userland.operator.rules.status_events import EventNote
from userland.platform.model.objects import JSON, ready_condition

NORMAL_REASONS = ("Scheduled", "Fetching", "HandingOut", "Collecting")


def assignment_events(old: JSON, new: JSON) -> list[EventNote]:
    """The Events for an Assignment whose status goes from `old` to `new`."""
    before, after = ready_condition(old), ready_condition(new)
    same = (before.get("reason"), before.get("status")) == (after.get("reason"), after.get("status"))
    if not after or same:
        return []
    normal = after.get("status") == "True" or after.get("reason") in NORMAL_REASONS
    return [EventNote("Normal" if normal else "Warning", str(after.get("reason")),
                      str(after.get("message") or ""))]
