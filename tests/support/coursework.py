"""Real servers for assignment tests: a git server on loopback (git-http-backend behind the
project's CGI bridge, local/gitserver.py) with public and private repositories, and the
assignment store (`userland.coursework.store_app`) over HTTP on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp.test_utils import TestServer

from userland.coursework.store_app import create_internal_app, create_store_app
from userland.coursework.store_files import Quotas
from userland.coursework.store_requests import StoreOptions
from userland.coursework.trees import Limits
from userland.coursework.worker import run
from userland.local.gitserver import create_git_app, make_repository
from userland.platform.clients.store_client import StoreClient
from userland.platform.model.coursework import Job, JobScope, Member, job_token, manifest_key

GIT_TOKEN = "s3cret-token-for-tests"
STORE_SECRET = "x" * 40


@dataclass
class GitServer:
    root: Path
    url: str

    def repo(self, name: str, files: dict[str, bytes | str | None], **kwargs: str) -> str:
        """Commit `files` (None removes one; "->target" is a link) to `<name>.git`: the commit id."""
        return make_repository(self.root, name, files, **kwargs)

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}.git"


@contextlib.asynccontextmanager
async def git_server(root: Path) -> AsyncIterator[GitServer]:
    """Repositories under `root`; `private.git` needs GIT_TOKEN (HTTP Basic password)."""
    root.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (a test's own folder)
    server = TestServer(create_git_app(root, {"private.git": GIT_TOKEN}), host="127.0.0.1")
    await server.start_server()
    try:
        yield GitServer(root, str(server.make_url("")).rstrip("/"))
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def store_server(data: Path, *, source_limits: Limits | None = None,
                       copy_limits: Limits | None = None, port: int | None = None,
                       git_urls: tuple[str, ...] = (), quotas: Quotas | None = None,
                       retention: float = 0.0, check_timeout: float = 5.0) -> AsyncIterator[str]:
    """The store over `data`, signing with STORE_SECRET (on `port`, else a free one), fetching
    only under `git_urls`: its URL. Its repository checks end in `check_timeout` (every "not
    reachable" is said then)."""
    options = StoreOptions(data=data, secret=STORE_SECRET, source_limits=source_limits or Limits(1000, 10**8),
                           copy_limits=copy_limits or Limits(1000, 10**8), git_urls=git_urls,
                           quotas=quotas or Quotas(), retention=retention, check_timeout=check_timeout)
    app = create_store_app(options)
    server = TestServer(app, host="127.0.0.1", port=port)
    await server.start_server()
    internal = TestServer(create_internal_app(app), host="127.0.0.1")
    await internal.start_server()
    INTERNAL[str(server.make_url("")).rstrip("/")] = str(internal.make_url("")).rstrip("/")
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await internal.close()
        await server.close()


# Each store's internal listener (/healthz, /metrics), by the store's URL.
INTERNAL: dict[str, str] = {}


# The worker's jobs as the operator makes them, for one assignment of one course.
NS, ASG = "course", "week1"
UID = "0b6a5c1e-0000-4000-8000-00000000a001"  # the Assignment object's uid (a name made again has another)
OTHER_UID = "0b6a5c1e-0000-4000-8000-00000000b002"  # the uid of an earlier Assignment of the same name
ROUND = "20261207T235900Z"


def volumes(tmp_path: Path, *logins: str, folder: str = "") -> list[Member]:
    """A volume per student under `tmp_path/volumes` (with `folder` made in it, when given)."""
    found = []
    for login in logins:
        (tmp_path / "volumes" / login / folder).mkdir(parents=True)
        found.append(Member(login, "jupyterlab", str(tmp_path / "volumes" / login)))
    return found


def job(kind: str, members: list[Member], **kwargs: object) -> Job:
    """A job of `kind` for these students, valid for ten minutes; `kwargs` go to Job."""
    scope = JobScope(kind=kind, namespace=NS, assignment=ASG, members=tuple(members),  # type: ignore[arg-type]
                     expires=int(time.time()) + 600, source=str(kwargs.pop("source", "")),
                     round=str(kwargs.pop("round", "")), uid=str(kwargs.pop("uid", UID)))
    return Job(scope=scope, path="week1", manifest_key=manifest_key(STORE_SECRET, NS, ASG),
               **kwargs)  # type: ignore[arg-type]


async def work(store: str, the_job: Job, tmp_path: Path) -> int:
    """Run the worker on the job, as its Pod would, with a scratch folder of its own."""
    scratch = tmp_path / f"scratch-{time.monotonic_ns()}"
    scratch.mkdir()
    return await run(the_job, job_token(STORE_SECRET, the_job.scope), store, scratch)


async def students(operator: StoreClient, *logins: str, uid: str = UID, template: str = "jupyterlab") -> None:
    """Tell the store, as the operator does, that these are the assignment's students."""
    await operator.members(NS, ASG, uid, [(template, login) for login in logins])


def add_submodule(git: GitServer, repo: str, path: str, commit: str) -> None:
    """Commit a submodule (a gitlink to `commit`) at `path` in `repo`, with git itself."""
    work_tree = git.root / f".submodule-{repo}"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}

    def git_(*args: str) -> None:
        subprocess.run(["git", *args], cwd=work_tree, env=env, check=True, capture_output=True)

    subprocess.run(["git", "clone", "-q", str(git.root / f"{repo}.git"), str(work_tree)], env=env, check=True,
                   capture_output=True)
    git_("update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    git_("commit", "-qm", "a submodule")
    git_("push", "-q", "origin", "HEAD:main")
