"""The reconcile loop every controller of the operator runs on: keys in, reconciles out.

A controller here is a set of `Reconciler`s, one per kind it owns. Each has a `kind` (the key's
first part), a `primary` informer (the objects of that kind; the periodic resync walks it), a
`memory` (what it remembers of each object between passes, operator/rules/reconcile.py) and
`reconcile(namespace, name)`, which must be level-triggered: it reads everything it needs from
the watch caches, decides what should be (pure functions), writes only the difference
(operator/apply.py) and returns a `Result`: when to look at the object again, if ever. It
never looks at the event that woke it; watch handlers only put `(kind, namespace, name)` keys
on the shared work queue (operator/workqueue.py: deduplicated, never one key on two workers,
backoff per key).

`Loop` runs the workers: each takes a key, calls its kind's reconciler, schedules the look it
asks for (the one place a reconcile's next look is scheduled), and on an error logs it, counts
it and retries the key with backoff (nothing in a custom resource may crash the operator). It
drops an object's memory when a reconcile found the object gone, and all memory when it starts
leading: a new leader rebuilds it from the cluster. Every `resync_seconds` every primary object
is queued again at low priority, the safety net for anything an event missed.
`reconciled[key]` is the resourceVersion of the primary object the last successful reconcile of
that key started from: an observable "the operator has looked at this version" (tests wait on it
instead of sleeping).

Adding a controller (the Assignment controller, say) takes three steps: an informer for its
kind (and for what it makes, with indexes that lead back to their owner), a class with `kind`,
`primary`, `memory` and `reconcile`, and one more entry in the list given to `Loop`. It then
shares the workers, the queue, the metrics, the resync and leader election with the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from userland.operator.metrics import OperatorMetrics
from userland.operator.rules.reconcile import Memory, Result
from userland.operator.workqueue import WorkQueue
from userland.platform.clients.informer import Informer, version_number
from userland.platform.clients.kube import KubeError
from userland.platform.clients.logs import ObjectLogger

log = logging.getLogger("userland.operator")

Key = tuple[str, str, str]  # (kind, namespace, name)


class Reconciler(Protocol):
    """One kind's reconcile: read from the caches, decide, write the difference, say when to
    look again."""

    @property
    def kind(self) -> str: ...

    @property
    def primary(self) -> Informer: ...

    @property
    def memory(self) -> Memory[Any]: ...

    async def reconcile(self, namespace: str, name: str) -> Result: ...


class Loop:
    def __init__(
        self,
        reconcilers: Sequence[Reconciler],
        *,
        queue: WorkQueue[Key],
        metrics: OperatorMetrics,
        workers: int = 16,
        resync_seconds: float = 600.0,
    ) -> None:
        self.reconcilers = {r.kind: r for r in reconcilers}
        self.queue = queue
        self.metrics = metrics
        self.workers = workers
        self.resync_seconds = resync_seconds
        self.reconciled: dict[Key, int] = {}

    def enqueue_all(self, *, low: bool = False) -> None:
        for kind, reconciler in self.reconcilers.items():
            for namespace, name in reconciler.primary.object_keys():
                self.queue.add((kind, namespace, name), low=low)

    async def run(self) -> None:
        """Reconcile until cancelled (the caller has waited for the caches to sync)."""
        for reconciler in self.reconcilers.values():
            # Led before (leadership lost, then won back): what was remembered then may be
            # stale now; every record is rebuilt from the cluster as it is.
            reconciler.memory.clear()
        self.enqueue_all()
        workers = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        try:
            while True:
                await asyncio.sleep(self.resync_seconds)
                self.enqueue_all(low=True)  # repairs anything a missed event left behind
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            kind, namespace, name = key
            reconciler = self.reconcilers[kind]
            version = version_number(reconciler.primary.get(namespace, name))
            started = time.perf_counter()
            try:
                result = await reconciler.reconcile(namespace, name)
                self.queue.forget(key)
                if result.after is not None:
                    self.queue.add_after(key, result.after)
                self.metrics.reconciles.labels(kind, "ok").inc()
                if version is None:
                    self.reconciled.pop(key, None)
                    reconciler.memory.forget(namespace, name)  # it is gone
                else:
                    self.reconciled[key] = version
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # Nothing in a CR may crash the operator: log, count, back off, try again.
                delay = self.queue.retry(key)
                reason = type(err).__name__
                self.metrics.reconciles.labels(kind, "error").inc()
                self.metrics.errors.labels(kind, reason).inc()
                level = logging.WARNING if isinstance(err, KubeError) else logging.ERROR
                ObjectLogger(log, namespace, name).log(
                    level,
                    "reconcile failed, retrying",
                    exc_info=not isinstance(err, KubeError),
                    extra={"kind": kind, "error": str(err), "retry_in": round(delay, 2)},
                )
            finally:
                self.queue.done(key)
                self.metrics.duration.labels(kind).observe(time.perf_counter() - started)
                self.metrics.last_reconcile.set(time.time())
            # A reconcile with nothing to write never suspends, and a non-empty queue hands
            # out the next key at once: yield, so a resync of thousands cannot starve the
            # watches (a new student's event would otherwise wait for the whole pass).
            await asyncio.sleep(0)
