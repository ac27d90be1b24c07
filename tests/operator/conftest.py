"""Operator tests. Real: the kube-apiserver, etcd and the controller-manager (garbage
collector, deployment and replicaset controllers) from tests/conftest.py. Nothing is faked;
with no kubelet, `make_pods_ready` patches Pod status as a kubelet would, and the real
controllers then report the Deployment available. There is no DaemonSet controller either:
the operator runs with `image_pull_wait_seconds=0` unless a test asks otherwise.

`run_operator` runs the project's Controller in this process, scoped to the test's namespace.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.operator.support import Cluster, OperatorRunner, running_controller
from userland.operator.controller import Controller
from userland.platform.clients.kube import KubeClient
from userland.platform.model.settings import Settings


@pytest.fixture
def cluster(kube: KubeClient, namespace: str) -> Cluster:
    return Cluster(kube, namespace)


@pytest.fixture
def run_operator(control_plane: Any, namespace: str) -> OperatorRunner:
    """`async with run_operator() as controller:` runs a Controller on the test namespace
    (or on `namespaces=`)."""

    @contextlib.asynccontextmanager
    async def run(namespaces: tuple[str, ...] = (), settings_extra: dict[str, Any] | None = None,
                  kubeconfig: str | None = None, **kwargs: Any) -> AsyncIterator[Controller]:
        # `kubeconfig`: another identity (the operator's own ServiceAccount, its RBAC applied).
        # No DaemonSet controller here counts the image pullers' nodes, so a Template's new image
        # would never be "on the nodes": environments roll at once unless a test (of that wait,
        # tests/operator/test_capacity.py) asks for it.
        extra = {"image_pull_wait_seconds": 0, **(settings_extra or {})}
        settings = Settings(namespaces=namespaces or (namespace,), public_url="https://userland.example.edu",
                            **extra)
        async with running_controller(kubeconfig or str(control_plane.kubeconfig), settings,
                                      **kwargs) as controller:
            yield controller

    return run
