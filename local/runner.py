"""The local runner: the kubelet's part (and the scheduler's), for `userland local` only.

The real deployment and replicaset controllers make Pods for the operator's Deployments; no
scheduler or kubelet exists, so the Pods would stay Pending. The runner watches the Pods and
Services the operator manages (label `app.kubernetes.io/managed-by=userland-operator`) and
keeps three things level with them:

- every Pod that is not being deleted runs here: it gets a loopback address of its own
  (127.N.x.y, shared by its containers, see podplan.py), its folders, and its containers as
  local processes (pods.py, containers.py), run as an unprivileged user (users.py);
- the Pod's status says what a kubelet would (podstatus.py): phase, conditions, container
  states, restart counts, Ready from the readiness probes, the Pod's address; and Events
  ("Started", "BackOff", "Unhealthy", why a Pod cannot run here, also on its Userland);
- each Service carries `userland.dev/upstream: http://<pod address>:<target port>` of a Ready
  Pod it selects, and no such annotation otherwise (Kubernetes refuses loopback addresses in
  Endpoints, so the gateway's `local` upstream mode reads this instead).

Every decision is made from the watched state, never from the event, so a restart of the
runner (or state from an earlier run) converges the same way. Processes die with the runner.
The Pods' addresses come from pod_addresses.py; their folders, environment, own programs and
the reaper from runner_host.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import aiohttp

from userland.local import mountns
from userland.local.pod_addresses import AddressPool, free_block, listening_addresses
from userland.local.pods import PodWorker
from userland.local.process_tree import Confinement
from userland.local.rules.podplan import PLATFORM_PROGRAM, PodPlan, Unrunnable, plan_pod
from userland.local.rules.podstatus import keep_transition_times, same_status
from userland.local.runner_host import Reaper, base_environment, environment_roots, own_program
from userland.local.users import LocalUser, current_user
from userland.platform.clients.informer import Informer, Key, object_key
from userland.platform.clients.kube import (
    EVENTS,
    JSON,
    PODS,
    SERVICES,
    USERLANDS,
    KubeClient,
    KubeError,
    NotFound,
)
from userland.platform.model import naming
from userland.platform.model.events import event_body

log = logging.getLogger(__name__)

MANAGED = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
COMPONENT = "userland-local-runner"
_EVENT_REPEAT_SECONDS = 60.0
PATCH_PATIENCE = 2.0


def _service_target(service: JSON, pod: JSON) -> int | None:
    ports = (service.get("spec") or {}).get("ports") or []
    if not ports:
        return None
    target = ports[0].get("targetPort", ports[0].get("port"))
    if isinstance(target, int):
        return target
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return int(target) if isinstance(target, str) and target.isdigit() else None


def _selects(service: JSON, pod: JSON) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    meta_s, meta_p = service.get("metadata") or {}, pod.get("metadata") or {}
    return (
        bool(selector)
        and meta_s.get("namespace") == meta_p.get("namespace")
        and all(labels.get(k) == v for k, v in selector.items())
    )


def _version(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class LocalRunner:
    """Run with `await runner.run()`; cancel the task to stop (every process is stopped)."""

    def __init__(
        self,
        kube: KubeClient,
        namespaces: Iterable[str],
        *,
        state_dir: Path,
        user: LocalUser | None = None,
        app_bins: Iterable[Path] = (),
        python: str = sys.executable,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        use_cgroups: bool = True,
    ) -> None:
        self.kube = kube
        namespaces = tuple(namespaces)
        self.pods = Informer(kube, PODS, namespaces, label_selector=MANAGED)
        self.services = Informer(kube, SERVICES, namespaces, label_selector=MANAGED)
        self.user = user or current_user()
        self.state_dir = state_dir
        self.log_dir = state_dir / "logs" / "environments"
        self.app_bins = tuple(app_bins)
        self.python = python
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.use_cgroups = use_cgroups
        # The platform's own program for the operator's worker Pods: this installation's (None when
        # the environments' account cannot reach it: their Pods then say so). Made by run().
        self.own_program: str | None = None
        self.confinement: Confinement | None = None
        self.workers: dict[Key, PodWorker] = {}
        self.addresses = AddressPool(free_block(listening_addresses()))
        self._changed = asyncio.Event()
        # (kind, namespace, name) -> (resourceVersion the last patch was computed from, when):
        # no second patch until the watch has shown the first one's result, or a moment has
        # passed (a patch that changed nothing makes no new version to wait for).
        self._patched: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._events: asyncio.Queue[tuple[JSON, str, str, str]] = asyncio.Queue(maxsize=1000)
        self._last_event: dict[tuple[Key, str], tuple[str, float]] = {}
        self._host = socket.gethostname()
        for informer in (self.pods, self.services):
            informer.add_handler(self._on_event)

    def _on_event(self, old: JSON | None, new: JSON | None) -> None:
        self._changed.set()

    async def wait_synced(self) -> None:
        for informer in (self.pods, self.services):
            await informer.wait_synced()

    async def run(self) -> None:
        roots = await asyncio.to_thread(environment_roots, self.state_dir, self.user)
        self._claims_root, self._pods_root = roots / "volumes", roots / "pods"
        self.own_program = await asyncio.to_thread(own_program, self.python, self.user, roots / "programs")
        for folder in (roots, self._claims_root, self._pods_root):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o755)  # the environments' user passes through; each Pod's folder is its own
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.chmod(0o700)
        self.confinement = await asyncio.to_thread(
            Confinement.for_state, self.state_dir, use_cgroups=self.use_cgroups)
        if left := await asyncio.to_thread(self.confinement.sweep):
            log.warning("stopped what an earlier run left running", extra={"containers": left})
        reaper = Reaper.start(self.python, self.confinement.ledger, self.log_dir.parent / "reaper.log")
        background = [
            asyncio.create_task(i.run(), name=f"runner-{i.resource.plural}")
            for i in (self.pods, self.services)
        ]
        background.append(asyncio.create_task(self._send_events(), name="runner-events"))
        async with aiohttp.ClientSession() as http:
            try:
                await self.wait_synced()
                log.info(
                    "local runner watching", extra={"pods": len(self.pods.store), "user": self.user.name}
                )
                self._changed.set()
                while True:
                    await self._changed.wait()
                    self._changed.clear()
                    if not await self.reconcile(http):
                        asyncio.get_running_loop().call_later(1.0, self._changed.set)
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                await asyncio.gather(*(w.stop() for w in self.workers.values()))
                self.workers.clear()
                await reaper.stop()
                self.confinement.close()

    async def reconcile(self, http: aiohttp.ClientSession) -> bool:
        """Bring processes, pod status and annotations level with the watched state.
        False when a write failed (the caller tries again shortly)."""
        await self._sync_workers(http)
        ok = await self._sync_pod_status()
        ok = await self._sync_services() and ok
        present = {("Service", *object_key(s)) for s in self.services.items()}
        present |= {("Pod", *object_key(p)) for p in self.pods.items()}
        for marker in [m for m in self._patched if m not in present]:
            del self._patched[marker]
        return ok

    # -- pods

    def _wanted_pods(self) -> dict[Key, JSON]:
        # A Pod that already ran to completion (before this runner started) is never run again.
        return {
            object_key(p): p
            for p in self.pods.items()
            if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (object_key(p) in self.workers
                 or (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
        }

    async def _sync_workers(self, http: aiohttp.ClientSession) -> None:
        wanted = self._wanted_pods()
        for key, worker in list(self.workers.items()):
            pod = wanted.get(key)
            if pod is None or (pod.get("metadata") or {}).get("uid") != worker.uid:
                log.info("stopping pod", extra={"pod": "/".join(key)})
                del self.workers[key]
                await worker.stop()
                self.addresses.give_back(key)
        for key, pod in wanted.items():
            if key not in self.workers:
                self._start(key, pod, http)

    def _start(self, key: Key, pod: JSON, http: aiohttp.ClientSession) -> None:
        address = self.addresses.take(key)
        scratch = self._pods_root / key[0] / key[1]
        base = base_environment(self.user, self.app_bins)
        base["HOSTNAME"] = key[1]
        plan: PodPlan | Unrunnable
        system_which = functools.partial(shutil.which, path=base["PATH"])

        def which(program: str) -> str | None:
            if program == PLATFORM_PROGRAM:
                return self.own_program
            return system_which(program)

        try:
            plan = plan_pod(
                pod,
                address=address,
                claims_root=str(self._claims_root),
                scratch_root=str(scratch),
                base_env=base,
                which=which,
                own_home_paths=mountns.available(),
            )
        except Unrunnable as problem:
            plan = problem
        names = tuple(
            (str(c.get("name") or ""), str(c.get("image") or ""))
            for c in (pod.get("spec") or {}).get("containers") or []
            if isinstance(c, dict)
        )
        assert self.confinement is not None, "run() sets it up"
        worker = PodWorker(
            key,
            plan,
            confinement=self.confinement,
            address=address,
            user=self.user,
            log_dir=self.log_dir,
            scratch=scratch,
            http=http,
            on_change=self._changed.set,
            on_event=self._event_sink(key),
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            container_names=names,
            uid=str((pod.get("metadata") or {}).get("uid") or ""),
        )
        self.workers[key] = worker
        log.info(
            "starting pod",
            extra={"pod": "/".join(key), "address": address, "problem": getattr(plan, "reason", "")},
        )
        worker.start()

    async def _sync_pod_status(self) -> bool:
        ok = True
        for key, worker in self.workers.items():
            pod = self.pods.store.get(key)
            if pod is None:
                continue
            old = pod.get("status") or {}
            new = keep_transition_times(worker.status(), old)
            if same_status(new, old):
                continue
            call = functools.partial(
                self.kube.merge_patch, PODS, key[0], key[1], {"status": new}, subresource="status"
            )
            ok = await self._patch("Pod", pod, call) and ok
        return ok

    # -- services

    def _upstream_for(self, service: JSON) -> str | None:
        for key in sorted(self.workers):
            worker, pod = self.workers[key], self.pods.store.get(key)
            if pod is not None and worker.ready and _selects(service, pod):
                port = _service_target(service, pod)
                if port is not None:
                    return f"http://{worker.address}:{port}"
        return None

    async def _sync_services(self) -> bool:
        ok = True
        for service in self.services.items():
            want = self._upstream_for(service)
            annotations = (service.get("metadata") or {}).get("annotations") or {}
            if annotations.get(naming.ANNOTATION_UPSTREAM) == want:
                continue
            namespace, name = object_key(service)
            patch = {"metadata": {"annotations": {naming.ANNOTATION_UPSTREAM: want}}}
            log.info("service upstream", extra={"service": f"{namespace}/{name}", "upstream": want})
            call = functools.partial(self.kube.merge_patch, SERVICES, namespace, name, patch)
            ok = await self._patch("Service", service, call) and ok
        return ok

    async def _patch(self, kind: str, obj: JSON, call: Callable[[], Awaitable[JSON]]) -> bool:
        namespace, name = object_key(obj)
        marker = (kind, namespace, name)
        previous = self._patched.get(marker)
        if (
            previous is not None
            and previous[0] == _version(obj)
            and time.monotonic() - previous[1] < PATCH_PATIENCE
        ):
            asyncio.get_running_loop().call_later(PATCH_PATIENCE, self._changed.set)
            return True  # already patched from this version; the watch will show the result
        try:
            await call()
        except NotFound:
            return True  # gone meanwhile; nothing to do
        except KubeError as err:
            log.warning(
                "patch failed, retrying",
                extra={"kind": kind, "object": f"{namespace}/{name}", "error": str(err)[:300]},
            )
            self._patched.pop(marker, None)
            return False
        self._patched[marker] = (_version(obj), time.monotonic())
        return True

    # -- events

    def _event_sink(self, key: Key) -> Callable[[str, str, str], None]:
        def sink(event_type: str, reason: str, message: str) -> None:
            now = time.monotonic()
            last = self._last_event.get((key, reason))
            if last is not None and last[0] == message and now - last[1] < _EVENT_REPEAT_SECONDS:
                return  # a crash loop says the same thing once a minute, not every restart
            self._last_event[(key, reason)] = (message, now)
            pod = self.pods.store.get(key)
            if pod is None:
                return
            with contextlib.suppress(asyncio.QueueFull):
                self._events.put_nowait((pod, event_type, reason, message))

        return sink

    async def _send_events(self) -> None:
        while True:
            pod, event_type, reason, message = await self._events.get()
            involved = [{**pod, "apiVersion": "v1", "kind": "Pod"}]
            if event_type == "Warning" and reason not in ("BackOff", "Unhealthy"):
                # Why a Pod cannot run here is the student's environment's story too.
                owner = await self._userland_of(pod)
                if owner is not None:
                    involved.append(owner)
            for obj in involved:
                body = event_body(obj, event_type, reason, message, component=COMPONENT, host=self._host)
                try:
                    await self.kube.create(EVENTS, body["metadata"]["namespace"], body)
                except KubeError as err:
                    log.warning("could not record event", extra={"reason": reason, "error": str(err)[:200]})

    async def _userland_of(self, pod: JSON) -> JSON | None:
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(naming.LABEL_USERLAND)
        if not name:
            return None
        try:
            userland = await self.kube.get(USERLANDS, str(meta.get("namespace")), str(name))
        except KubeError:
            return None
        return {**userland, "apiVersion": naming.API_VERSION, "kind": "Userland"}
