"""Shared fixtures. What is real: everything that runs here.

- `control_plane`: a real etcd + kube-apiserver + kube-controller-manager (garbage collector,
  deployment and replicaset controllers) on loopback, one per test session, with the
  project's CRDs installed. No kubelet: tests patch a Deployment's status as a kubelet would.
- `namespace`: a fresh namespace per test, so tests never see each other's objects.
- `kube`: the project's own KubeClient as cluster admin.
- `redis_url`: a real redis-server on a free port, one per test session.
Only GitHub is faked, as a real local HTTP server (tests/fakes/).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from userland.local.controlplane import ControlPlane, crd_files
from userland.local.redisserver import redis_server
from userland.platform.kube import NAMESPACES, KubeClient

REPO = Path(__file__).resolve().parent.parent

# The real-node suite runs only where a node is up: `make test-cluster` sets this variable and
# runs tests/cluster/ alone; `make test` never collects it (fast, no root needed).
collect_ignore = [] if os.environ.get("USERLAND_NODE_KUBECONFIG") else ["cluster"]

# Identities in the API server's token file, for tests of the project's real RBAC roles.
RBAC_USERS = {
    "operator-token": ("system:serviceaccount:userland-system:userland-operator",
                       ("system:serviceaccounts", "system:authenticated")),
    "gateway-token": ("system:serviceaccount:userland-system:userland-gateway",
                      ("system:serviceaccounts", "system:authenticated")),
    "web-token": ("system:serviceaccount:userland-system:userland-web",
                  ("system:serviceaccounts", "system:authenticated")),
    # A reader bound only by the test that uses it (tests/web/test_state.py: unreadable courses).
    "web-reader-token": ("userland-test:web-reader", ("system:authenticated",)),
}


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    state = Path(tempfile.mkdtemp(prefix="userland-k8s-"))
    plane = ControlPlane(state_dir=state, users=dict(RBAC_USERS)).start(crd_files())
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    yield name
    # The namespace controller deletes what is left inside; no need to wait for it.
    await kube.delete(NAMESPACES, None, name)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="userland-redis-"))
    try:
        with redis_server(state) as url:
            yield url
    finally:
        shutil.rmtree(state, ignore_errors=True)
