"""What happens to a student's files, in words: the one source for every page that says it.

The gateway's pages (a student waking an environment, a suspended one) and the web UI's (a
teacher removing, suspending or restarting environments) both say what becomes of the files,
and both must say it from the same fact: the Template's `spec.storage`. With storage, the
student's volume outlives the Pod (asleep, suspended, restarted; removed too unless its
`reclaimPolicy` is Delete); without it, the Pod's files go with the Pod, so "with all your files
kept" would be a lie. The gateway and the web UI may not import each other (import-linter), so
the sentences live here, below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Storage = Literal["retain", "delete", "none", "unknown"]
StaffEvent = Literal["remove", "suspend", "restart"]
StudentEvent = Literal["asleep", "suspended"]


def storage_of(template_spec: Mapping[str, Any] | None) -> Storage:
    """The kind of storage a Template's spec gives its environments; None: the Template is
    missing, so nobody can know."""
    if template_spec is None:
        return "unknown"
    storage = template_spec.get("storage")
    if not isinstance(storage, Mapping):
        return "none"
    # The CRD's default policy is Retain.
    return "delete" if storage.get("reclaimPolicy") == "Delete" else "retain"


_SUSPEND_KEPT = "Suspending stops the environment; their files are kept, and resuming brings it back."
_STAFF: Mapping[tuple[StaffEvent, Storage], str] = {
    ("remove", "retain"): "Their files are kept and come back if you add them again.",
    ("remove", "delete"): "Their files are deleted for good.",
    ("remove", "none"): "This environment keeps no files: anything saved in it is lost.",
    ("remove", "unknown"): "The environment's Template is missing, so what happens to the files is unknown.",
    ("suspend", "retain"): _SUSPEND_KEPT,
    ("suspend", "delete"): _SUSPEND_KEPT,
    ("suspend", "none"): "Suspending stops the environment, and it keeps no files: anything saved in it is "
                         "lost.",
    ("suspend", "unknown"): "Suspending stops the environment; its Template is missing, so whether its files "
                            "are kept is unknown.",
    ("restart", "retain"): "Restarting starts it afresh; their files are kept.",
    ("restart", "delete"): "Restarting starts it afresh; their files are kept.",
    ("restart", "none"): "Restarting starts it afresh, and it keeps no files: anything saved in it is lost.",
    ("restart", "unknown"): "Its Template is missing, so whether its files survive a restart is unknown.",
}

_STUDENT: Mapping[tuple[StudentEvent, Storage], str] = {
    ("asleep", "retain"): "It was asleep after a while without use, with all your files kept.",
    ("asleep", "delete"): "It was asleep after a while without use, with all your files kept.",
    ("asleep", "none"): "It was asleep after a while without use. It keeps no files, so it starts afresh.",
    ("asleep", "unknown"): "It was asleep after a while without use.",
    ("suspended", "retain"): "Your files are kept.",
    ("suspended", "delete"): "Your files are kept.",
    ("suspended", "none"): "It keeps no files, so it starts afresh when it is resumed.",
    ("suspended", "unknown"): "",
}

# The phrases a page must never say for an environment that keeps no files.
KEPT_PHRASES = ("files kept", "files are kept")


def for_staff(event: StaffEvent, storage: Storage) -> str:
    """What happens to the files when staff remove, suspend or restart an environment."""
    return _STAFF[(event, storage)]


def for_student(event: StudentEvent, storage: Storage) -> str:
    """What a student is told about their files on the gateway's pages ("" when nothing true
    can be said)."""
    return _STUDENT[(event, storage)]
