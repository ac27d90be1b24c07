"""The web UI's watch over help: live dashboards follow the queue, and grants end when they must.

- Every change of a course's help requests or grants, made by any web UI replica, is announced
  on HELP_CHANNEL (platform/model/keyspace.py); this replica passes it to its notifier (web/notifier.py)
  as `HELP_KEY`, so every open class dashboard re-renders its help card within a tick.
- A sweep (every `SWEEP_SECONDS`, and at once for a course whose namespace changes) ends the
  grants a course no longer allows (web/rules/courses.py `grant_still_allowed`): a member of staff
  removed from the course (or from the team it names), a course removed, a grant made without a
  request after the course stopped allowing that. It also records the grants whose time ran
  out (each claimed by exactly one replica: platform/clients/grant_store.py `claim_expired`).
  Ending is immediate for the gateways (they hear it on the sessions' invalidation channel);
  the sweep is what notices that it is due. A course's namespace change reaches the web UI's
  watch within a moment, so a removed assistant loses access within about a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

import redis.asyncio

from userland.platform.clients.grant_store import GrantStore
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.redis_pool import cancelling
from userland.platform.model.grants import Grant
from userland.platform.model.keyspace import HELP_CHANNEL
from userland.web.audit import AuditLog
from userland.web.help_records import SYSTEM_ACTOR, record_grant
from userland.web.metrics import WebMetrics
from userland.web.rules.courses import grant_still_allowed
from userland.web.state import ClassState

log = logging.getLogger(__name__)

HELP_KEY = "#help"  # a notifier key no login can be: "the help card changed"
SWEEP_SECONDS = 15.0


class HelpMonitor:
    def __init__(self, client: redis.asyncio.Redis, state: ClassState, audit: AuditLog,
                 kube: KubeClient | None, metrics: WebMetrics | None = None, *,
                 sweep_seconds: float = SWEEP_SECONDS) -> None:
        self.redis = client
        self.metrics = metrics
        self.state = state
        self.grants = GrantStore(client)
        self.audit = audit
        self.kube = kube
        self.sweep_seconds = sweep_seconds
        self._due: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        state.namespaces.add_handler(self._on_namespace)

    def _on_namespace(self, old: Any, new: Any) -> None:
        name = str(((new or old) or {}).get("metadata", {}).get("name") or "")
        if name:
            self._due.add(name)
            self._wake.set()

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen(), name="help-changes"),
                       asyncio.create_task(self._sweeps(), name="help-sweeps")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # -- live dashboards

    async def _listen(self) -> None:
        backoff, up = 0.1, False
        while True:
            if cancelling():
                # A cancellation redis-py swallowed (in a read or in closing the subscription)
                # must still end the loop: the app's cleanup waits for it.
                raise asyncio.CancelledError
            try:
                pubsub: Any = self.redis.pubsub()
                try:
                    await pubsub.subscribe(HELP_CHANNEL)
                    backoff, up = 0.1, True
                    while not cancelling():
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                        if message is not None and message.get("type") == "message":
                            data = message.get("data")
                            course = data.decode() if isinstance(data, bytes) else str(data)
                            self.state.notifier.changed(course, {HELP_KEY})
                finally:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # Redis gone: the dashboards' cards wait for it to return
                if cancelling():
                    # redis-py can turn the cancellation it was interrupted with into a connection
                    # error: retrying would loop for ever while the app's cleanup waits for us.
                    raise asyncio.CancelledError from err
                if up:  # said once when it goes; the pages say it to whoever looks meanwhile
                    log.warning("help channel lost", extra={"error": type(err).__name__})
                up = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    # -- ending what must end

    async def _sweeps(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that
            # arrives as the event is set (a course's namespace deleted at shutdown), and the
            # loop then never ended.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.sweep_seconds):
                    await self._wake.wait()
            if cancelling():
                raise asyncio.CancelledError
            self._wake.clear()
            due, self._due = self._due, set()
            courses = due if due else {c.namespace for c in self.state.courses()}
            try:
                await self.sweep(courses)
            except Exception as err:  # Redis or the API server down: the next pass tries again
                if cancelling():
                    raise asyncio.CancelledError from err
                log.warning("help sweep failed", extra={"error": type(err).__name__})
                self._due |= due

    async def sweep(self, courses: Iterable[str]) -> list[Grant]:
        """End what is due in these courses; the grants ended (or found run out)."""
        over: list[Grant] = []
        for namespace in sorted(courses):
            course = self.state.course(namespace)
            watch = self.state.watch(namespace)
            for grant in await self.grants.claim_expired(namespace):
                over.append(grant)
                if self.metrics is not None:
                    self.metrics.help_ended(namespace, "expired")
                row = watch.row(grant.student) if watch is not None else None
                await record_grant(self.audit, self.kube, grant, row, actor=SYSTEM_ACTOR, actor_role="system",
                                   started=False)
            for grant in await self.grants.live_in(namespace):
                reason = grant_still_allowed(grant, course)
                if reason is None:
                    continue
                ended = await self.grants.end(grant.id, by=SYSTEM_ACTOR, reason=reason)
                if ended is None:
                    continue  # ended elsewhere meanwhile
                over.append(ended)
                if self.metrics is not None:
                    self.metrics.help_ended(namespace, reason)
                log.info("help grant ended", extra={"event": "help.revoked", "course": namespace,
                                                    "login": ended.staff, "student": ended.student,
                                                    "reason": reason})
                row = watch.row(ended.student) if watch is not None else None
                await record_grant(self.audit, self.kube, ended, row, actor=SYSTEM_ACTOR, actor_role="system",
                                   started=False)
        return over
