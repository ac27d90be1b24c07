"""Kubernetes Events on Userlands and Templates: the story `kubectl describe` tells an admin.

Events are best effort and come second: `record()` only queues one; two background senders
post them, and while the operator is busy (`busy()`, its work queue is not empty) they hold
back for up to `MAX_DEFER` seconds, so at a cold start of thousands of Userlands the Events
follow the real work instead of competing with it for the API server. A failure is logged
and dropped; a full queue drops the oldest. Nothing here ever holds up or fails a reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from userland.platform.clients.kube import EVENTS, KubeClient, KubeError
from userland.platform.model.events import event_body
from userland.platform.model.objects import rfc3339

log = logging.getLogger(__name__)
COMPONENT = "userland-operator"
SENDERS = 2
MAX_QUEUED = 10_000
MAX_DEFER = 30.0  # seconds an Event may wait for a busy operator to calm down


class EventRecorder:
    def __init__(self, client: KubeClient, busy: Callable[[], bool] = lambda: False) -> None:
        self.client = client
        self.busy = busy
        self._flushing = False
        self.host = os.environ.get("HOSTNAME") or socket.gethostname()
        self._queue: asyncio.Queue[tuple[float, dict[str, Any]]] | None = None
        self._senders: list[asyncio.Task[None]] = []
        self.dropped = 0

    def record(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._senders = [asyncio.get_running_loop().create_task(self._send_forever())
                             for _ in range(SENDERS)]
        if self._queue.qsize() >= MAX_QUEUED:
            self._queue.get_nowait()
            self._queue.task_done()
            self.dropped += 1
        body = event_body(involved, event_type, reason, message, component=COMPONENT, now=rfc3339(),
                          host=self.host)
        self._queue.put_nowait((time.monotonic(), body))

    async def _send_forever(self) -> None:
        assert self._queue is not None
        while True:
            queued_at, body = await self._queue.get()
            # Polled: "busy" is a queue depth, with no event to wait on.
            while (not self._flushing and self.busy()  # noqa: ASYNC110
                   and time.monotonic() - queued_at < MAX_DEFER):
                await asyncio.sleep(0.25)
            try:
                await self.client.create(EVENTS, body["metadata"]["namespace"], body)
            except KubeError as err:
                log.warning("could not record event", extra={"reason": body["reason"], "error": str(err)})
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Send every queued Event now, busy or not, and wait until all are sent (or failed)."""
        if self._queue is not None:
            self._flushing = True
            try:
                await self._queue.join()
            finally:
                self._flushing = False

    async def close(self) -> None:
        for task in self._senders:
            task.cancel()
        for task in self._senders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._senders = []
        self._queue = None
