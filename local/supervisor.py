"""Keeps `userland local`'s children running: one that dies is started again, with backoff.

Redis, the operator, the web UI and the gateway are separate processes; any of them can fall
over (a bug, the OOM killer, someone's `kill`). The platform should not stop because of that,
as a kubelet restarts a crashed container: the child is started again with the very same
command line (so the same port and the same settings), after 1 s, then 2, 4 ... up to 30 s
while it keeps failing; a run that lasted `stable_after` seconds starts the count afresh.
Every exit and restart is logged (and said on the terminal by `userland local`).

`restart_delay` is the policy (pure); `Supervisor.poll` is called from `userland local`'s loop
with the time, and does the exits and the restarts that are due. No thread, no signal handler.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from userland.local.children import Child

log = logging.getLogger(__name__)

BASE_DELAY = 1.0
MAX_DELAY = 30.0
STABLE_AFTER = 60.0


def restart_delay(failures: int, *, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> float:
    """Seconds to wait before starting a child again after its `failures`-th exit in a row."""
    return float(min(cap, base * 2.0 ** max(0, failures - 1)))


@dataclass
class Supervised:
    name: str
    start: Callable[[], Child]  # starts it anew: same command line, same ports
    child: Child
    started_at: float
    restarts: int = 0  # all restarts (as RESTARTS counts a container's)
    failures: int = 0  # exits in a row without a stable run
    restart_at: float | None = None  # when it is down: when it starts again
    last_status: int | None = None


@dataclass(frozen=True)
class Report:
    """Something `userland local` tells the person running it."""

    name: str
    what: str  # "exited" | "restarted"
    status: int | None = None
    retry_in: float = 0.0
    restarts: int = 0
    log_path: str = ""


@dataclass
class Supervisor:
    base: float = BASE_DELAY
    cap: float = MAX_DELAY
    stable_after: float = STABLE_AFTER
    clock: Callable[[], float] = time.monotonic
    supervised: dict[str, Supervised] = field(default_factory=dict)

    def add(self, name: str, start: Callable[[], Child]) -> Child:
        child = start()
        self.supervised[name] = Supervised(name, start, child, started_at=self.clock())
        return child

    def child(self, name: str) -> Child | None:
        entry = self.supervised.get(name)
        return None if entry is None else entry.child

    def down(self) -> list[Supervised]:
        """Children that exited and wait for their restart."""
        return [s for s in self.supervised.values() if s.restart_at is not None]

    def poll(self) -> list[Report]:
        """Notice exits, start what is due; what happened, to tell the user."""
        now = self.clock()
        reports = []
        for entry in self.supervised.values():
            if entry.restart_at is None:
                status = entry.child.exited()
                if status is None:
                    continue
                entry.failures = 1 if now - entry.started_at >= self.stable_after else entry.failures + 1
                delay = restart_delay(entry.failures, base=self.base, cap=self.cap)
                entry.restart_at, entry.last_status = now + delay, status
                log.warning("child exited, restarting it", extra={
                    "child": entry.name, "status": status, "retry_in": delay, "restarts": entry.restarts,
                    "log": str(entry.child.log_path)})
                reports.append(Report(entry.name, "exited", status, delay, entry.restarts,
                                      str(entry.child.log_path)))
            elif now >= entry.restart_at:
                try:
                    entry.child = entry.start()
                except OSError as err:  # such as a program removed meanwhile: try again later
                    entry.failures += 1
                    entry.restart_at = now + restart_delay(entry.failures, base=self.base, cap=self.cap)
                    log.error("child could not be started", extra={"child": entry.name, "error": str(err)})
                    continue
                entry.restarts += 1
                entry.started_at, entry.restart_at = now, None
                log.info("child restarted", extra={"child": entry.name, "pid": entry.child.pid,
                                                   "restarts": entry.restarts})
                reports.append(Report(entry.name, "restarted", restarts=entry.restarts,
                                      log_path=str(entry.child.log_path)))
        return reports
