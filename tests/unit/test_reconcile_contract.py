"""The reconcile contract (operator/rules/reconcile.py, operator/loop.py): a reconcile returns when to
look again and the loop schedules it; each object's memory is one named record, dropped when the
object is gone and rebuilt from the cluster when the loop starts leading. The Assignment's record
is rebuilt from its status (operator/rules/assignment/memory.py), and which Events an Assignment's
status change tells is a pure rule (operator/rules/assignment/events.py) checked against golden data
(golden/assignment_events.json, the rule as the reconciler applied it before it moved)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support import eventually
from userland.operator.loop import Loop
from userland.operator.metrics import OperatorMetrics
from userland.operator.rules.assignment.events import assignment_events
from userland.operator.rules.assignment.memory import AssignmentMemory, FetchOutcome, rebuild
from userland.operator.rules.assignment.plan import Source
from userland.operator.rules.reconcile import DONE, Memory, ObjectMemory, Result
from userland.operator.workqueue import WorkQueue
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import KubeClient, Resource

GOLDEN = json.loads((Path(__file__).parent / "golden" / "assignment_events.json").read_text())
THINGS = Resource("", "v1", "configmaps", "ConfigMap")
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
JSON = dict[str, Any]


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c["case"])
def test_which_events_an_assignments_status_change_tells(case: JSON) -> None:
    told = [{"type": n.type, "reason": n.reason, "message": n.message}
            for n in assignment_events(case["old"], case["new"])]
    assert told == case["events"]


def test_the_earlier_look_wins_and_no_look_gives_way() -> None:
    assert Result.again_in(5).sooner(Result.again_in(2)) == Result(2)
    assert Result.again_in(2).sooner(DONE) == Result(2)
    assert DONE.sooner(Result.again_in(7)) == Result(7)
    assert DONE.sooner(DONE) == DONE
    assert Result.again_at(NOW + timedelta(seconds=90), NOW) == Result(90)
    assert Result.again_at(NOW - timedelta(seconds=5), NOW) == Result(0)  # overdue: at once
    assert Result.again_at(None, NOW) == DONE


def obj(name: str, uid: str, status: JSON | None = None, version: int = 1) -> JSON:
    return {"metadata": {"name": name, "namespace": "a", "uid": uid, "resourceVersion": str(version)},
            "status": status or {}}


@dataclass
class Counted(ObjectMemory):
    passes: int = 0


def test_a_record_is_kept_per_uid_and_forgotten_or_cleared_in_one_place() -> None:
    built: list[str] = []

    def made(found: JSON) -> Counted:
        built.append(found["metadata"]["uid"])
        return Counted()
    memory = Memory(made)
    memory.of(obj("x", "u1")).passes += 1
    memory.of(obj("x", "u1")).passes += 1
    assert memory.get("a", "x") == Counted(passes=2) and built == ["u1"]
    # Deleted and made again under its name: a new object, a new record.
    assert memory.find(obj("x", "u2")) is None
    assert memory.of(obj("x", "u2")).passes == 0 and built == ["u1", "u2"]
    assert memory.find(obj("x", "u2")) == Counted()
    memory.forget("a", "x")
    assert memory.get("a", "x") is None
    memory.of(obj("y", "u3"))
    memory.namespaces["a"] = {"y": "u3"}
    memory.clear()
    assert len(memory) == 0 and memory.namespaces == {}


def test_an_assignments_record_is_rebuilt_from_its_status() -> None:
    source = {"url": "https://git.example.edu/c.git", "commit": "c0ffee" + "0" * 34, "key": "c0ffee-1",
              "fingerprint": "f1", "files": 3}
    status = {"source": source, "students": [
        {"user": "alice", "template": "lab", "state": "HandedOut",
         "collected": {"round": "2026-12-07T09:00:00Z", "takenAt": "2026-12-07T09:00:01Z"}},
        {"user": "bob", "template": "lab", "state": "HandedOut"},
        {"user": "carol", "template": "", "state": "NoEnvironment"}]}
    memory = rebuild(obj("week1", "u1", status))
    # The commit the status names is not fetched again...
    assert memory.fetch == FetchOutcome("f1", info=source)
    assert memory.fetch.source == Source("c0ffee-1", source["commit"])
    # ... and the copies it shows were measured by the leader that wrote it: only a newer one is new.
    assert not memory.first_sight("20261207T090000Z", "lab/alice")
    assert not memory.first_sight("20261201T090000Z", "lab/alice")
    assert memory.first_sight("20261208T090000Z", "lab/alice")
    assert not memory.first_sight("20261208T090000Z", "lab/alice")  # once
    assert memory.first_sight("20261207T090000Z", "lab/bob")
    # Nothing the status does not say: a failed fetch, the store's back-off, the members told.
    assert rebuild(obj("week1", "u1", {"source": None})) == AssignmentMemory()


class Recorder:
    """A reconciler that asks to be looked at again once, soon, and remembers its passes."""

    kind = "Thing"

    def __init__(self, primary: Informer) -> None:
        self.primary = primary
        self.memory: Memory[Counted] = Memory(lambda found: Counted())
        self.calls: list[str] = []

    async def reconcile(self, namespace: str, name: str) -> Result:
        self.calls.append(name)
        found = self.primary.get(namespace, name)
        if found is None:
            return DONE
        record = self.memory.of(found)
        record.passes += 1
        return Result.again_in(0.01) if record.passes == 1 else DONE


async def test_the_loop_schedules_the_look_a_reconcile_asks_for_and_drops_a_gone_ones_memory() -> None:
    primary = Informer(KubeClient.__new__(KubeClient), THINGS, ["a"])
    primary.put(obj("x", "u1"))
    reconciler = Recorder(primary)
    reconciler.memory.of(obj("stale", "u0"))  # from an earlier time as leader
    queue: WorkQueue[tuple[str, str, str]] = WorkQueue()
    loop = Loop([reconciler], queue=queue, metrics=OperatorMetrics(), workers=2, resync_seconds=3600)
    running = asyncio.create_task(loop.run())
    try:
        # Started leading: the stale record is gone; x was looked at, and again as it asked.
        await eventually(lambda: reconciler.calls.count("x") == 2, interval=0.01)
        await eventually(lambda: queue.depth == 0 and not queue._active, interval=0.01)
        assert reconciler.memory.get("a", "stale") is None
        assert reconciler.memory.get("a", "x") == Counted(passes=2)
        assert not queue._timers  # the second pass asked for no other look
        # Gone (the watch said so): its record is dropped by the loop.
        primary._apply("DELETED", obj("x", "u1", version=2))
        queue.add(("Thing", "a", "x"))
        await eventually(lambda: reconciler.calls.count("x") == 3, interval=0.01)
        await eventually(lambda: reconciler.memory.get("a", "x") is None, interval=0.01)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        queue.close()
