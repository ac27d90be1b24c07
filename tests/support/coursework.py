"""Real servers for assignment tests: a git server on loopback (git-http-backend behind the
project's CGI bridge, local/gitserver.py) with public and private repositories, and the
assignment store (`userland.coursework.store_app`) over HTTP on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp.test_utils import TestServer

from userland.coursework.store_app import StoreOptions, create_store_app
from userland.coursework.trees import Limits
from userland.local.gitserver import create_git_app, make_repository

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
                       copy_limits: Limits | None = None, port: int | None = None) -> AsyncIterator[str]:
    """The store over `data`, signing with STORE_SECRET (on `port`, else a free one): its URL."""
    options = StoreOptions(data=data, secret=STORE_SECRET, source_limits=source_limits or Limits(1000, 10**8),
                           copy_limits=copy_limits or Limits(1000, 10**8))
    server = TestServer(create_store_app(options), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()
