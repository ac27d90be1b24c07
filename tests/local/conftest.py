"""Local-setup tests. Real: the control plane and its deployment/replicaset controllers
(tests/conftest.py), the runner's processes (the demo environment, or a Template's own
command), the `userland local` command with its operator, gateway and Redis. Nothing is faked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.runner import running
from userland.local.runner import LocalRunner
from userland.platform.clients.kube import KubeClient


@pytest.fixture
async def runner(kube: KubeClient, namespace: str, tmp_path: Path) -> AsyncIterator[LocalRunner]:
    async with running(kube, namespace, tmp_path) as local:
        yield local
