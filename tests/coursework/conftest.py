"""Assignment store and worker tests. Real: git (`git-http-backend` behind the project's CGI
bridge, local/gitserver.py, on a loopback port; repositories made with git itself), the store
(`userland.coursework.store_app`, served over HTTP on loopback), the file system. The control
plane is not needed here (the operator's side is tested in tests/operator/)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from userland.local.gitserver import create_git_app, make_repository

TOKEN = "s3cret-token-for-tests"


@dataclass
class GitServer:
    root: Path
    url: str

    def repo(self, name: str, files: dict[str, bytes | str | None], **kwargs: str) -> str:
        return make_repository(self.root, name, files, **kwargs)

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}.git"


@pytest.fixture
async def git_server(tmp_path: Path) -> AsyncIterator[GitServer]:
    root = tmp_path / "git"
    root.mkdir()
    server = TestServer(create_git_app(root, {"private.git": TOKEN}), host="127.0.0.1")
    await server.start_server()
    try:
        yield GitServer(root, str(server.make_url("")).rstrip("/"))
    finally:
        await server.close()
