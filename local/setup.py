"""`userland local`: the whole platform on this machine, with no cluster.

Starts, in order: the real control plane (etcd, kube-apiserver, kube-controller-manager with
the CRDs), a Redis, the example Template and students in namespace `classroom` (a course whose
instructor is `teacher`), a git server with the starter repository and the assignment store
(local/assignment_example.py: the example assignment `welcome`), the operator, the web UI and
the gateway as child processes (unchanged; the gateway in upstream mode `local`, `admin` an
admin), and the local runner in this process. Prints what to open, then runs until SIGINT/SIGTERM, when it
stops everything it started, in reverse order. A child that dies meanwhile is started again
with backoff (local/supervisor.py), and the terminal says so. State lives in `.run/` (kept
between runs, `--reset` starts afresh); logs in `.run/logs/`. What it is asked for and the
checks before starting: local/setup_options.py; what it prints: local/setup_terminal.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from userland.local import assignment_example, examples
from userland.local import prometheus as local_prometheus
from userland.local.children import Child, spawn, userland_command
from userland.local.controlplane import (
    ADMIN_TOKEN,
    ControlPlane,
    ControlPlaneError,
    crd_files,
    find_repo,
)
from userland.local.metrics import metrics_app
from userland.local.ports import free_port
from userland.local.process_tree import SERVER_SHUTDOWN_TIMEOUT
from userland.local.rules import template_apply
from userland.local.runner import LocalRunner
from userland.local.runner_host import app_bin_dirs
from userland.local.setup_options import LocalOptions, SetupError, preflight
from userland.local.setup_terminal import banner, gave_up_words, restart_words, say
from userland.local.stopping import RUNNER_STOP_LIMIT, Steps, within
from userland.local.supervisor import Supervisor
from userland.local.users import UserError, environment_user
from userland.platform.clients.kube import (
    JSON,
    NAMESPACES,
    TEMPLATES,
    USERLANDS,
    AlreadyExists,
    KubeClient,
    KubeError,
    NotFound,
)
from userland.platform.clients.logs import JsonFormatter
from userland.platform.model import naming
from userland.platform.model.settings import env_name, environment

log = logging.getLogger(__name__)

READY_TIMEOUT = 60.0
# While starting, a child that stops this many times in a row is an error (a setting it refuses,
# say); once everything runs, children are restarted for ever (with backoff).
STARTUP_FAILURES = 4


def _kept_secret(path: Path) -> str:
    """A secret kept in `path` (made once, readable by this account only)."""
    try:
        found = path.read_text().strip()
        if len(found) >= 32:
            return found
    except OSError:
        pass
    made = secrets.token_hex(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(made)
    return made


def _log_to_file(path: Path) -> None:
    """This process's structured logs (the runner's) go to a file; the terminal gets the banner."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(JsonFormatter())
    logging.getLogger().handlers[:] = [handler]


class Stopped(Exception):
    """SIGINT or SIGTERM arrived while starting."""


