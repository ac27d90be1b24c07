"""Local-setup tests. Real: the control plane and its deployment/replicaset controllers
(tests/conftest.py), the runner's processes (the demo environment, or a Template's own
command), the `userland local` command with its operator, gateway and Redis. Nothing is faked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.pods import alive
from userland.local.runner import LocalRunner
from userland.local.users import environment_user
from userland.platform.kube import KubeClient


@pytest.fixture
async def runner(kube: KubeClient, namespace: str, tmp_path: Path) -> AsyncIterator[LocalRunner]:
    os.chmod(tmp_path, 0o755)  # the environments' user passes through to its folders
    local = LocalRunner(
        kube, [namespace], state_dir=tmp_path, user=environment_user(), backoff=0.2, max_backoff=1.0
    )
    task = asyncio.create_task(local.run())
    await asyncio.wait_for(local.wait_synced(), 30)
    try:
        yield local
    finally:
        pids = [c.process.pid for w in local.workers.values() for c in w.containers if c.process is not None]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Stopping the runner stops every process it started.
    assert not local.workers
    assert not [pid for pid in pids if alive(pid)]
