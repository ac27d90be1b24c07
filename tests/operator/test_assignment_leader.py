"""The leader changes in the middle of an assignment's hand-out: the new one finishes it.

Real: two operators (`Controller`s, in this process) campaigning for one Lease with the project's
leader election (operator/leader.py), the control plane, the assignment store, git's own
http-backend and the local runner (the kubelet's part). The first leader fetches the source and
makes the worker Pods, then dies (its lease is not given up) before any of them ran; the Pods run
while nobody leads; the second operator takes the lease and must finish the hand-out from what
the cluster and the store hold: no second fetch, no second worker Pod, every student's files
once, and a status that says they have them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.operator.test_assignments import STARTER, template, userland
from tests.support import eventually
from tests.support.coursework import STORE_SECRET, git_server, store_server
from tests.support.runner import running
from userland.operator.controller import Controller
from userland.operator.leader import LeaderElector
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import ASSIGNMENTS, EVENTS, PODS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.platform.model.settings import Settings

JSON = dict[str, Any]
LEASE = "userland-operator"


@dataclass
class Operator:
    identity: str
    controller: Controller
    elector: LeaderElector
    tasks: list[asyncio.Task[None]]

    def crash(self) -> None:
        """Stop at once, as a killed process does: the lease is not given up."""
        for task in self.tasks:
            task.cancel()


@contextlib.asynccontextmanager
async def operator(kubeconfig: str, namespace: str, identity: str, store_url: str) -> AsyncIterator[Operator]:
    client = await KubeClient.connect(kubeconfig)
    settings = Settings(namespaces=(namespace,), public_url="https://userland.example.edu",
                        store_url=store_url, store_secret=STORE_SECRET, assignment_batch=2,
                        lease_namespace=namespace, lease_name=LEASE)
    controller = Controller(client, settings, workers=4)
    elector = LeaderElector(client, namespace, LEASE, identity, lease_duration=2.0, renew_deadline=1.3,
                            retry_period=0.3)
    tasks = [asyncio.create_task(controller.run_informers()),
             asyncio.create_task(elector.run(controller.lead))]
    try:
        await asyncio.wait_for(controller.wait_synced(), 30)
        yield Operator(identity, controller, elector, tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await controller.events.close()
        await controller.close()
        controller.queue.close()
        await client.close()


async def test_a_new_leader_finishes_a_hand_out_the_old_one_began(
        control_plane: Any, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    # Every worker Pod ever made, by name: how often each was made (ADDED), across both leaders.
    made: dict[str, int] = {}
    pods = Informer(kube, PODS, (namespace,), label_selector=naming.LABEL_ASSIGNMENT)

    def count(old: JSON | None, new: JSON | None) -> None:
        if old is None and new is not None:
            name = new["metadata"]["name"]
            made[name] = made.get(name, 0) + 1
    pods.add_handler(count)
    watching = asyncio.create_task(pods.run())
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(watching.cancel)
        git = await stack.enter_async_context(git_server(tmp_path / "git"))
        store_url = await stack.enter_async_context(
            store_server(tmp_path / "store", git_urls=(git.url + "/",)))
        kubeconfig = str(control_plane.kubeconfig)
        first = await stack.enter_async_context(operator(kubeconfig, namespace, "op-a", store_url))
        await eventually(lambda: first.elector.is_leader, timeout=20)
        second = await stack.enter_async_context(operator(kubeconfig, namespace, "op-b", store_url))
        await pods.wait_synced()

        # Three students (suspended: no environment to run, their volumes are there): two worker
        # Pods, as batches hold two.
        await kube.create(TEMPLATES, namespace, template("lab"))
        for login in ("alice", "bob", "carol"):
            await kube.create(USERLANDS, namespace, userland(login, "lab", suspended=True))
        commit = git.repo("course", STARTER)
        await kube.create(ASSIGNMENTS, namespace, {
            "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": "week1"},
            "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1",
                     "source": {"url": git.url_of("course"), "subPath": "week1"}}})

        async def begun() -> JSON | None:
            """The first leader fetched the commit, said so, and made every worker Pod."""
            status = (await kube.get(ASSIGNMENTS, namespace, "week1")).get("status") or {}
            workers = (await kube.list(PODS, namespace, label_selector=naming.LABEL_ASSIGNMENT))["items"]
            begun = (status.get("source") or {}).get("commit") == commit and len(workers) == 2 and \
                status.get("phase") == "HandingOut" and status.get("handedOut") == "0/3"
            return status if begun else None
        await eventually(begun, timeout=60)
        await first.controller.events.flush()  # what it told so far is told (a crash loses the rest)
        first.crash()
        assert not second.elector.is_leader
        # Nobody ran the worker Pods yet (no kubelet): they run now, while nobody leads.
        runner = await stack.enter_async_context(running(kube, namespace, tmp_path / "run"))
        await eventually(lambda: second.elector.is_leader, timeout=30)

        async def handed_out() -> JSON | None:
            status = (await kube.get(ASSIGNMENTS, namespace, "week1")).get("status") or {}
            return status if status.get("handedOut") == "3/3" else None
        status = await eventually(handed_out, timeout=90)
        assert status["phase"] == "Open"
        assert status["conditions"][0]["reason"] == "HandedOut"
        assert status["source"]["commit"] == commit
        assert {(s["user"], s["state"], s["commit"]) for s in status["students"]} == {
            (login, "HandedOut", commit[:12]) for login in ("alice", "bob", "carol")}
        for login in ("alice", "bob", "carol"):
            folder = Path(runner._claims_root) / namespace / naming.pvc_name("lab", login) / "week1"
            assert (folder / "hello.py").read_text() == "print('hello')\n"
        # The finished worker Pods are removed by the new leader.
        await eventually(lambda: _no_workers(kube, namespace), timeout=30)
        await second.controller.events.flush()

        # Nothing redone: each worker Pod was made once (the first leader's two), the new leader
        # made none and fetched nothing (the status told it the commit).
        assert sorted(made.values()) == [1, 1], made
        figures = second.controller.metrics.registry
        made_by_second = figures.get_sample_value("userland_operator_assignment_worker_pods_total",
                                                  {"kind": "handout"})
        assert not made_by_second
        assert not figures.get_sample_value("userland_operator_assignment_fetches_total", {"result": "ok"})
        events = [e for e in (await kube.list(EVENTS, namespace))["items"]
                  if e["involvedObject"].get("kind") == "Assignment"]
        reasons = [e["reason"] for e in events]
        assert reasons.count("Fetched") == 1, reasons
        assert reasons.count("HandedOut") == 1, reasons


async def _no_workers(kube: KubeClient, namespace: str) -> bool:
    workers = (await kube.list(PODS, namespace, label_selector=naming.LABEL_ASSIGNMENT))["items"]
    return not [p for p in workers if not p["metadata"].get("deletionTimestamp")]