class LocalSetup:
    def __init__(self, options: LocalOptions) -> None:
        self.options = options
        self.plane: ControlPlane | None = None
        # Redis, the operator, the web UI and the gateway: started again when one dies.
        self.supervisor = Supervisor()
        self.kube: KubeClient | None = None
        self.runner_task: asyncio.Task[None] | None = None
        self.operator_port = 0
        self.web_port = 0
        # The gateway's and the web UI's internal listeners (/healthz, /metrics): never their
        # public ports.
        self.gateway_internal_port = 0
        self.web_internal_port = 0
        self.runner_metrics_port = 0  # the local runner's /metrics (this process)
        self.prometheus_port = 0
        self.metrics_runner: web.AppRunner | None = None
        # The gateway signs identities with it; the web UI checks them (and its forms' tokens):
        # kept in the state folder, so pages open across a restart still work.
        self.identity_secret = _kept_secret(options.state_dir / "identity-secret")
        # Example Templates found changed by the user and kept (the banner says so).
        self.kept_templates: list[str] = []
        # The example assignment: its git server and the assignment store (a child).
        self.assignments = assignment_example.LocalAssignments(options.state_dir, options.log_dir,
                                                               self.supervisor)
        self.stop = asyncio.Event()
        try:
            repo: Path | None = find_repo()
        except ControlPlaneError:
            repo = None  # an installed `userland` away from its repository: the demo only
        self.templates = examples.templates(repo)
        self.repo = repo
        self.app_bins = app_bin_dirs(dict(options.env), repo)
        self.lms: Any = None  # the example LMS, and the LTI namespace ("": LTI off)
        self.lti_namespace = ""

    # -- helpers

    @property
    def children(self) -> dict[str, Child]:
        return {name: entry.child for name, entry in self.supervisor.supervised.items()}

    def _check(self, *, starting: bool = True) -> None:
        """Stop on Ctrl-C; restart children that died (and say so). While starting, a child
        that keeps dying is an error with its exit status and log; once running, never."""
        if self.stop.is_set():
            raise Stopped
        for report in self.supervisor.poll():
            say(restart_words(report))
        if starting:
            for entry in self.supervisor.down():
                if entry.failures >= STARTUP_FAILURES:
                    raise SetupError(gave_up_words(entry.name, entry.last_status, entry.child.log_path))
        if self.runner_task is not None and self.runner_task.done():
            error = self.runner_task.exception() if not self.runner_task.cancelled() else None
            raise SetupError(f"the local runner stopped: {error!r}; see {self.options.log_dir / 'local.log'}")

    async def _until(self, what: str, check: Callable[[], Awaitable[bool]], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check()
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, KubeError):
                if await check():
                    return True
            await asyncio.sleep(0.2)
        log.warning("timed out waiting", extra={"for": what, "seconds": timeout})
        return False

    def _child_env(self, **settings: object) -> dict[str, str]:
        """This process's environment with `settings` (Settings' field names) on top."""
        return {**self.options.env, **environment(**settings)}

    # -- the steps

    def start_control_plane(self) -> None:
        state = self.options.state_dir / "control-plane"
        self.plane = ControlPlane(state_dir=state, bin_dir=self.options.k8s_cache / "bin", own_session=True)
        try:
            self.plane.start(crd_files())
        except (ControlPlaneError, OSError) as err:
            first = str(err).splitlines()[0] if str(err) else repr(err)
            raise SetupError(f"the control plane did not start: {first} (logs in {state})") from None
        except Exception as err:  # such as a refused CRD (urllib's HTTPError)
            raise SetupError(f"the control plane did not start: {err} (logs in {state})") from None
        self.plane.write_kubeconfig(self.options.kubeconfig, ADMIN_TOKEN, examples.NAMESPACE)

    async def start_redis(self) -> str:
        port = free_port()
        data = self.options.state_dir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        # Its data stays in the state folder (an append-only file, written every second), so a
        # restart keeps everyone signed in and the help history, as a cluster's Redis would.
        self.supervisor.add("redis", lambda: spawn("redis", [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(data)], self.options.log_dir))

        async def answers() -> bool:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"PING\r\n")
            line = await asyncio.wait_for(reader.readline(), 2)
            writer.close()
            return line.startswith(b"+PONG")

        if not await self._until("redis", answers, 20):
            raise SetupError(f"redis-server did not answer; see {self.children['redis'].log_path}")
        return f"redis://127.0.0.1:{port}/0"

    async def apply_examples(self) -> None:
        assert self.kube is not None
        kube = self.kube
        with contextlib.suppress(AlreadyExists):
            await kube.create(NAMESPACES, None, {"metadata": {"name": examples.NAMESPACE}})
        # A course for the web UI (an existing namespace from an older state dir gets it too).
        await kube.merge_patch(NAMESPACES, None, examples.NAMESPACE, examples.course_metadata())
        for shipped in self.templates:
            name = shipped["metadata"]["name"]
            template = template_apply.desired(shipped, self.options.idle)
            try:
                current: JSON | None = await kube.get(TEMPLATES, examples.NAMESPACE, name)
            except NotFound:
                current = None
            # A state dir from an earlier run: what the user changed there is kept (and said in
            # the banner); what we wrote and nobody touched takes this run's version.
            todo = template_apply.step(current, template)
            stored: JSON | None = None
            if todo == "create":
                with contextlib.suppress(AlreadyExists):
                    stored = await kube.create(TEMPLATES, examples.NAMESPACE, template)
            elif todo == "update" and current is not None:
                stored = await kube.replace(TEMPLATES, examples.NAMESPACE, name,
                                            {**current, "spec": template["spec"]})
            elif todo == "same" and current is not None and template_apply.recorded(current) is None:
                stored = current  # as wanted, from a run before the record existed
            elif todo == "kept":
                self.kept_templates.append(name)
            if stored is not None:
                # The spec as the server stored it (with its defaults): "untouched since" next time.
                await kube.merge_patch(TEMPLATES, examples.NAMESPACE, name,
                                       template_apply.record_patch(stored))
            students = self.options.students if name == examples.DEMO_TEMPLATE else \
                self.options.students[:examples.APP_STUDENTS]
            for student in students:
                with contextlib.suppress(AlreadyExists):
                    await kube.create(USERLANDS, examples.NAMESPACE, examples.userland(student, name))

    async def start_example_lms(self) -> None:
        """The example LMS (local/example_lms.py), with lti1p3platform (the `local` extra) only."""
        try:
            lms = import_module("userland.local.example_lms")
        except ImportError:
            return
        self.lms = await lms.start_for(self.kube, self.options.state_dir, self.options.public_url,
                                       (*self.options.students, "alice")[0], examples.NAMESPACE,
                                       examples.DEMO_TEMPLATE)
        self.lti_namespace = lms.LTI_NAMESPACE

    def start_operator(self) -> None:
        self.operator_port = free_port()
        self.supervisor.add("operator", lambda: spawn("operator", userland_command(
            "operator", "--kubeconfig", str(self.options.kubeconfig),
            "--listen", f"127.0.0.1:{self.operator_port}",
            # A fixed identity takes its own Lease back at once after a restart.
            "--identity", "userland-local", "--workers", "4",
        ), self.options.log_dir, self._child_env(
            namespaces=(examples.NAMESPACE,), lease_namespace=examples.NAMESPACE,
            # The operator writes each Userland's URL (status.url) from it.
            public_url=self.options.public_url, worker_image="userland:local",
            # Environments run on this machine: no image to pull ahead, no room to hold.
            nodes="local",
            # Collection Pods start 10 s before a deadline here, not 60 (one machine, no scheduling).
            collect_lead_seconds=self.options.env.get(env_name("collect_lead_seconds"), "10"),
            **self.assignments.settings())))

    def start_web(self, redis_url: str) -> None:
        self.web_port = free_port()
        self.web_internal_port = free_port()
        self.supervisor.add("web", lambda: spawn("web", userland_command(
            "web", "--kubeconfig", str(self.options.kubeconfig), "--listen", f"127.0.0.1:{self.web_port}",
        ), self.options.log_dir, self._child_env(
            redis_url=redis_url, public_url=self.options.public_url,
            identity_secret=self.identity_secret, cookie_secure=False,
            # The same staff lists as the gateway's (one config.env in a cluster): /admin lists them.
            admins=(examples.ADMIN,), lti_namespace=self.lti_namespace,
            internal_listen=f"127.0.0.1:{self.web_internal_port}", **self.assignments.settings())))

    def start_gateway(self, redis_url: str) -> None:
        options = self.options
        self.gateway_internal_port = free_port()
        env = self._child_env(
            web_url=f"http://127.0.0.1:{self.web_port}",  # the platform's own host is the web UI
            admins=(examples.ADMIN,), namespaces=(examples.NAMESPACE,), redis_url=redis_url,
            public_url=options.public_url, identity_secret=self.identity_secret, upstream_mode="local",
            cookie_secure=False, dev_login=not options.github, lti_namespace=self.lti_namespace,
            internal_listen=f"127.0.0.1:{self.gateway_internal_port}")
        self.supervisor.add("gateway", lambda: spawn("gateway", userland_command(
            "gateway", "--kubeconfig", str(options.kubeconfig), "--listen", f"127.0.0.1:{options.port}",
            "--grace", "2",
        ), options.log_dir, env))

    async def serve_runner_metrics(self, runner: LocalRunner) -> None:
        self.metrics_runner = web.AppRunner(metrics_app(runner), access_log=None, handle_signals=False,
                                            shutdown_timeout=SERVER_SHUTDOWN_TIMEOUT)
        await self.metrics_runner.setup()
        self.runner_metrics_port = free_port()
        await web.TCPSite(self.metrics_runner, "127.0.0.1", self.runner_metrics_port).start()

    def start_prometheus(self) -> None:
        assert self.plane is not None
        self.prometheus_port = free_port()
        targets = local_prometheus.Targets(
            apiserver=f"127.0.0.1:{self.plane.port}", etcd=f"127.0.0.1:{self.plane.etcd_port}",
            operator=f"127.0.0.1:{self.operator_port}", gateway=f"127.0.0.1:{self.gateway_internal_port}",
            web=f"127.0.0.1:{self.web_internal_port}", runner=f"127.0.0.1:{self.runner_metrics_port}",
            store=(f"127.0.0.1:{self.assignments.store_internal_port}"
                   if self.assignments.store_internal_port else ""))
        config = local_prometheus.write_config(self.options.state_dir, targets,
                                               interval=self.options.prometheus_interval)
        argv = local_prometheus.command(self.options.state_dir, self.prometheus_port, config)
        self.supervisor.add("prometheus", lambda: spawn("prometheus", argv, self.options.log_dir))

    async def wait_ready(self) -> bool:
        """The gateway and operator answer, and the students' Userlands are Ready (or a warning)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            def healthy(url: str) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    async with http.get(url) as response:
                        return response.status == 200
                return check

            checks = [("operator", f"{self.operator_port}/healthz"), ("web", f"{self.web_port}/healthz"),
                      ("gateway", f"{self.gateway_internal_port}/healthz")]
            if self.assignments.store_port:
                checks.append(("store", f"{self.assignments.store_port}/healthz"))
            if self.prometheus_port:
                checks.append(("prometheus", f"{self.prometheus_port}/-/ready"))
            for name, path in checks:
                if not await self._until(name, healthy(f"http://127.0.0.1:{path}"), READY_TIMEOUT):
                    raise SetupError(f"the {name} did not become healthy; see {self.children[name].log_path}")

        async def userlands_ready() -> bool:
            assert self.kube is not None
            items = (await self.kube.list(USERLANDS, examples.NAMESPACE))["items"]
            wanted = set(self.options.students)
            # The demo needs nothing installed: the others may still be starting, or wait for
            # `make local-apps` (the banner says which).
            # An asleep one (a state folder from a run with IDLE) is settled too: starting
            # again must not wake it, nor wait for it.
            ready = {
                naming.login_of(u["spec"]["user"]) for u in items
                if u["spec"]["template"] == examples.DEMO_TEMPLATE
                and ((u.get("status") or {}).get("phase") == "Idle"
                     or any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (u.get("status") or {}).get("conditions") or []))
            }
            return wanted <= ready

        return await self._until("userlands", userlands_ready, READY_TIMEOUT)

    async def serve(self) -> None:
        """Until SIGINT/SIGTERM; a child that dies is started again, the runner ending is an error."""
        while not self.stop.is_set():
            self._check(starting=False)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.5)

    async def start(self) -> None:
        o = self.options
        say(f"Starting the control plane (state in {o.state_dir}) ...")
        self.start_control_plane()  # blocking (~5 s), in the main thread: see children.py
        self._check()
        redis_url = await self.start_redis()
        self.kube = await KubeClient.connect(str(o.kubeconfig))
        await self.apply_examples()
        await self.assignments.start(self.kube, self.repo, {t["metadata"]["name"] for t in self.templates})
        await self.start_example_lms()
        say("Starting the operator, the gateway and the local runner ...")
        self.start_operator()
        self.start_web(redis_url)
        self.start_gateway(redis_url)
        try:
            user = environment_user()
        except UserError as err:
            raise SetupError(str(err)) from None
        runner = LocalRunner(self.kube, [examples.NAMESPACE], state_dir=o.state_dir, user=user,
                             app_bins=self.app_bins)
        self.runner_task = asyncio.create_task(runner.run(), name="local-runner")
        await self.serve_runner_metrics(runner)
        if o.prometheus:
            self.start_prometheus()
        banner(self, await self.wait_ready())

    async def shutdown(self) -> None:
        say("Stopping ...")
        step = Steps()
        for name in ("gateway", "web", "operator"):
            if name in self.children:
                self.children[name].signal(signal.SIGTERM)
        if self.runner_task is not None:
            step("the local runner and its environments")
            self.runner_task.cancel()
            await within(self.runner_task, RUNNER_STOP_LIMIT, "the local runner and its environments")
        # No restarts from here on: poll() is no longer called, and the entries go.
        children = self.children
        self.supervisor.supervised.clear()
        for name in ("prometheus", "gateway", "web", "operator", "store", "redis"):
            child = children.pop(name, None)
            if child is not None:
                step(name)
                await asyncio.to_thread(child.stop)
        for child in children.values():
            step(child.name)
            await asyncio.to_thread(child.stop)
        if self.metrics_runner is not None:
            await self.metrics_runner.cleanup()  # bounded: SERVER_SHUTDOWN_TIMEOUT
        if self.kube is not None:
            await self.kube.close()
        if self.lms is not None:
            await self.lms.close()
        step("the example assignment's git server")
        await self.assignments.stop()
        if self.plane is not None:
            step("the control plane")
            await asyncio.to_thread(self.plane.stop)
        step(None)
        say("Stopped.")


async def _main(options: LocalOptions) -> int:
    setup = LocalSetup(options)
    loop = asyncio.get_running_loop()
    # SIGHUP too: a closed terminal stops everything as Ctrl-C does (left to its default, the
    # process would die at once, and its children's children with no one to stop them).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, setup.stop.set)
    code = 0
    try:
        await setup.start()
        await setup.serve()
    except Stopped:
        pass
    except SetupError as err:
        print(f"userland local: {err}", file=sys.stderr, flush=True)
        code = 1
    except Exception as err:
        log.exception("userland local failed")
        print(f"userland local: unexpected error {err!r}; details in {options.log_dir / 'local.log'}",
              file=sys.stderr, flush=True)
        code = 1
    finally:
        await setup.shutdown()
    return code


def run_local(options: LocalOptions) -> int:
    try:
        preflight(options)
    except SetupError as err:
        print(f"userland local: {err}", file=sys.stderr)
        return 2
    if options.reset and options.state_dir.exists():
        shutil.rmtree(options.state_dir)
    options.state_dir.mkdir(parents=True, exist_ok=True)
    _log_to_file(options.log_dir / "local.log")
    # `kill -USR1 <pid>` prints where every thread is (to the terminal): for a start or a stop
    # that hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    return asyncio.run(_main(options))
