"""Leader election on a coordination.k8s.io/v1 Lease, so two operators can run.

Only the holder reconciles; the other keeps its caches warm and takes over when the lease
is not renewed for `lease_duration` seconds. Expiry is judged by when *this* process last
saw the lease change (as client-go does), so clock skew between nodes does not matter.
A leader that cannot renew within `renew_deadline` steps down at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from userland.platform.clients.kube import LEASES, KubeClient, KubeError, NotFound

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.is_leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    def _lease_body(self, current: dict[str, Any] | None, acquiring: bool) -> dict[str, Any]:
        now = _now_micro()
        spec = dict((current or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if acquiring and spec.get("holderIdentity") not in (None, "", self.identity):
            transitions += 1
        if acquiring:
            spec["acquireTime"] = now
        spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "renewTime": now,
                "leaseTransitions": transitions,
            }
        )
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        if current is not None:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return body

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this process holds the lease afterwards."""
        try:
            current: dict[str, Any] | None = await self.client.get(LEASES, self.namespace, self.name)
        except NotFound:
            current = None
        if current is None:
            await self.client.create(LEASES, self.namespace, self._lease_body(None, True))
            return True
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        held_by_other = holder not in ("", self.identity)
        if held_by_other and time.monotonic() < self._observed_at + duration:
            return False
        await self.client.replace(
            LEASES, self.namespace, self.name, self._lease_body(current, holder != self.identity)
        )
        return True

    async def run(self, lead: Callable[[], Coroutine[None, None, None]]) -> None:
        """Campaign forever; run `lead()` while leading, cancel it when leadership is lost."""
        while True:
            await self._acquire()
            log.info("became leader", extra={"identity": self.identity, "lease": self.name})
            self.is_leader = True
            leading = asyncio.create_task(lead())
            renewing = asyncio.create_task(self._keep_renewing())
            try:
                done, _ = await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.is_leader = False
                for task in (leading, renewing):
                    task.cancel()
                await asyncio.gather(leading, renewing, return_exceptions=True)
            if leading in done and leading.exception() is not None:
                raise leading.exception()  # type: ignore[misc]
            log.warning("lost leadership", extra={"identity": self.identity})

    async def _acquire(self) -> None:
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except KubeError as err:
                log.info("lease not acquired", extra={"error": str(err)})
            await asyncio.sleep(self.retry_period)

    async def _keep_renewing(self) -> None:
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                if await self.try_acquire_or_renew():
                    last_renewed = time.monotonic()
                    continue
                return  # someone else holds it now
            except KubeError as err:
                log.warning("lease renewal failed", extra={"error": str(err)})
            if time.monotonic() - last_renewed > self.renew_deadline:
                return

    async def release(self) -> None:
        """Give the lease up on a clean shutdown, so the other replica takes over at once."""
        try:
            current = await self.client.get(LEASES, self.namespace, self.name)
            if (current.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            body = self._lease_body(current, False)
            body["spec"]["holderIdentity"] = ""
            body["spec"]["leaseDurationSeconds"] = 1
            await self.client.replace(LEASES, self.namespace, self.name, body)
        except KubeError as err:
            log.warning("could not release the lease", extra={"error": str(err)})
