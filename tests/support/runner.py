"""The local runner (the kubelet's part under `make run`) for a test's namespace: it runs the
Pods the real controllers and the operator make, as local processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.procs import alive
from tests.support.waiting import MUST_COMPLETE
from userland.local.runner import LocalRunner, own_program
from userland.local.users import LocalUser, environment_user
from userland.platform.clients.kube import KubeClient


def unreachable_checkout(user: LocalUser) -> str:
    """Why the local runner cannot run the platform's own program (what worker Pods run): the
    account environments run as cannot reach this checkout. Without the program every worker
    Pod (hand-outs, collections) says "pod cannot run here" and the tests waiting on them time
    out far from the cause: tests say the cause once, at once."""
    return (f"the account environments run as ({user.name}) cannot reach this checkout's Python "
            f"packages ({Path(__file__).resolve().parents[2]}), so the local runner cannot run the "
            "platform's own program for worker Pods: put the checkout where that account may pass "
            "(every folder above it executable by others: `chmod o+x` a private folder such as one "
            "`mktemp -d` made, or clone outside /root)")


def assert_own_program_runs(bin_dir: Path) -> None:
    """Fail at once when the runner would find no own program (unreachable_checkout)."""
    user = environment_user()
    assert own_program(sys.executable, user, bin_dir) is not None, unreachable_checkout(user)


@contextlib.asynccontextmanager
async def running(kube: KubeClient, namespace: str, state: Path) -> AsyncIterator[LocalRunner]:
    """A runner for `namespace` with its state in `state`; on exit every process it started is
    gone (checked)."""
    os.chmod(state, 0o755)  # the environments' user passes through to its folders
    local = LocalRunner(kube, [namespace], state_dir=state, user=environment_user(), backoff=0.2,
                        max_backoff=1.0)
    task = asyncio.create_task(local.run())
    try:
        await asyncio.wait_for(local.wait_synced(), MUST_COMPLETE)
        assert local.own_program is not None, unreachable_checkout(local.user)
        yield local
    finally:
        pids = [c.process.pid for w in local.workers.values() for c in w.containers if c.process is not None]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Stopping the runner stops every process it started.
    assert not local.workers
    assert not [pid for pid in pids if alive(pid)]
