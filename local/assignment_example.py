"""`make run`'s example assignment: the project's starter repository (deploy/examples/
assignment-starter/) served on loopback by a real git server (git's http-backend, gitserver.py),
the assignment store as a child process, and an Assignment `welcome` in the local course that
hands the starter files to every student's JupyterLab and VS Code.

The repository is made from the shipped files with a fixed author and date, so every run gives
the same commit (nothing is handed out again for it). The git server keeps its address from run
to run (its port is kept in `.run/git/port`), so an assignment a user made from its URL still
reads it after a restart; when that port is taken by something else, a new one is chosen and
every Assignment whose source is the example's repository on the old address is pointed at the
new one (`repoint`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from userland.local import examples
from userland.local.children import spawn, userland_command
from userland.local.gitserver import create_git_app, make_repository
from userland.local.ports import free_port
from userland.local.process_tree import SERVER_SHUTDOWN_TIMEOUT
from userland.local.supervisor import Supervisor
from userland.platform.clients.kube import ASSIGNMENTS, AlreadyExists, KubeClient, KubeError
from userland.platform.model import naming
from userland.platform.model.settings import Settings, environment

JSON = dict[str, Any]
NAME = "welcome"
REPOSITORY = "starter"
STARTER = "deploy/examples/assignment-starter"
PATH = "assignments/welcome"
TEMPLATES = ("jupyterlab", "vscode")


def starter_files(repo: Path) -> dict[str, bytes | str | None]:
    root = repo / STARTER
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assignment(url: str, templates: tuple[str, ...]) -> JSON:
    return {"apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": NAME},
            "spec": {"title": "Welcome: your first assignment", "templates": list(templates),
                     "source": {"url": url, "ref": "main"}, "path": PATH}}


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def kept_port(text: str) -> int:
    """The port a previous run kept (0: none, or not a port)."""
    text = text.strip()
    return int(text) if text.isdigit() and 1024 <= int(text) <= 65535 else 0


def moved_source(obj: JSON, old_base: str, new_base: str) -> JSON | None:
    """The merge patch pointing an Assignment whose source is the example's repository on
    `old_base` at `new_base` (None: another address). Only the example's own repository moves:
    the old port was taken by something else, which may be the git server an assignment names."""
    url = ((obj.get("spec") or {}).get("source") or {}).get("url")
    if not isinstance(url, str) or old_base == new_base or \
            url.rstrip("/") != f"{old_base}{REPOSITORY}.git":
        return None
    return {"spec": {"source": {"url": new_base + url[len(old_base):]}}}


class GitServer:
    """The starter repository over git's smart HTTP protocol, on 127.0.0.1, on the port of the
    previous run when it is free (kept in `<root>/port`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self.previous = 0  # the port the previous run served on (0: none)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"{base_url(self.port)}{REPOSITORY}.git"

    @property
    def moved(self) -> bool:
        """Whether the address changed since the previous run (its port was taken)."""
        return bool(self.previous) and self.previous != self.port

    async def start(self, files: dict[str, bytes | str | None]) -> str:
        """Serve the repository (made or brought up to date from `files`); its commit."""
        commit = make_repository(self.root, REPOSITORY, files,
                                 message="Starter files of the example assignment")
        self._runner = web.AppRunner(create_git_app(self.root), access_log=None,
                                    shutdown_timeout=SERVER_SHUTDOWN_TIMEOUT)
        await self._runner.setup()
        port_file = self.root / "port"
        with contextlib.suppress(OSError):
            self.previous = kept_port(port_file.read_text())
        for port in ([self.previous] if self.previous else []) + [0]:
            self.port = port or free_port()
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            try:
                await site.start()
                break
            except OSError:
                await site.stop()  # taken by something else since: a new port, said by `moved`
                if not port:
                    raise
        port_file.write_text(f"{self.port}\n")
        return commit

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def repoint(kube: KubeClient, old_port: int, new_port: int) -> list[str]:
    """Every Assignment whose source was the example's repository on the git server's old address,
    pointed at the new one (a user's own, made from the URL the banner printed, as well as
    `welcome`); their names."""
    old, new = base_url(old_port), base_url(new_port)
    moved = []
    for obj in (await kube.list(ASSIGNMENTS)).get("items") or []:
        patch = moved_source(obj, old, new)
        metadata = obj.get("metadata") or {}
        if patch is None:
            continue
        with contextlib.suppress(KubeError):
            await kube.merge_patch(ASSIGNMENTS, metadata.get("namespace"), str(metadata.get("name")), patch)
            moved.append(f"{metadata.get('namespace')}/{metadata.get('name')}")
    return moved


async def apply(kube: KubeClient, url: str, templates: tuple[str, ...]) -> None:
    """The example Assignment, its source pointed at this run's git server."""
    body = assignment(url, templates)
    try:
        await kube.create(ASSIGNMENTS, examples.NAMESPACE, body)
    except AlreadyExists:
        await kube.merge_patch(ASSIGNMENTS, examples.NAMESPACE, NAME,
                               {"spec": {"source": body["spec"]["source"]}})


def banner(public_url: str, origin_of: Any, student: str) -> Iterator[str]:
    """What the terminal says of the example (how to try it)."""
    yield (f"  Assignment  {public_url}/courses/{examples.NAMESPACE}/assignments/{NAME}   (as "
           f"{examples.INSTRUCTOR}: the live table of every student; press \"Collect now\")")
    lab = origin_of(examples.local_host("jupyterlab"), student)
    yield (f"              {student} finds it in JupyterLab: {lab}/lab/tree/{PATH} "
           "(and in VS Code, the same folder)")
    yield f"              {student}'s receipt after collection: {public_url}/me"


def git_banner(url: str) -> str:
    """The example repository's address, for a user's own assignment (it stays the same)."""
    return f"  Git         {url}   (the example's repository; use it in your own assignments too)"



class LocalAssignments:
    """The example's parts under `userland local`: the git server (in this process) and the
    assignment store (a supervised child, restarted when it falls over like the others)."""

    def __init__(self, state_dir: Path, log_dir: Path, supervisor: Supervisor) -> None:
        self.state_dir = state_dir
        self.log_dir = log_dir
        self.supervisor = supervisor
        # The operator signs assignment work with it, the web UI its requests; the store checks.
        self.store_secret = secrets.token_hex(32)
        self.store_port = 0
        # Its metrics (the volume's room, each course's use) on their own listener, as in deploy/.
        self.store_internal_port = 0
        self.git: GitServer | None = None

    def settings(self) -> dict[str, str]:
        """What the operator and the web UI need to reach the store (nothing before it runs)."""
        if not self.store_port:
            return {}
        return {"store_url": f"http://127.0.0.1:{self.store_port}", "store_secret": self.store_secret}

    async def start(self, kube: KubeClient, repo: Path | None, templates: set[str]) -> None:
        if repo is None:
            return  # an installed `userland` away from its repository: no starter files to serve
        self.git = GitServer(self.state_dir / "git")
        await self.git.start(starter_files(repo))
        if self.git.moved:
            await repoint(kube, self.git.previous, self.git.port)
        self.store_port, self.store_internal_port = free_port(), free_port()
        data, port, secret = self.state_dir / "store", self.store_port, self.store_secret
        internal = self.store_internal_port
        # The store fetches from the example's own git server here, and from whatever
        # USERLAND_STORE_GIT_URLS of the environment adds (by default only https://github.com/).
        allowed = ",".join((f"http://127.0.0.1:{self.git.port}/",
                            *Settings.from_env(os.environ).store_git_urls))
        self.supervisor.add("store", lambda: spawn("store", userland_command(
            "store", "--listen", f"127.0.0.1:{port}", "--internal-listen", f"127.0.0.1:{internal}",
            "--data", str(data)),
            self.log_dir, {**os.environ, **environment(store_secret=secret, store_git_urls=allowed)}))
        wanted = tuple(t for t in TEMPLATES if t in templates)
        if wanted:
            await apply(kube, self.git.url, wanted)

    async def stop(self) -> None:
        if self.git is not None:
            await self.git.stop()
