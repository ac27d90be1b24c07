"""Kubernetes Events on Userlands and Templates: the story `kubectl describe` tells an admin.

Events are best effort: they are sent in the background, a failure is logged and dropped,
and they never hold up or fail a reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

from userland.platform.kube import EVENTS, KubeClient, KubeError

log = logging.getLogger(__name__)
COMPONENT = "userland-operator"


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
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = event_body(involved, event_type, reason, message, now=now, host=self.host)
        task = asyncio.get_running_loop().create_task(self._send(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, body: dict[str, Any]) -> None:
        try:
            await self.client.create(EVENTS, body["metadata"]["namespace"], body)
        except KubeError as err:
            log.warning("could not record event", extra={"reason": body["reason"], "error": str(err)})

    async def flush(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
