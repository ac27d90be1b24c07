"""The local runner: the kubelet's part, for the local setup (`userland local`) only.

It watches the Deployments, Pods and Services the operator made (label
`app.kubernetes.io/managed-by=userland-operator`) and keeps three things level with them:

- every Deployment with replicas >= 1 has a local process (see launch.py: the Template's own
  command when it can run here, else the demo environment) on a free loopback port, restarted
  with backoff when it dies; scaled to 0 or deleted, the process is stopped;
- the student's Service carries `userland.dev/upstream: http://127.0.0.1:<port>` while that
  process answers HTTP, and no such annotation otherwise (the gateway's local mode reads it);
- the Deployment's Pods are Running and Ready while the process answers, not Ready otherwise
  (patched on the status subresource, as a kubelet reports), so the real deployment and
  replicaset controllers, and then the operator, report the environment as they would in a
  cluster.

Every decision is made from the watched state, never from the event, so a restart of the
runner (or stale state from an earlier run) converges the same way. Processes get their own
session (a terminal's Ctrl-C reaches only `userland local`) and die with the runner
(PR_SET_PDEATHSIG); children must therefore be started from the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import aiohttp

from userland.local.controlplane import die_with_parent, free_port
from userland.local.launch import LaunchSpec, owner_of, plan_launch, wanted_replicas
from userland.platform import naming
from userland.platform.informer import Informer, Key, object_key
from userland.platform.kube import DEPLOYMENTS, JSON, PODS, SERVICES, KubeClient, KubeError, NotFound

log = logging.getLogger(__name__)

MANAGED = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"


async def terminate(process: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """SIGTERM the process's group, SIGKILL what is left after `grace` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
    # Anything the process left behind in its group (a server's workers) goes too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class Environment:
    """One student's process, supervised: start, wait until it answers, restart with backoff."""

    def __init__(self, key: Key, spec: LaunchSpec, *, http: aiohttp.ClientSession, log_dir: Path,
                 on_change: Callable[[], None], backoff: float = 0.5, max_backoff: float = 15.0,
                 ready_timeout: float = 60.0) -> None:
        self.key = key
        self.spec = spec
        self.http = http
        self.log_path = log_dir / f"{key[0]}.{key[1]}.log"
        self.on_change = on_change
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.ready_timeout = ready_timeout
        self.url: str | None = None  # set while the process answers HTTP
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.url is not None

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"env-{self.key[0]}/{self.key[1]}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _set_url(self, url: str | None) -> None:
        if url != self.url:
            self.url = url
            self.on_change()

    async def _spawn(self, port: int) -> asyncio.subprocess.Process:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        output = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            return await asyncio.create_subprocess_exec(
                *self.spec.command(port),
                stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, **self.spec.environment(port)},
                preexec_fn=die_with_parent, start_new_session=True,
            )
        finally:
            os.close(output)

    async def _answers(self, process: asyncio.subprocess.Process, url: str) -> bool:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline and process.returncode is None:
            try:
                async with self.http.get(url + "/", allow_redirects=False,
                                         timeout=aiohttp.ClientTimeout(total=2)):
                    return True  # any HTTP answer: the server is up
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.1)
        return False

    async def _supervise(self) -> None:
        backoff = self.backoff
        while True:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            started = time.monotonic()
            self.starts += 1
            try:
                process = await self._spawn(port)
            except OSError as err:
                log.warning("environment could not start", extra={
                    "environment": "/".join(self.key), "error": str(err)})
            else:
                self.process = process
                try:
                    if await self._answers(process, url):
                        log.info("environment answering", extra={
                            "environment": "/".join(self.key), "url": url, "kind": self.spec.kind,
                            "pid": process.pid})
                        self._set_url(url)
                        await process.wait()
                finally:
                    # Also on cancellation (stop): the process never outlives its supervisor.
                    self._set_url(None)
                    await terminate(process)
                    self.process = None
                log.warning("environment exited, restarting", extra={
                    "environment": "/".join(self.key), "returncode": process.returncode,
                    "retry_in": backoff, "log": str(self.log_path)})
            if time.monotonic() - started > 30:
                backoff = self.backoff  # it ran for a while: not a crash loop
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)


def _selector_matches(deployment: JSON, pod: JSON) -> bool:
    selector = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _pod_ready(pod: JSON) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _pod_status(ready: bool, pod: JSON) -> JSON:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    value = "True" if ready else "False"
    reason = {} if ready else {"reason": "ProcessNotAnswering"}
    status: JSON = {"conditions": [
        {"type": "Ready", "status": value, "lastTransitionTime": now, **reason},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": now, **reason},
    ]}
    # Container statuses too, so `kubectl get pods` shows READY 1/1 as it would in a cluster.
    state: JSON = ({"running": {"startedAt": now}} if ready
                   else {"waiting": {"reason": "ProcessNotAnswering"}})
    status["containerStatuses"] = [
        {"name": str(c.get("name") or "main"), "image": str(c.get("image") or ""), "imageID": "",
         "ready": ready, "started": ready, "restartCount": 0, "state": state}
        for c in ((pod.get("spec") or {}).get("containers") or []) if isinstance(c, dict)
    ]
    if ready:
        status["phase"] = "Running"
        status["podIP"] = "127.0.0.1"
        status.setdefault("startTime", now)
    return status


