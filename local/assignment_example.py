"""`make run`'s example assignment: the project's starter repository (deploy/examples/
assignment-starter/) served on loopback by a real git server (git's http-backend, gitserver.py),
the assignment store as a child process, and an Assignment `welcome` in the local course that
hands the starter files to every student's JupyterLab and VS Code.

The repository is made from the shipped files with a fixed author and date, so every run gives
the same commit (nothing is handed out again for it); the git server's port changes from run to
run, and the Assignment's source URL is set to it each time.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from userland.local import examples
from userland.local.children import spawn, userland_command
from userland.local.controlplane import free_port
from userland.local.gitserver import create_git_app, make_repository
from userland.local.supervisor import Supervisor
from userland.platform import naming
from userland.platform.kube import ASSIGNMENTS, AlreadyExists, KubeClient
from userland.platform.settings import environment

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


class GitServer:
    """The starter repository over git's smart HTTP protocol, on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{REPOSITORY}.git"

    async def start(self, files: dict[str, bytes | str | None]) -> str:
        """Serve the repository (made or brought up to date from `files`); its commit."""
        commit = make_repository(self.root, REPOSITORY, files,
                                 message="Starter files of the example assignment")
        self._runner = web.AppRunner(create_git_app(self.root), access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return commit

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


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
        self.store_port = free_port()
        data, port, secret = self.state_dir / "store", self.store_port, self.store_secret
        self.supervisor.add("store", lambda: spawn("store", userland_command(
            "store", "--listen", f"127.0.0.1:{port}", "--data", str(data)),
            self.log_dir, {**os.environ, **environment(store_secret=secret)}))
        wanted = tuple(t for t in TEMPLATES if t in templates)
        if wanted:
            await apply(kube, self.git.url, wanted)

    async def stop(self) -> None:
        if self.git is not None:
            await self.git.stop()
