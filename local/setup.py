"""`userland local`: the whole platform on this machine, with no cluster.

Starts, in order: the real control plane (etcd, kube-apiserver, kube-controller-manager with
the CRDs), a Redis, the example Template and students in namespace `classroom` (a course whose
instructor is `teacher`), a git server with the starter repository and the assignment store
(local/assignment_example.py: the example assignment `welcome`), the operator, the web UI and
the gateway as child processes (unchanged; the gateway in upstream mode `local`, `admin` an
admin), and the local runner in this process. Prints what to open, then runs until SIGINT/SIGTERM, when it
stops everything it started, in reverse order. A child that dies meanwhile is started again
with backoff (local/supervisor.py), and the terminal says so. State lives in `.run/` (kept
between runs, `--reset` starts afresh); logs in `.run/logs/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from userland.local import assignment_example, examples
from userland.local import prometheus as local_prometheus
from userland.local.children import Child, spawn, userland_command
from userland.local.controlplane import (
    ADMIN_TOKEN,
    DEFAULT_CACHE,
    ControlPlane,
    ControlPlaneError,
    crd_files,
    find_repo,
    free_port,
)
from userland.local.metrics import metrics_app
from userland.local.runner import LocalRunner, app_bin_dirs
from userland.local.supervisor import Report, Supervisor
from userland.local.users import UserError, environment_user
from userland.platform import naming
from userland.platform.kube import NAMESPACES, TEMPLATES, USERLANDS, AlreadyExists, KubeClient, KubeError
from userland.platform.logs import JsonFormatter
from userland.platform.settings import env_name, environment

log = logging.getLogger(__name__)
GITHUB_ID, GITHUB_SECRET = env_name("github_client_id"), env_name("github_client_secret")

READY_TIMEOUT = 60.0
# While starting, a child that stops this many times in a row is an error (a setting it refuses,
# say); once everything runs, children are restarted for ever (with backoff).
STARTUP_FAILURES = 4


class SetupError(Exception):
    """Something that stops `userland local`; str() is one line saying what and what to do."""


@dataclass(frozen=True)
class LocalOptions:
    state_dir: Path
    port: int = 8000
    students: tuple[str, ...] = examples.DEFAULT_STUDENTS
    reset: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    k8s_cache: Path = DEFAULT_CACHE
    # A Prometheus scraping everything, with the project's rules (local/prometheus.py), and how
    # often it scrapes and evaluates.
    prometheus: bool = False
    prometheus_interval: float = local_prometheus.DEFAULT_INTERVAL

    @property
    def public_url(self) -> str:
        return f"http://localhost:{self.port}"

    def origin(self, template_host: str, student: str | None = None) -> str:
        """A Template's address (`student` None) or a student's own origin under it."""
        return f"http://{student + '.' if student else ''}{template_host}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def github(self) -> bool:
        return bool(self.env.get(GITHUB_ID) and self.env.get(GITHUB_SECRET))


def default_state_dir() -> Path:
    try:
        return find_repo() / ".run"
    except ControlPlaneError:
        return Path.cwd() / ".run"


def port_is_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port`. SO_REUSEADDR as the gateway's own socket has it: a
    port whose last connections are only in TIME_WAIT (the previous `make run`, stopped a moment
    ago) is free for a listener, and refusing it would make a restart wait a minute for nothing."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def preflight(options: LocalOptions) -> None:
    """Everything that can be checked before starting anything; raises SetupError."""
    if not 0 < options.port < 65536:
        raise SetupError(f"--port {options.port} is not a port number")
    if not port_is_free(options.port):
        raise SetupError(f"port {options.port} is already in use on 127.0.0.1: "
                         "stop what uses it or choose another with --port")
    for program, package in (("etcd", "etcd-server"), ("redis-server", "redis-server"),
                             ("openssl", "openssl")):
        if shutil.which(program) is None:
            raise SetupError(f"{program} is not installed: run `make deps` (or apt-get install {package})")
    for binary in ("kube-apiserver", "kube-controller-manager"):
        if not (options.k8s_cache / "bin" / binary).exists():
            raise SetupError(f"{binary} is not built in {options.k8s_cache}/bin: "
                             "run `make control-plane` once (it builds for a few minutes)")
    if options.prometheus and shutil.which("prometheus") is None:
        raise SetupError("prometheus is not installed: run `make deps` (or apt-get install prometheus)")
    env = options.env
    if bool(env.get(GITHUB_ID)) != bool(env.get(GITHUB_SECRET)):
        raise SetupError(f"set both {GITHUB_ID} and {GITHUB_SECRET}, or neither "
                         "(then the development login is used)")


def _log_to_file(path: Path) -> None:
    """This process's structured logs (the runner's) go to a file; the terminal gets the banner."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(JsonFormatter())
    logging.getLogger().handlers[:] = [handler]


