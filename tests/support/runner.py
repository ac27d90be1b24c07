"""The local runner (the kubelet's part under `make run`) for a test's namespace: it runs the
Pods the real controllers and the operator make, as local processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.pods import alive
from userland.local.runner import LocalRunner
from userland.local.users import environment_user
from userland.platform.kube import KubeClient


@contextlib.asynccontextmanager
async def running(kube: KubeClient, namespace: str, state: Path) -> AsyncIterator[LocalRunner]:
    """A runner for `namespace` with its state in `state`; on exit every process it started is
    gone (checked)."""
    os.chmod(state, 0o755)  # the environments' user passes through to its folders
    local = LocalRunner(kube, [namespace], state_dir=state, user=environment_user(), backoff=0.2,
                        max_backoff=1.0)
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
