"""kubectl against a test's control plane, as an admin types it."""

from __future__ import annotations

import asyncio
from pathlib import Path

KUBECTL = "/usr/bin/kubectl"


async def kubectl(kubeconfig: Path | str, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, f"--kubeconfig={kubeconfig}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