def say(text: str = "") -> None:
    # The terminal may be gone (closed: SIGHUP): stopping must go on all the same.
    with contextlib.suppress(OSError):
        print(text, flush=True)


def restart_words(report: Report) -> str:
    """One terminal line about a child that stopped or came back."""
    name = "Redis" if report.name == "redis" else f"the {report.name}"
    if report.what == "exited":
        lost = " (signed-in sessions were in it: sign in again)" if report.name == "redis" else ""
        return (f"  {name} stopped (exit status {report.status}); starting it again in "
                f"{report.retry_in:g} s{lost}; see {report.log_path}")
    return f"  {name} is running again (restarts: {report.restarts})"


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
        # The gateway signs identities with it; the web UI checks them.
        self.identity_secret = secrets.token_hex(32)
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
                    raise SetupError(f"the {entry.name} keeps stopping (exit status {entry.last_status}); "
                                     f"see {entry.child.log_path}")
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
        self.supervisor.add("redis", lambda: spawn("redis", [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(data)], self.options.log_dir))

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
        for template in self.templates:
            name = template["metadata"]["name"]
            try:
                await kube.create(TEMPLATES, examples.NAMESPACE, template)
            except AlreadyExists:
                # A state dir from an earlier run (or version): the Template as shipped now.
                current = await kube.get(TEMPLATES, examples.NAMESPACE, name)
                if current.get("spec") != template["spec"]:
                    await kube.replace(TEMPLATES, examples.NAMESPACE, name,
                                       {**current, "spec": template["spec"]})
            students = self.options.students if name == examples.DEMO_TEMPLATE else \
                self.options.students[:examples.APP_STUDENTS]
            for student in students:
                with contextlib.suppress(AlreadyExists):
                    await kube.create(USERLANDS, examples.NAMESPACE, examples.userland(student, name))

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
            internal_listen=f"127.0.0.1:{self.web_internal_port}", **self.assignments.settings())))

    def start_gateway(self, redis_url: str) -> None:
        options = self.options
        self.gateway_internal_port = free_port()
        env = self._child_env(
            web_url=f"http://127.0.0.1:{self.web_port}",  # the platform's own host is the web UI
            admins=(examples.ADMIN,), namespaces=(examples.NAMESPACE,), redis_url=redis_url,
            public_url=options.public_url, identity_secret=self.identity_secret, upstream_mode="local",
            cookie_secure=False, dev_login=not options.github,
            internal_listen=f"127.0.0.1:{self.gateway_internal_port}")
        self.supervisor.add("gateway", lambda: spawn("gateway", userland_command(
            "gateway", "--kubeconfig", str(options.kubeconfig), "--listen", f"127.0.0.1:{options.port}",
            "--grace", "2",
        ), options.log_dir, env))

    async def serve_runner_metrics(self, runner: LocalRunner) -> None:
        self.metrics_runner = web.AppRunner(metrics_app(runner), access_log=None, handle_signals=False)
        await self.metrics_runner.setup()
        self.runner_metrics_port = free_port()
        await web.TCPSite(self.metrics_runner, "127.0.0.1", self.runner_metrics_port).start()

    def start_prometheus(self) -> None:
        assert self.plane is not None
        self.prometheus_port = free_port()
        targets = local_prometheus.Targets(
            apiserver=f"127.0.0.1:{self.plane.port}", etcd=f"127.0.0.1:{self.plane.etcd_port}",
            operator=f"127.0.0.1:{self.operator_port}", gateway=f"127.0.0.1:{self.gateway_internal_port}",
            web=f"127.0.0.1:{self.web_internal_port}", runner=f"127.0.0.1:{self.runner_metrics_port}")
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
            ready = {
                naming.login_of(u["spec"]["user"]) for u in items
                if u["spec"]["template"] == examples.DEMO_TEMPLATE
                and any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (u.get("status") or {}).get("conditions") or [])
            }
            return wanted <= ready

        return await self._until("userlands", userlands_ready, READY_TIMEOUT)

    def banner(self, all_ready: bool) -> None:
        o = self.options
        kubeconfig = o.kubeconfig
        students = ", ".join(o.students) or "(none yet)"
        login = ("GitHub (USERLAND_GITHUB_CLIENT_ID is set; the OAuth app's callback must be "
                 f"{o.public_url}/auth/callback)") if o.github else \
            f"development login: type any name, e.g. {o.students[0] if o.students else 'alice'}"
        say()
        say("Userland is running on this machine.")
        say()
        first = o.students[0] if o.students else "alice"
        say(f"  Open        {o.origin(examples.DEMO_HOST)}/   (sends each student to their own address,")
        say(f"              such as {o.origin(examples.DEMO_HOST, first)}/; overview: {o.public_url}/)")
        say(f"              sign in with the {login}")
        say(f"              students with an environment: {students}")
        say(f"  Web UI      {o.public_url}/   sign in as {examples.INSTRUCTOR} (instructor of the course "
            f"{examples.NAMESPACE}), {examples.ASSISTANT} (its assistant) or {examples.ADMIN} (admin); "
            "students see their environments and ask for help there")
        label = "Apps"
        for template in self.templates:
            name = template["metadata"]["name"]
            if name == examples.DEMO_TEMPLATE:
                continue
            title = str(template["spec"].get("displayName") or name)
            program = next((c.get("command") or [""])[0] for c in template["spec"]["podSpec"]["containers"])
            installed = shutil.which(program, path=":".join(str(b) for b in self.app_bins)) is not None
            note = "" if installed else "   (not installed here: run `make local-apps`)"
            say(f"  {label:<11} {o.origin(examples.local_host(name))}/  {title}{note}")
            label = ""
        if len(self.templates) > 1:
            students = ", ".join(o.students[:examples.APP_STUDENTS]) or "nobody yet"
            say(f"              (each: sign in as {students}, or add students in the Web UI)")
        say(f"  kubectl     export KUBECONFIG={kubeconfig}; "
            f"kubectl get userlands,deployments,services -n {examples.NAMESPACE}")
        say(f"  Add one     {examples.add_student_command()}")
        if self.assignments.git is not None:
            first = o.students[0] if o.students else "alice"
            for line in assignment_example.banner(o.public_url, o.origin, first):
                say(line)
        say(f"  Metrics     operator http://127.0.0.1:{self.operator_port}/metrics   (/healthz beside it)")
        say(f"              gateway  http://127.0.0.1:{self.gateway_internal_port}/metrics   (its internal "
            f"port; {o.port} serves no /healthz or /metrics)")
        say(f"              web UI   http://127.0.0.1:{self.web_internal_port}/metrics   (its internal port)")
        say(f"              runner   http://127.0.0.1:{self.runner_metrics_port}/metrics   (the local "
            "kubelet's part); what each answers: docs/metrics.md")
        if self.prometheus_port:
            say(f"  Prometheus  http://127.0.0.1:{self.prometheus_port}/   scrapes all of the above and the "
                "control plane, with the alert rules (its /alerts page)")
        else:
            say("  Prometheus  `make run PROMETHEUS=1` starts one that scrapes all of it, with the alerts")
        say(f"  Logs        {o.log_dir}/")
        say(f"  State       {o.state_dir}/ (kept between runs; --reset starts afresh)")
        pids = ", ".join(f"{c.name} {c.pid}" for c in self.children.values())
        if self.plane is not None:
            pids = ", ".join(f"{n} {p.pid}" for n, p in self.plane.processes.items()) + ", " + pids
        say(f"  Processes   {pids}")
        if not all_ready:
            say(f"  Note        not every student's environment is Ready yet; see {o.log_dir}/")
        say()
        say("Ready. Press Ctrl-C to stop everything.")

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
        self.banner(await self.wait_ready())

    async def shutdown(self) -> None:
        say("Stopping ...")
        for name in ("gateway", "web", "operator"):
            if name in self.children:
                self.children[name].signal(signal.SIGTERM)
        if self.runner_task is not None:
            self.runner_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.runner_task
        # No restarts from here on: poll() is no longer called, and the entries go.
        children = self.children
        self.supervisor.supervised.clear()
        for name in ("prometheus", "gateway", "web", "operator", "store", "redis"):
            child = children.pop(name, None)
            if child is not None:
                await asyncio.to_thread(child.stop)
        for child in children.values():
            await asyncio.to_thread(child.stop)
        if self.metrics_runner is not None:
            await self.metrics_runner.cleanup()
        if self.kube is not None:
            await self.kube.close()
        await self.assignments.stop()
        if self.plane is not None:
            self.plane.stop()
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
    return asyncio.run(_main(options))
