"""The operator's figures against what happened, on the real control plane (docs/metrics.md):
environments counted by course, Template and phase; the time from creation to Ready and from a
wake request to Ready; sleeps, wakes and the wake line; failures sorted by kind (an image that
cannot be pulled, a course's quota that refuses the Pod, a volume that cannot be attached);
the longest wait per course. Read from the operator's own registry, as a scrape reads it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import generate_latest

from tests.operator.support import Cluster, OperatorRunner
from tests.support import eventually
from tests.support.clock import ManualClock
from tests.support.metrics import Samples, parse
from tests.support.metrics import value as sample
from userland.operator.controller import Controller
from userland.platform.clients.kube import PODS, USERLANDS, KubeClient, Resource
from userland.platform.model import naming

QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")


def scrape(controller: Controller) -> Samples:
    """The operator's /metrics text, as a scrape reads it."""
    return parse(generate_latest(controller.metrics.registry).decode())


def value(controller: Controller, name: str, **labels: str) -> float:
    return sample(scrape(controller), name, **labels)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def phase(cluster: Cluster, name: str, wanted: str, reason: str | None = None) -> bool:
    status = await cluster.userland_status(name)
    ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    return status.get("phase") == wanted and (reason is None or ready.get("reason") == reason)


async def test_environments_by_phase_and_the_time_from_creation_to_ready(
        cluster: Cluster, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_template("vscode")
    for login in ("ann", "bob", "cat"):
        await cluster.create_userland(login, "vscode")
    async with run_operator() as controller:
        ns = namespace
        await eventually(lambda: value(controller, "userland_environments", course=ns, template="vscode",
                                       phase="Starting") == 3)
        assert value(controller, "userland_environments", course=ns, template="vscode", phase="Ready") == 0
        starts = "userland_environment_start_seconds_count"
        assert value(controller, starts, course=ns, template="vscode") == 0
        # (Their Pods come a moment after their Deployments, from the replicaset controller.)
        await eventually(lambda: _ready_pods(cluster, f"{naming.LABEL_USER} in (ann,bob)", 2))
        await eventually(lambda: value(controller, "userland_environments", course=ns, template="vscode",
                                       phase="Ready") == 2)
        assert value(controller, "userland_environments", course=ns, template="vscode", phase="Starting") == 1
        # Two environments reached Ready: two starts timed, each from its Userland's creation.
        assert value(controller, starts, course=ns, template="vscode") == 2
        total = value(controller, "userland_environment_start_seconds_sum", course=ns, template="vscode")
        assert 0 < total < 2 * 60
        # cat still waits: the course's longest wait is hers, and grows.
        longest = value(controller, "userland_environment_wait_longest_seconds", course=ns)
        assert longest > 0
        await eventually(lambda: value(controller, "userland_environment_wait_longest_seconds",
                                       course=ns) > longest)
        await cluster.kube.delete(USERLANDS, ns, "vscode-ann")
        await eventually(lambda: value(controller, "userland_environments", course=ns, template="vscode",
                                       phase="Ready") == 1)


async def _ready_pods(cluster: Cluster, selector: str, count: int) -> bool:
    return await cluster.make_pods_ready(selector) == count


async def _pod_status(kube: KubeClient, namespace: str, user: str, status: dict[str, Any]) -> bool:
    pods = (await kube.list(PODS, namespace, label_selector=f"{naming.LABEL_USER}={user}"))["items"]
    for pod in pods:
        await kube.merge_patch(PODS, namespace, pod["metadata"]["name"], {"status": status},
                               subresource="status")
    return bool(pods)


async def test_failures_are_sorted_by_kind_and_counted_once(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode")
    await cluster.create_userland("bob", "vscode")
    async with run_operator() as controller:
        ns = namespace
        await eventually(lambda: phase(cluster, "vscode-ann", "Starting"))
        # ann's image cannot be pulled (what a kubelet reports).
        waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "demo:1"'}
        container = {"name": "ide", "image": "demo:1", "imageID": "", "ready": False, "restartCount": 0,
                     "state": {"waiting": waiting}}
        await eventually(lambda: _pod_status(kube, ns, "ann", {"phase": "Pending",
                                                               "containerStatuses": [container]}))
        # bob's Pod finds no node that can attach its volume (what the scheduler reports).
        unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                         "message": "0/3 nodes are available: 3 pod has unbound immediate "
                                    "PersistentVolumeClaims."}
        await eventually(lambda: _pod_status(kube, ns, "bob", {"phase": "Pending",
                                                               "conditions": [unschedulable]}))
        await eventually(lambda: phase(cluster, "vscode-ann", "Failed", "ImagePullBackOff"))
        await eventually(lambda: phase(cluster, "vscode-bob", "Starting", "StorageUnavailable"))
        ready = await cluster.ready_condition("vscode-bob")
        assert ready["message"].startswith("Vscode is waiting to start: its storage cannot be attached (0/3")
        await eventually(lambda: value(controller, "userland_environments_failing", course=ns,
                                       template="vscode", reason="storage") == 1)
        assert value(controller, "userland_environments_failing", course=ns, template="vscode",
                     reason="image") == 1
        assert value(controller, "userland_environments", course=ns, template="vscode", phase="Failed") == 1
        for kind in ("image", "storage"):
            assert value(controller, "userland_environment_failures_total", course=ns, template="vscode",
                         reason=kind) == 1
        # Both recover: nothing fails any more, and the counters keep what happened.
        assert await cluster.make_pods_ready(f"{naming.LABEL_TEMPLATE}=vscode") == 2
        await eventually(lambda: value(controller, "userland_environments", course=ns, template="vscode",
                                       phase="Ready") == 2)
        assert not any(name == "userland_environments_failing" for name, _ in scrape(controller))
        assert value(controller, "userland_environment_failures_total", course=ns, template="vscode",
                     reason="image") == 1


async def test_a_course_quota_that_refuses_the_pod_is_a_quota_failure(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    # The course may run no Pod at all: the ReplicaSet's create is refused by the API server's
    # ResourceQuota admission, and the deployment controller reports it on the Deployment. (No
    # resourcequota controller runs here: its status is written as that controller would, since
    # admission ignores a quota whose usage was never counted.)
    await kube.create(QUOTAS, namespace, {"metadata": {"name": "course"}, "spec": {"hard": {"pods": "0"}}})
    await kube.merge_patch(QUOTAS, namespace, "course",
                           {"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}, subresource="status")
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode")
    async with run_operator() as controller:
        await eventually(lambda: phase(cluster, "vscode-ann", "Starting", "QuotaExceeded"), timeout=60)
        ready = await cluster.ready_condition("vscode-ann")
        assert "not enough room in the course's quota" in ready["message"]
        assert "quota" in ready["message"].split("(", 1)[1]  # the API server's own words follow
        await eventually(lambda: value(controller, "userland_environments_failing", course=namespace,
                                       template="vscode", reason="quota") == 1)
        assert value(controller, "userland_environment_failures_total", course=namespace, template="vscode",
                     reason="quota") == 1


async def test_sleeps_wakes_and_the_time_from_the_wake_request_to_ready(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    clock = ManualClock()
    await cluster.create_template("vscode", idleTimeout="1h")
    await cluster.create_userland("ann", "vscode")
    # No start timeout: the operator's clock runs an hour ahead of the Pods' creation times.
    async with run_operator(clock=clock, start_timeout=None) as controller:
        ns = namespace
        await eventually(lambda: phase(cluster, "vscode-ann", "Starting"))
        await eventually(lambda: _ready_pods(cluster, f"{naming.LABEL_USER}=ann", 1))
        await eventually(lambda: phase(cluster, "vscode-ann", "Ready"))
        # An hour and a minute later (the operator's clock), it sleeps.
        clock.advance(3660)
        controller.enqueue_all()
        await eventually(lambda: phase(cluster, "vscode-ann", "Idle"))
        await eventually(lambda: value(controller, "userland_environment_sleeps_total", course=ns,
                                       template="vscode") == 1)
        # ann opens it: the gateway stamps her request's time on the Userland.
        asked = clock.now.replace(microsecond=0)
        await kube.merge_patch(USERLANDS, ns, "vscode-ann", {"metadata": {"annotations": {
            naming.ANNOTATION_LAST_ACTIVITY: stamp(asked)}}})
        await eventually(lambda: value(controller, "userland_environment_wakes_total", course=ns,
                                       template="vscode", cause="visit") == 1)
        assert value(controller, "userland_wake_line_wait_seconds_count", course=ns) == 1
        # Her Pod takes 7 seconds (of the operator's clock) to become ready.
        clock.advance(7)
        await eventually(lambda: _ready_pods(cluster, f"{naming.LABEL_USER}=ann", 1))
        await eventually(lambda: phase(cluster, "vscode-ann", "Ready"))
        await eventually(lambda: value(controller, "userland_environment_wake_seconds_count", course=ns,
                                       template="vscode") == 1)
        waited = value(controller, "userland_environment_wake_seconds_sum", course=ns, template="vscode")
        assert 7 <= waited < 8, waited
        assert value(controller, "userland_environment_wake_seconds_bucket", course=ns, template="vscode",
                     le="10.0") == 1
        assert value(controller, "userland_environment_wake_seconds_bucket", course=ns, template="vscode",
                     le="5.0") == 0
        assert value(controller, "userland_environment_wake_failures_total", course=ns,
                     template="vscode") == 0


async def test_an_environment_waiting_for_its_template_is_the_course_s_longest_wait(
        cluster: Cluster, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_userland("ann", "later")
    # The operator's clock starts after the creation, however long the API server took to make it
    # (started before it, a slow create left less than 400 s of waiting on that clock).
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=1))
    async with run_operator(clock=clock) as controller:
        await eventually(lambda: phase(cluster, "later-ann", "Pending", "TemplateNotFound"))
        await eventually(lambda: value(controller, "userland_environments_failing", course=namespace,
                                       template="later", reason="config") == 1)
        # The census reads the watch cache, which can have the status write before the worker that
        # made it has recorded the wait (after the write's answer): the wait is read once it is
        # there (a second or more already: the clock is ahead of the creation).
        await eventually(lambda: value(controller, "userland_environment_wait_longest_seconds",
                                       course=namespace) >= 1)
        # Counted from the Userland's creation, on the operator's clock.
        clock.advance(400)
        assert 400 <= value(controller, "userland_environment_wait_longest_seconds", course=namespace) < 460
