"""Assignment store and worker tests. Real: git (`git-http-backend` behind the project's CGI
bridge, local/gitserver.py, on a loopback port; repositories made with git itself), the store
(`userland.coursework.store_app`, served over HTTP on loopback), the file system. The control
plane is not needed here (the operator's side is tested in tests/operator/)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.coursework import GitServer
from tests.support.coursework import git_server as serve_git


@pytest.fixture
async def git_server(tmp_path: Path) -> AsyncIterator[GitServer]:
    async with serve_git(tmp_path / "git") as server:
        yield server
