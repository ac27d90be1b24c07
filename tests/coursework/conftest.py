"""Assignment store and worker tests. Real: git (`git-http-backend` behind the project's CGI
bridge, local/gitserver.py, on a loopback port; repositories made with git itself), the store
(`userland.coursework.store_app`, served over HTTP on loopback), the file system. The control
plane is not needed here (the operator's side is tested in tests/operator/)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.coursework import STORE_SECRET, GitServer, store_server
from tests.support.coursework import git_server as serve_git
from userland.coursework.trees import Limits
from userland.platform.clients.store_client import StoreClient


@pytest.fixture
async def git_server(tmp_path: Path) -> AsyncIterator[GitServer]:
    async with serve_git(tmp_path / "git") as server:
        yield server


@pytest.fixture
async def store(tmp_path: Path, git_server: GitServer) -> AsyncIterator[str]:
    """The assignment store on loopback, with small limits (100 files, 10 MB) for sources and copies,
    fetching from the test's git server only."""
    async with store_server(tmp_path / "store", source_limits=Limits(100, 10**7),
                            copy_limits=Limits(100, 10**7), git_urls=(git_server.url + "/",)) as url:
        yield url


@pytest.fixture
async def operator(store: str) -> AsyncIterator[StoreClient]:
    """The store as the operator calls it."""
    client = StoreClient(store, STORE_SECRET, "operator")
    yield client
    await client.close()


@pytest.fixture
async def web(store: str) -> AsyncIterator[StoreClient]:
    """The store as the web UI calls it."""
    client = StoreClient(store, STORE_SECRET, "web")
    yield client
    await client.close()
