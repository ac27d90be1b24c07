"""A status that tells the truth, against the real control plane (issue 16): a suspended
environment says Suspended whatever else is wrong; a Pod that will never start makes its
environment Failed at once, with the Pod's own reason, in `kubectl get userlands` too, and back
to Ready when the Pod recovers; a Pod that does not become ready in time is Failed with
StartTimeout. No kubelet runs here: the tests write a Pod's status as a kubelet would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.operator.support import Cluster, OperatorRunner
from tests.support import eventually
from tests.support.kubectl import kubectl
from userland.platform.clients.kube import EVENTS, PODS, KubeClient

SELECTOR = "userland.dev/user=ann,userland.dev/template=vscode"


async def _ready(cluster: Cluster, name: str, reason: str) -> dict[str, Any] | None:
    ready = await cluster.ready_condition(name)
    return ready if ready.get("reason") == reason else None


async def _pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await kube.list(PODS, namespace, label_selector=SELECTOR))["items"]
    return items


async def _phase_column(plane: Any, namespace: str, name: str) -> str:
    code, out, err = await kubectl(plane.kubeconfig, "get", "userlands", "-n", namespace, name)
    assert code == 0, err
    header, row = out.splitlines()[:2]
    return row.split()[header.split().index("PHASE")]


async def test_suspended_wins_over_a_missing_template(
        cluster: Cluster, namespace: str, run_operator: OperatorRunner, control_plane: Any) -> None:
    await cluster.create_userland("ann", "later", suspended=True)
    await cluster.create_userland("bob", "later")
    async with run_operator():
        ready = await eventually(lambda: _ready(cluster, "later-ann", "Suspended"))
        assert (await cluster.userland_status("later-ann"))["phase"] == "Suspended"
        assert "Template 'later' not found" in ready["message"]
        # Not suspended: waiting for its Template, as before.
        await eventually(lambda: _ready(cluster, "later-bob", "TemplateNotFound"))
        assert await _phase_column(control_plane, namespace, "later-ann") == "Suspended"
        assert await _phase_column(control_plane, namespace, "later-bob") == "Pending"


async def test_a_pod_that_cannot_pull_its_image_fails_at_once_and_recovers(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner,
        control_plane: Any) -> None:
    await cluster.create_template("vscode", image="registry.example.edu/vscode:missing")
    await cluster.create_userland("ann", "vscode")
    async with run_operator():
        await eventually(lambda: _ready(cluster, "vscode-ann", "Starting"))
        [pod] = await eventually(lambda: _pods(kube, namespace))
        message = 'Back-off pulling image "registry.example.edu/vscode:missing"'
        waiting = {"reason": "ImagePullBackOff", "message": message}
        container = {"name": "ide", "image": "registry.example.edu/vscode:missing", "imageID": "",
                     "ready": False, "restartCount": 0, "state": {"waiting": waiting}}
        await kube.merge_patch(PODS, namespace, pod["metadata"]["name"],
                               {"status": {"phase": "Pending", "containerStatuses": [container]}},
                               subresource="status")
        ready = await eventually(lambda: _ready(cluster, "vscode-ann", "ImagePullBackOff"))
        assert ready["status"] == "False"
        assert ready["message"] == f"Vscode cannot start: its image cannot be downloaded: {message}"
        assert (await cluster.userland_status("vscode-ann"))["phase"] == "Failed"
        assert await _phase_column(control_plane, namespace, "vscode-ann") == "Failed"

        async def warned() -> bool:
            events = (await kube.list(EVENTS, namespace))["items"]
            return any(e["reason"] == "ImagePullBackOff" and e["type"] == "Warning"
                       and e["involvedObject"]["name"] == "vscode-ann" for e in events)

        await eventually(warned)
        # The image arrives, the Pod runs: Ready again, by itself.
        assert await cluster.make_pods_ready(SELECTOR) == 1
        await eventually(lambda: _ready(cluster, "vscode-ann", "Available"))
        assert await _phase_column(control_plane, namespace, "vscode-ann") == "Ready"


async def test_a_pod_not_ready_in_time_is_a_start_timeout_until_it_is_ready(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_template("vscode")
    await cluster.create_userland("ann", "vscode")
    # No resync within the test (an hour), and no event after the Pod is made (no kubelet writes
    # it; the Deployment's progress deadline is 10 minutes): nothing but the operator's own look
    # when the bound passes can say StartTimeout.
    async with run_operator(start_timeout=3, resync_seconds=3600):
        [pod] = await eventually(lambda: _pods(kube, namespace))
        created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        ready = await eventually(lambda: _ready(cluster, "vscode-ann", "StartTimeout"), timeout=120)
        # Never before the bound (how soon after it is the operator's queue's business, not a
        # figure a loaded machine could miss).
        assert datetime.now(UTC) - created >= timedelta(seconds=3)
        assert ready["message"] == "Vscode did not become ready within 3 s"
        assert (await cluster.userland_status("vscode-ann"))["phase"] == "Failed"
        assert await cluster.make_pods_ready(SELECTOR) == 1
        await eventually(lambda: _ready(cluster, "vscode-ann", "Available"))
