"""The contract every reconciler of the operator keeps (as controller-runtime's Reconciler does):
what a reconcile returns, and where what it remembers between passes lives.

- `Result`: a reconcile returns what it wants of the loop: to look at the object again after a
  number of seconds (a release, a deadline, a retry, a coalesced status write), or not (an event
  brings the next look). The loop (operator/loop.py) is the one place that schedules it; a
  reconcile that raises is retried with the work queue's backoff, as before.
- `Memory`: what a reconciler remembers of each object between passes (a fetch's outcome and
  its retry time, the last status write, ...), one named record per object. The loop drops an
  object's record when a reconcile finds the object gone, and drops every record when it starts
  leading: a new leader rebuilds each record from the object as the cluster has it (`rebuild`,
  from its status), so it neither redoes what the status says was done nor skips what it says
  is left. A record is kept per uid: an object deleted and made again under its name starts anew.

Pure: no I/O, no clock (times are given).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from userland.platform.model.objects import meta

JSON = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Result:
    """`after`: seconds until the object is looked at again (None: only when an event says so)."""

    after: float | None = None

    @classmethod
    def again_in(cls, seconds: float) -> Result:
        return cls(max(seconds, 0.0))

    @classmethod
    def again_at(cls, moment: datetime | None, now: datetime) -> Result:
        """Look again at `moment` (None: no moment, no look)."""
        return cls() if moment is None else cls.again_in((moment - now) / timedelta(seconds=1))

    def sooner(self, other: Result) -> Result:
        """Both wishes in one: the earlier look (a look at all, if either wants one)."""
        if self.after is None:
            return other
        if other.after is None:
            return self
        return self if self.after <= other.after else other


DONE = Result()


@dataclass
class ObjectMemory:
    """When an object's status was last written (monotonic seconds; 0: not by this leader): the
    record of a reconciler whose status writes are coalesced extends it."""

    status_written: float = 0.0


class Memory(Generic[T]):
    """Each object's record (`T`), made from the object by `rebuild` when first needed."""

    def __init__(self, rebuild: Callable[[JSON], T]) -> None:
        self._rebuild = rebuild
        self._records: dict[tuple[str, str], tuple[str, T]] = {}
        # What is remembered of a namespace as a whole (not of one object): dropped with the rest.
        self.namespaces: dict[str, Any] = {}

    def of(self, obj: JSON) -> T:
        """`obj`'s record: the one kept for its uid, else one rebuilt from it."""
        kept = self.find(obj)
        if kept is not None:
            return kept
        record = self._rebuild(obj)
        self._records[_key(obj)] = (_uid(obj), record)
        return record

    def find(self, obj: JSON) -> T | None:
        """`obj`'s record if one is kept for its uid (a reconciler that remembers something of
        few of its objects reads with this, and makes a record only when it has one to keep)."""
        kept = self._records.get(_key(obj))
        return kept[1] if kept is not None and kept[0] == _uid(obj) else None

    def get(self, namespace: str, name: str) -> T | None:
        kept = self._records.get((namespace, name))
        return None if kept is None else kept[1]

    def forget(self, namespace: str, name: str) -> None:
        self._records.pop((namespace, name), None)

    def clear(self) -> None:
        self._records.clear()
        self.namespaces.clear()

    def __len__(self) -> int:
        return len(self._records)


def _key(obj: JSON) -> tuple[str, str]:
    found = meta(obj)
    return str(found.get("namespace") or ""), str(found.get("name") or "")


def _uid(obj: JSON) -> str:
    return str(meta(obj).get("uid") or "")
