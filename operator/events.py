"""Kubernetes Events on Userlands and Templates: the story `kubectl describe` tells an admin.

Events are best effort and come second: `record()` only queues one; two background senders
post them, so at a cold start of thousands of Userlands the Events trail behind the real work
instead of competing with it for the API server. A failure is logged and dropped; a full
queue drops the oldest. Nothing here ever holds up or fails a reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

from userland.platform.kube import EVENTS, KubeClient, KubeError

log = logging.getLogger(__name__)
COMPONENT = "userland-operator"
SENDERS = 2
MAX_QUEUED = 10_000


def event_body(
    involved: dict[str, Any], event_type: str, reason: str, message: str, *, now: str, host: str
) -> dict[str, Any]:
    meta = involved.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name')}.{uuid.uuid4().hex[:12]}",
            "namespace": meta.get("namespace"),
        },
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT, "host": host},
        "reportingComponent": COMPONENT,
        "reportingInstance": host,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.host = os.environ.get("HOSTNAME") or socket.gethostname()
        self._queue: asyncio.Queue[dict[str, Any]] | None = None
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
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._queue.put_nowait(event_body(involved, event_type, reason, message, now=now, host=self.host))

    async def _send_forever(self) -> None:
        assert self._queue is not None
        while True:
            body = await self._queue.get()
            try:
                await self.client.create(EVENTS, body["metadata"]["namespace"], body)
            except KubeError as err:
                log.warning("could not record event", extra={"reason": body["reason"], "error": str(err)})
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued Event has been sent (or failed)."""
        if self._queue is not None:
            await self._queue.join()

    async def close(self) -> None:
        for task in self._senders:
            task.cancel()
        for task in self._senders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._senders = []
        self._queue = None
