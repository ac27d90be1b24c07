"""One local Pod: its folders, its init containers run to completion in order, then every
container side by side (containers.py), and the status a kubelet would report for it.

A Pod the runner cannot run (podplan.Unrunnable: a program not installed here, a volume kind
it does not support, ...) still gets a worker: it starts nothing and reports why, in the
Pod's status and in one Warning Event, so the instructor, `kubectl describe` and the waking
page all say the same sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from userland.local.containers import Container, DemoContainer
from userland.local.process_tree import Confinement
from userland.local.rules.podplan import DEMO_PROGRAM, ContainerPlan, PodPlan, Unrunnable
from userland.local.rules.podstatus import ContainerState, pod_status
from userland.local.users import LocalUser
from userland.platform.model.objects import rfc3339

log = logging.getLogger(__name__)

JSON = dict[str, Any]
EventSink = Callable[[str, str, str], None]


class PodWorker:
    """Run with `start()`; `stop()` ends every process. `status()` is the current report."""

    def __init__(
        self,
        key: tuple[str, str],
        plan: PodPlan | Unrunnable,
        *,
        address: str,
        user: LocalUser,
        log_dir: Path,
        scratch: Path | None,
        http: aiohttp.ClientSession,
        on_change: Callable[[], None],
        on_event: EventSink,
        confinement: Confinement,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        container_names: tuple[tuple[str, str], ...] = (),
        uid: str = "",
    ) -> None:
        self.key = key
        self.uid = uid
        self.plan = plan
        self.address = address
        self.user = user
        self.scratch = scratch
        self.on_change = on_change
        self.on_event = on_event
        self.started = rfc3339()
        self.initialized = isinstance(plan, PodPlan) and not plan.init_containers
        # A Pod that runs to completion: Succeeded or Failed once every container has ended.
        self.finished: str | None = None
        self.deadline_exceeded = False
        self._task: asyncio.Task[None] | None = None
        self._backoff = backoff

        def container(c: ContainerPlan) -> Container:
            kind = DemoContainer if c.program == DEMO_PROGRAM else Container
            return kind(
                c,
                address=address,
                user=user,
                http=http,
                on_change=on_change,
                on_event=on_event,
                confinement=confinement,
                name=f"{key[0]}/{key[1]}/{c.name}",
                log_path=log_dir / f"{key[0]}.{key[1]}.{c.name}.log",
                backoff=backoff,
                max_backoff=max_backoff,
            )

        if isinstance(plan, PodPlan):
            self.init_containers = [container(c) for c in plan.init_containers]
            self.containers = [container(c) for c in plan.containers]
            self._waiting = [ContainerState(c.name, c.image) for c in plan.containers]
        else:
            self.init_containers, self.containers = [], []
            # Names and images from the Pod, so its status lists every container.
            self._waiting = [ContainerState(name, image) for name, image in container_names]

    @property
    def unrunnable(self) -> Unrunnable | None:
        return self.plan if isinstance(self.plan, Unrunnable) else None

    @property
    def ready(self) -> bool:
        return self.initialized and bool(self.containers) and all(c.state.ready for c in self.containers)

    def status(self) -> JSON:
        states = [c.state for c in self.containers] if self.initialized else self._waiting
        return pod_status(
            address=self.address,
            start_time=self.started,
            since=rfc3339(),
            unrunnable=self.unrunnable,
            init_states=[c.state for c in self.init_containers],
            states=states,
            initialized=self.initialized,
            finished=self.finished,
            deadline_exceeded=self.deadline_exceeded,
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pod-{self.key[0]}/{self.key[1]}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.scratch is not None:
            # The Pod's own folders (emptyDir volumes, a HOME without storage) go with it.
            await asyncio.to_thread(shutil.rmtree, self.scratch, True)

    async def _run(self) -> None:
        problem = self.unrunnable
        if problem is not None:
            log.warning(
                "pod cannot run here",
                extra={"pod": "/".join(self.key), "reason": problem.reason, "why": problem.message},
            )
            self.on_event("Warning", problem.reason, problem.message)
            self.on_change()
            return
        plan = self.plan
        assert isinstance(plan, PodPlan)
        for folder in plan.folders:
            self.user.own(Path(folder))
        self.on_event(
            "Normal",
            "Scheduled",
            f"Successfully assigned {self.key[0]}/{self.key[1]} to this machine at {self.address}",
        )
        for init in self.init_containers:
            await self._complete(init)
        if not self.initialized:
            self.initialized = True
            self.on_change()
        if plan.restart_policy == "Always":
            runs = [c.run() for c in self.containers]
        else:
            restart = plan.restart_policy == "OnFailure"
            runs = [c.run_to_completion(restart_on_failure=restart) for c in self.containers]
        tasks = [asyncio.create_task(run, name=f"container-{c.plan.name}")
                 for run, c in zip(runs, self.containers, strict=True)]
        try:
            async with asyncio.timeout(plan.active_deadline):
                await asyncio.gather(*tasks)
        except TimeoutError:
            self.deadline_exceeded = True
            self.on_event("Warning", "DeadlineExceeded", "Pod was active on the node longer than the "
                          f"specified deadline ({plan.active_deadline:g} s)")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if plan.restart_policy != "Always" or self.deadline_exceeded:
            ok = not self.deadline_exceeded and all(c.state.exit_code == 0 for c in self.containers)
            self.finished = "Succeeded" if ok else "Failed"
            self.on_change()

    async def _complete(self, init: Container) -> None:
        """Run an init container until it exits 0, retrying with backoff (restartPolicy Always)."""
        backoff = self._backoff
        while True:
            started = time.monotonic()
            try:
                process = await init._spawn()
            except OSError as err:
                init._set(state="waiting", reason="StartError", message=str(err))
            else:
                init._set(state="running", reason="", message="", started_at=rfc3339())
                try:
                    await process.wait()
                finally:
                    await init.stop(process)
                if process.returncode == 0:
                    init._set(state="terminated", reason="Completed", exit_code=0, finished_at=rfc3339())
                    return
                init._set(
                    state="waiting",
                    reason="CrashLoopBackOff",
                    restarts=init.state.restarts + 1,
                    message=f"init container {init.plan.name} exited with {process.returncode}",
                )
                self.on_event("Warning", "BackOff", init.state.message)
            if time.monotonic() - started > 60:
                backoff = self._backoff
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)
