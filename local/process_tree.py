"""Every process of a local container, found and stopped together, however the runner ends.

A container's program forks (phpMyAdmin's `php -S` runs four workers, code-server its helpers)
and what it forks may leave its process group or even its session (a student's `setsid` in a
terminal). A kubelet stops a container whole; so does the runner:

- **A cgroup per container, where the machine lets us** (the runner is root and a cgroup
  hierarchy is writable: v2, else v1's `pids`): the process joins it before its program starts
  (in the child, as root, before it becomes the environments' user), so every descendant is in
  it whatever it does with sessions. Stopping signals what the cgroup holds (v2's `cgroup.kill`
  at the end) until it is empty, then removes it.
- **Elsewhere, its session**: the program starts a session of its own; stopping signals every
  process of that session or its process group started since the program (from /proc).
- **A ledger** in the state folder names each running container's cgroup or session. The
  runner stops its containers when it is cancelled (Ctrl-C, SIGTERM), a Pod is deleted or a
  container restarts; when it ends any other way (SIGHUP from a closed terminal, SIGKILL, a
  crash), PR_SET_PDEATHSIG reaches each program's first process only, so a reaper process
  (local/reaper.py), holding a pipe from the runner, stops whatever the ledger still names as
  soon as that pipe closes. A runner starting on the same state folder first does the same
  for a predecessor whose reaper did not run.

Only the standard library here: the reaper imports this module alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL, as a kubelet's terminationGracePeriod, shorter
# An in-process server of the runner's or `userland local`'s (the demo environment, the example
# assignment's git server, the runner's metrics) waits this long for requests in flight when it
# stops, as a process gets STOP_GRACE; aiohttp's own default is 60 s per server.
SERVER_SHUTDOWN_TIMEOUT = 5.0


# ----- /proc -----


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    pgid: int
    sid: int
    start: int  # clock ticks since boot: tells a reused pid apart
    zombie: bool


def proc_info(pid: int, proc: Path = PROC) -> ProcInfo | None:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(") ", 1)[-1].split()
    try:
        return ProcInfo(pid, int(fields[2]), int(fields[3]), int(fields[19]), fields[0] in ("Z", "X"))
    except (IndexError, ValueError):
        return None


def all_processes(proc: Path = PROC) -> list[ProcInfo]:
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and (info := proc_info(int(entry.name), proc)) is not None:
            found.append(info)
    return found


def session_members(leader: int, since: int, proc: Path = PROC) -> list[int]:
    """Live processes of `leader`'s session or process group that started at `since` or later
    (so an unrelated process that got a reused number is never one of them)."""
    return sorted(p.pid for p in all_processes(proc)
                  if (p.sid == leader or p.pgid == leader) and p.start >= since and not p.zombie)


# ----- cgroups -----


def _own_cgroups(proc: Path = PROC) -> dict[str, str]:
    """This process's cgroup per hierarchy: '' for v2, else its controllers (`pids`, ...)."""
    found = {}
    with contextlib.suppress(OSError):
        for line in (proc / "self" / "cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            found["" if number == "0" else controllers] = path
    return found


def cgroup_base(proc: Path = PROC) -> Path | None:
    """A cgroup folder this process may make sub-cgroups in: its own cgroup in the v2 hierarchy when
    that has the pids controller, else in v1's `pids` hierarchy, else in v2's; None where there is
    none (not root, no cgroupfs)."""
    if os.geteuid() != 0:
        return None
    own = _own_cgroups(proc)
    candidates = []
    with contextlib.suppress(OSError):
        for line in (proc / "self" / "mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) < 4:
                continue
            mount, kind, options = parts[1], parts[2], parts[3].split(",")
            if kind == "cgroup2" and "" in own:
                # Preferred where it has the pids controller (a grading Pod's process limit, pids.max);
                # a hybrid machine's v2 hierarchy has none: v1's pids hierarchy then.
                folder = Path(mount) / own[""].lstrip("/")
                try:
                    has_pids = "pids" in (folder / "cgroup.controllers").read_text().split()
                except OSError:
                    has_pids = False
                candidates.append((0 if has_pids else 2, folder))
            elif kind == "cgroup" and "pids" in options:
                key = next((k for k in own if "pids" in k.split(",")), None)
                if key is not None:
                    candidates.append((1, Path(mount) / own[key].lstrip("/")))
    for _, folder in sorted(candidates, key=lambda c: c[0]):
        probe = folder / f"userland-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        return folder
    return None


def cgroup_members(cgroup: Path, proc: Path = PROC) -> list[int]:
    """Live processes in `cgroup` (a zombie waiting to be reaped is not one)."""
    try:
        listed = [int(line) for line in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []
    return sorted(pid for pid in listed if (info := proc_info(pid, proc)) is not None and not info.zombie)


def _signal(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


# ----- one container's processes -----


@dataclass
class Tree:
    """The processes of one container run: its first process and everything it started."""

    leader: int
    start: int
    cgroup: Path | None = None
    name: str = ""

    def members(self) -> list[int]:
        if self.cgroup is not None:
            return cgroup_members(self.cgroup)
        return session_members(self.leader, self.start)

    def signal(self, signum: int) -> None:
        _signal(self.members(), signum)

    def kill_all(self) -> None:
        """SIGKILL until nothing is left (a process may fork while it is being killed)."""
        for _ in range(200):
            members = self.members()
            if not members:
                break
            if self.cgroup is not None and (self.cgroup / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (self.cgroup / "cgroup.kill").write_text("1")
            _signal(members, signal.SIGKILL)
            time.sleep(0.01)
        self.remove_cgroup()

    def remove_cgroup(self) -> None:
        if self.cgroup is None:
            return
        for _ in range(100):  # the last members leave the cgroup a moment after they die
            try:
                self.cgroup.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)

    def stop_now(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM to every member, SIGKILL to what is left after `grace` (blocking: the reaper)."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill_all()

    def to_json(self) -> str:
        return json.dumps({"leader": self.leader, "start": self.start,
                           "cgroup": str(self.cgroup) if self.cgroup else "", "name": self.name})

    @classmethod
    def from_json(cls, text: str) -> Tree:
        data = json.loads(text)
        cgroup = Path(data["cgroup"]) if data.get("cgroup") else None
        return cls(int(data["leader"]), int(data["start"]), cgroup, str(data.get("name") or ""))


class Confinement:
    """Where one runner's containers are kept (cgroups or sessions) and its ledger of them."""

    def __init__(self, ledger: Path, cgroups: Path | None) -> None:
        self.ledger = ledger
        self.cgroups = cgroups

    @classmethod
    def for_state(cls, state_dir: Path, *, use_cgroups: bool = True) -> Confinement:
        ledger = state_dir / "processes"
        ledger.mkdir(parents=True, exist_ok=True)
        ledger.chmod(0o700)
        base = cgroup_base() if use_cgroups else None
        cgroups = None
        if base is not None:
            key = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
            cgroups = base / f"userland-local-{key}"
            try:
                cgroups.mkdir(exist_ok=True)
            except OSError:
                cgroups = None
        return cls(ledger, cgroups)

    def place(self, name: str, *, pids_max: int | None = None) -> Placement:
        """Where the next run of a container goes (a fresh cgroup, when there are cgroups), with at
        most `pids_max` processes in it when given (the pids controller: v1's hierarchy or v2's)."""
        cgroup = None
        if self.cgroups is not None:
            cgroup = self.cgroups / uuid.uuid4().hex[:16]
            try:
                self.cgroups.mkdir(exist_ok=True)  # a sweep may have removed it, empty
                cgroup.mkdir()
            except OSError:
                cgroup = None
        if cgroup is not None and pids_max is not None:
            try:
                (cgroup / "pids.max").write_text(f"{pids_max}\n")
            except OSError as err:
                log.warning("process limit not set", extra={"container": name, "error": str(err)})
        return Placement(self, name, cgroup)

    def close(self) -> None:
        """Every container has stopped: the runner's own cgroup folder goes too."""
        if self.cgroups is not None:
            with contextlib.suppress(OSError):
                self.cgroups.rmdir()

    def sweep(self) -> int:
        """Stop whatever the ledger still names (a runner that ended without stopping its
        containers); the number of containers that had processes left."""
        found = 0
        for entry in sorted(self.ledger.glob("*.json")):
            try:
                tree = Tree.from_json(entry.read_text())
            except (OSError, ValueError, KeyError):
                entry.unlink(missing_ok=True)
                continue
            if tree.members():
                found += 1
                log.warning("stopping what an earlier run left", extra={"container": tree.name,
                                                                       "processes": len(tree.members())})
                tree.stop_now()
            else:
                tree.remove_cgroup()
            entry.unlink(missing_ok=True)
            if tree.cgroup is not None:  # the runner's own folder, once its last container is gone
                with contextlib.suppress(OSError):
                    tree.cgroup.parent.rmdir()
        return found


class Placement:
    """One run of one container: how its process starts (`preexec`) and how it all stops."""

    def __init__(self, confinement: Confinement, name: str, cgroup: Path | None) -> None:
        self.confinement = confinement
        self.name = name
        self.cgroup = cgroup
        self.tree: Tree | None = None
        self._entry = confinement.ledger / f"{uuid.uuid4().hex}.json"
        if cgroup is not None:
            # In the ledger before anything runs in it: a runner that ends while the program is
            # starting leaves nothing the reaper does not know of.
            self._record(Tree(0, 0, cgroup, name))

    def _record(self, tree: Tree) -> None:
        tmp = self._entry.with_suffix(".tmp")
        tmp.write_text(tree.to_json())
        tmp.replace(self._entry)

    def preexec(self, become: Callable[[], None] | None, then: Callable[[], None]) -> Callable[[], None]:
        """What the child runs before its program: join the cgroup (still as root), become the
        environments' user (`become`), then `then` (PR_SET_PDEATHSIG, which a change of user
        would clear)."""
        procs = None if self.cgroup is None else str(self.cgroup / "cgroup.procs")

        def run() -> None:
            # Between fork and exec: plain system calls only.
            if procs is not None:
                fd = os.open(procs, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            if become is not None:
                become()
            then()

        return run

    def started(self, pid: int) -> Tree:
        info = proc_info(pid)
        self.tree = Tree(pid, info.start if info is not None else 0, self.cgroup, self.name)
        self._record(self.tree)
        return self.tree

    def members(self) -> list[int]:
        return self.tree.members() if self.tree is not None else []

    def abandon(self) -> None:
        """The start failed or was cancelled half way: whatever got into the cgroup goes, and
        the cgroup (a process started in a session alone is stopped by PR_SET_PDEATHSIG)."""
        if self.cgroup is not None:
            Tree(0, 0, self.cgroup, self.name).kill_all()
        self._entry.unlink(missing_ok=True)

    async def stop(self, process: asyncio.subprocess.Process, grace: float = STOP_GRACE) -> None:
        """SIGTERM to every process of the run, SIGKILL to what is left after `grace` seconds,
        reap the first, forget the run. Runs to the end even when the caller is cancelled
        (again) meanwhile: a cleanup cut short would leave processes running; the
        cancellation is re-raised afterwards."""
        task = asyncio.ensure_future(self._stop(process, grace))
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
        task.result()
        if cancelled:
            raise asyncio.CancelledError

    async def _stop(self, process: asyncio.subprocess.Process, grace: float) -> None:
        tree = self.tree or Tree(process.pid, 0, self.cgroup, self.name)
        tree.signal(signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)  # the group too, should /proc be unreadable
        deadline = time.monotonic() + grace
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace)
        # Polled: nothing tells us when the last of another program's processes has gone.
        while tree.members() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await asyncio.to_thread(tree.kill_all)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.returncode is None:
            await process.wait()
        self._entry.unlink(missing_ok=True)
