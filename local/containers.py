"""One container of a local Pod: its process, supervised as a kubelet supervises a container.

Started in a session (and, where the machine allows, a cgroup) of its own, so everything it
starts is stopped with it (local/process_tree.py; a terminal's Ctrl-C reaches only `userland
local`), as the environments' unprivileged user, dying with the runner (PR_SET_PDEATHSIG, and
the runner's reaper for what the program forked). Restarted when it ends, with a backoff that
doubles up to a limit and starts over once it has run for a while (the kubelet's
CrashLoopBackOff, shorter). Its state (`ContainerState`) is what the Pod's status reports:
waiting/running/terminated, the restart count, readiness from its readiness probe. A liveness
probe that fails `failureThreshold` times in a row restarts it. Every few seconds its listening
sockets are checked: one reachable beyond loopback ends it, with a reason saying so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from userland.local import demo_env, mountns
from userland.local.controlplane import die_with_parent
from userland.local.probes import run_probe
from userland.local.process_tree import SERVER_SHUTDOWN_TIMEOUT, Confinement, Placement
from userland.local.rules.podplan import ContainerPlan, Probe
from userland.local.rules.podstatus import ContainerState
from userland.local.sockets import session_listeners
from userland.local.users import LocalUser
from userland.platform.model.objects import rfc3339

log = logging.getLogger(__name__)

# Exit status of a shell whose command was not found.
NOT_FOUND = 127
# A run this long is not a crash loop: the next backoff starts from the beginning.
STABLE_SECONDS = 60.0
SOCKET_CHECK_SECONDS = 2.0


def _log_tail(path: Path, limit: int = 300) -> str:
    """The last non-empty line the program wrote (why it stopped, usually)."""
    try:
        with open(path, "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            size = log_file.tell()
            log_file.seek(max(0, size - 4096))
            lines = [line.strip() for line in log_file.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1][:limit] if lines else ""


class Container:
    """Run with `await container.run()` (forever; cancel to stop, which ends the process)."""

    def __init__(
        self,
        plan: ContainerPlan,
        *,
        address: str,
        user: LocalUser,
        log_path: Path,
        http: aiohttp.ClientSession,
        on_change: Callable[[], None],
        on_event: Callable[[str, str, str], None],
        confinement: Confinement,
        name: str = "",
        backoff: float = 1.0,
        max_backoff: float = 30.0,
    ) -> None:
        self.plan = plan
        self.confinement = confinement
        self.name = name or plan.name  # for logs and the ledger: namespace/pod/container
        self.address = address
        self.user = user
        self.log_path = log_path
        self.http = http
        self.on_change = on_change
        self.on_event = on_event  # (type, reason, message): an Event on the Pod
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.state = ContainerState(plan.name, plan.image)
        self.process: asyncio.subprocess.Process | None = None
        self.placement: Placement | None = None  # where the current run's processes are kept
        self._why_stopped = ""  # set by a check that ended the process

    def _set(self, **changes: object) -> None:
        before = vars(self.state).copy()
        for key, value in changes.items():
            setattr(self.state, key, value)
        if vars(self.state) != before:
            self.on_change()

    @property
    def env(self) -> dict[str, str]:
        return dict(self.plan.env)

    async def _spawn(self) -> asyncio.subprocess.Process:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        output = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        # Its own mount table when it has volumes to mount at their paths (mountns.py); the
        # launcher drops to the user itself, else the child does after joining its cgroup.
        argv, cwd, switches_itself = mountns.command(self.plan, self.user)
        placement = self.confinement.place(self.name, pids_max=self.plan.pids_max)
        become = self.user.become if self.user.switches and not switches_itself else None
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
                cwd=cwd,
                preexec_fn=placement.preexec(become, die_with_parent),
                start_new_session=True,
            )
        except BaseException:
            placement.abandon()
            raise
        finally:
            os.close(output)
        placement.started(process.pid)
        self.placement = placement
        return process

    async def stop(self, process: asyncio.subprocess.Process) -> None:
        """Stop every process of this run (local/process_tree.py)."""
        placement = self.placement
        if placement is None or placement.tree is None or placement.tree.leader != process.pid:
            placement = Placement(self.confinement, self.name, None)  # its session, at least
            placement.started(process.pid)
        await placement.stop(process)

    async def run(self) -> None:
        backoff = self.backoff
        while True:
            started = time.monotonic()
            try:
                process = await self._spawn()
            except OSError as err:
                self._set(
                    state="waiting",
                    reason="StartError",
                    ready=False,
                    message=f"{self.plan.program} could not start: {err.strerror or err}",
                )
                self.on_event("Warning", "Failed", self.state.message)
            else:
                await self._supervise(process)
            if time.monotonic() - started > STABLE_SECONDS:
                backoff = self.backoff
            if self.state.state == "terminated":
                self._set(
                    state="waiting",
                    reason="CrashLoopBackOff",
                    message=f"back-off {backoff:g}s restarting failed container {self.plan.name}: "
                    f"{self.state.message}".rstrip(": "),
                )
                self.on_event("Warning", "BackOff", self.state.message)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    async def run_to_completion(self, *, restart_on_failure: bool) -> None:
        """restartPolicy Never or OnFailure: run until it exits 0 (or, with Never, exits at all);
        with OnFailure a failure is restarted with backoff, as the kubelet does."""
        backoff = self.backoff
        while True:
            started = time.monotonic()
            try:
                process = await self._spawn()
            except OSError as err:
                self._set(state="waiting", reason="StartError", ready=False,
                          message=f"{self.plan.program} could not start: {err.strerror or err}")
                self.on_event("Warning", "Failed", self.state.message)
                if not restart_on_failure:
                    self._set(state="terminated", exit_code=128, finished_at=rfc3339())
                    return
            else:
                await self._supervise(process)
                if self.state.exit_code == 0 or not restart_on_failure:
                    # Nothing follows: the count is of restarts, and there is none after this run.
                    self._set(restarts=max(0, self.state.restarts - 1))
                    return
                self._set(state="waiting", reason="CrashLoopBackOff",
                          message=f"back-off {backoff:g}s restarting failed container {self.plan.name}: "
                                  f"{self.state.message}".rstrip(": "))
                self.on_event("Warning", "BackOff", self.state.message)
            if time.monotonic() - started > STABLE_SECONDS:
                backoff = self.backoff
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    async def _supervise(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._why_stopped = ""
        self._set(
            state="running",
            reason="",
            message="",
            started_at=rfc3339(),
            finished_at="",
            exit_code=None,
            ready=self.plan.readiness is None,
        )
        self.on_event("Normal", "Started", f"Started container {self.plan.name}")
        checks = [
            asyncio.create_task(self._sockets(process)),
            asyncio.create_task(self._readiness()),
            asyncio.create_task(self._liveness(process)),
        ]
        try:
            await process.wait()
        finally:
            for task in checks:
                task.cancel()
            await asyncio.gather(*checks, return_exceptions=True)
            await self.stop(process)
            self.process = None
        code = process.returncode
        if code is not None and code < 0:
            code = 128 - code  # killed by a signal: reported the way a container runtime does (137 = KILL)
        reason, message = "Error", self._why_stopped or _log_tail(self.log_path)
        if self._why_stopped:
            reason = "ExposedBeyondLoopback" if "loopback" in self._why_stopped else "Unhealthy"
        elif code == 0:
            reason = "Completed"
        elif code == NOT_FOUND:
            reason = "ProgramNotInstalled"
            message = f"{message} (is the program installed? `make local-apps` installs the shipped apps)"
        last = {
            "exitCode": code,
            "reason": reason,
            "message": message,
            "startedAt": self.state.started_at,
            "finishedAt": rfc3339(),
        }
        self._set(
            state="terminated",
            reason=reason,
            message=message,
            exit_code=code,
            ready=False,
            finished_at=last["finishedAt"],
            restarts=self.state.restarts + 1,
            last_exit=last,
        )
        # A program that ends with 0 did its work (a worker Pod's); anything else is worth a look.
        log.log(
            logging.INFO if code == 0 else logging.WARNING,
            "container exited",
            extra={
                "container": self.plan.name,
                "exit_code": code,
                "reason": reason,
                "log": str(self.log_path),
            },
        )

    async def _probe(self, probe: Probe) -> tuple[bool, str]:
        return await run_probe(
            probe, address=self.address, http=self.http, env=self.env,
            cwd=self.plan.host_workdir or self.plan.workdir, user=self.user
        )

    async def _readiness(self) -> None:
        probe = self.plan.readiness
        if probe is None:
            return
        await asyncio.sleep(probe.initial_delay)
        successes = failures = 0
        while True:
            ok, why = await self._probe(probe)
            if ok:
                successes, failures = successes + 1, 0
                if successes >= probe.success_threshold:
                    self._set(ready=True)
            else:
                successes, failures = 0, failures + 1
                if failures >= probe.failure_threshold and self.state.ready:
                    self._set(ready=False)
                    self.on_event("Warning", "Unhealthy", f"Readiness probe failed: {why}")
            # Until it first answers, probe often: a student is waiting for it (the kubelet
            # would wait a whole period; the wake-up page shows this moment).
            await asyncio.sleep(probe.period if self.state.ready or failures > 50 else min(probe.period, 0.2))

    async def _liveness(self, process: asyncio.subprocess.Process) -> None:
        probe = self.plan.liveness
        if probe is None:
            return
        await asyncio.sleep(probe.initial_delay)
        failures = 0
        while True:
            await asyncio.sleep(probe.period)
            ok, why = await self._probe(probe)
            failures = 0 if ok else failures + 1
            if failures >= probe.failure_threshold:
                self._why_stopped = f"liveness probe failed {failures} times: {why}"
                self.on_event("Warning", "Unhealthy", f"Liveness probe failed: {why}; restarting")
                await self.stop(process)
                return

    async def _sockets(self, process: asyncio.subprocess.Process) -> None:
        while True:
            await asyncio.sleep(SOCKET_CHECK_SECONDS if self.state.ready else 0.5)
            exposed = [
                s for s in await asyncio.to_thread(session_listeners, process.pid) if not s.loopback_only
            ]
            if exposed:
                where = ", ".join(sorted({str(s) for s in exposed}))
                self._why_stopped = (
                    f"{self.plan.program} listened on {where}, which other machines could "
                    "reach; local environments may listen on loopback only (0.0.0.0 and "
                    "127.0.0.1 in the Template's command, args and env are rewritten to "
                    f"the Pod's address {self.address})"
                )
                self.on_event("Warning", "ExposedBeyondLoopback", self._why_stopped)
                await self.stop(process)
                return


class DemoContainer(Container):
    """The demo Template's container: the built-in demo environment (demo_env.py), served by the
    runner itself on the Pod's address rather than as a process. It runs no student code, so
    it needs no unprivileged user, and it needs no Python the environments' user can reach
    (the runner's own may sit in root's private home)."""

    async def run(self) -> None:
        args = dict(zip(self.plan.argv[1::2], self.plan.argv[2::2], strict=False))
        try:
            port = int(args.get("--port", "8080"))
        except ValueError:
            port = 8080
        app = demo_env.create_app(args.get("--user", ""), args.get("--template", "demo"))
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SERVER_SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            await self._serve(runner, port)
        finally:
            await runner.cleanup()

    async def _serve(self, runner: web.AppRunner, port: int) -> None:
        backoff = self.backoff
        while True:
            try:
                await web.TCPSite(runner, self.address, port).start()
                break
            except OSError as err:
                # Like a container that cannot bind: said, then tried again with backoff.
                self._set(
                    state="waiting",
                    reason="CrashLoopBackOff",
                    restarts=self.state.restarts + 1,
                    message=f"demo environment: {err.strerror or err}; retrying in {backoff:g}s",
                )
                self.on_event("Warning", "BackOff", self.state.message)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
        self._set(
            state="running", reason="", message="", started_at=rfc3339(), ready=self.plan.readiness is None
        )
        self.on_event("Normal", "Started", f"Started container {self.plan.name} (the demo environment)")
        await self._readiness()
        await asyncio.Event().wait()