def _version(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class LocalRunner:
    """Run with `await runner.run()`; cancel the task to stop (every process is stopped)."""

    def __init__(self, kube: KubeClient, namespaces: Iterable[str], *, log_dir: Path,
                 python: str = sys.executable, backoff: float = 0.5, max_backoff: float = 15.0,
                 ready_timeout: float = 60.0) -> None:
        self.kube = kube
        namespaces = tuple(namespaces)
        self.deployments = Informer(kube, DEPLOYMENTS, namespaces, label_selector=MANAGED)
        self.pods = Informer(kube, PODS, namespaces, label_selector=MANAGED)
        self.services = Informer(kube, SERVICES, namespaces, label_selector=MANAGED)
        self.log_dir = log_dir
        self.python = python
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.ready_timeout = ready_timeout
        self.environments: dict[Key, Environment] = {}
        self._changed = asyncio.Event()
        # (kind, namespace, name) -> resourceVersion the last patch was computed from: no
        # second patch until the watch has shown the first one's result.
        self._patched: dict[tuple[str, str, str], str] = {}
        for informer in (self.deployments, self.pods, self.services):
            informer.add_handler(self._on_event)

    def _on_event(self, old: JSON | None, new: JSON | None) -> None:
        self._changed.set()

    async def wait_synced(self) -> None:
        for informer in (self.deployments, self.pods, self.services):
            await informer.wait_synced()

    async def run(self) -> None:
        informers = [asyncio.create_task(i.run(), name=f"runner-{i.resource.plural}")
                     for i in (self.deployments, self.pods, self.services)]
        async with aiohttp.ClientSession() as http:
            try:
                await self.wait_synced()
                log.info("local runner watching", extra={"deployments": len(self.deployments.store)})
                self._changed.set()
                while True:
                    await self._changed.wait()
                    self._changed.clear()
                    if not await self.reconcile(http):
                        asyncio.get_running_loop().call_later(1.0, self._changed.set)
            finally:
                for task in informers:
                    task.cancel()
                await asyncio.gather(*informers, return_exceptions=True)
                await asyncio.gather(*(env.stop() for env in self.environments.values()))
                self.environments.clear()

    async def reconcile(self, http: aiohttp.ClientSession) -> bool:
        """Bring processes, annotations and pod status level with the watched state.
        False when a write failed (the caller tries again shortly)."""
        await self._sync_processes(http)
        ok = await self._sync_services()
        ok = await self._sync_pods() and ok
        present = {("Service", *object_key(s)) for s in self.services.items()}
        present |= {("Pod", *object_key(p)) for p in self.pods.items()}
        for marker in [m for m in self._patched if m not in present]:
            del self._patched[marker]
        return ok

    async def _sync_processes(self, http: aiohttp.ClientSession) -> None:
        wanted: dict[Key, LaunchSpec] = {}
        for deployment in self.deployments.items():
            if wanted_replicas(deployment) >= 1:
                wanted[object_key(deployment)] = plan_launch(deployment, python=self.python)
        for key, env in list(self.environments.items()):
            if wanted.get(key) != env.spec:
                reason = "changed" if key in wanted else "scaled down"
                log.info("stopping environment", extra={"environment": "/".join(key), "reason": reason})
                del self.environments[key]
                await env.stop()
        for key, spec in wanted.items():
            if key not in self.environments:
                env = Environment(key, spec, http=http, log_dir=self.log_dir, on_change=self._changed.set,
                                  backoff=self.backoff, max_backoff=self.max_backoff,
                                  ready_timeout=self.ready_timeout)
                self.environments[key] = env
                log.info("starting environment", extra={"environment": "/".join(key), "kind": spec.kind})
                env.start()

    def _environment_for_service(self, service: JSON) -> Environment | None:
        user, template = owner_of(service)
        if not naming.is_valid_login(user) or not template:
            return None
        namespace = str((service.get("metadata") or {}).get("namespace") or "")
        return self.environments.get((namespace, naming.deployment_name(template, user)))

    async def _patch(self, kind: str, obj: JSON, call: Callable[[], Awaitable[JSON]]) -> bool:
        namespace, name = object_key(obj)
        marker = (kind, namespace, name)
        if self._patched.get(marker) == _version(obj):
            return True  # already patched from this version; the watch will show the result
        try:
            await call()
        except NotFound:
            return True  # gone meanwhile; nothing to do
        except KubeError as err:
            log.warning("patch failed, retrying", extra={"kind": kind, "object": f"{namespace}/{name}",
                                                          "error": str(err)})
            self._patched.pop(marker, None)
            return False
        self._patched[marker] = _version(obj)
        return True

    async def _sync_services(self) -> bool:
        ok = True
        for service in self.services.items():
            env = self._environment_for_service(service)
            want = env.url if env is not None else None
            annotations = (service.get("metadata") or {}).get("annotations") or {}
            if annotations.get(naming.ANNOTATION_UPSTREAM) == want:
                continue
            namespace, name = object_key(service)
            patch = {"metadata": {"annotations": {naming.ANNOTATION_UPSTREAM: want}}}
            log.info("service upstream", extra={"service": f"{namespace}/{name}", "upstream": want})
            call = functools.partial(self.kube.merge_patch, SERVICES, namespace, name, patch)
            ok = await self._patch("Service", service, call) and ok
        return ok

    async def _sync_pods(self) -> bool:
        ok = True
        for pod in self.pods.items():
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            namespace = str(meta.get("namespace") or "")
            env = next((self.environments.get(object_key(d)) for d in self.deployments.items()
                        if object_key(d)[0] == namespace and _selector_matches(d, pod)), None)
            want = env is not None and env.ready
            if _pod_ready(pod) == want:
                continue
            name = str(meta.get("name"))
            call = functools.partial(self.kube.merge_patch, PODS, namespace, name,
                                     {"status": _pod_status(want, pod)}, subresource="status")
            ok = await self._patch("Pod", pod, call) and ok
        return ok
