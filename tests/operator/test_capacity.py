"""Capacity before a lecture in the operator, against the real control plane (kube-apiserver,
etcd, and the controller-manager's garbage collector, deployment and replicaset controllers).

This control plane has no kubelet, no scheduler and no DaemonSet controller: the image pullers'
DaemonSets are made for real, but nothing counts their nodes, so a test writes the DaemonSet's
status through its status subresource as the DaemonSet controller would (`desiredNumberScheduled`,
`numberReady`), and the Template's status is read from that. Placeholder Pods are made by the real
deployment and replicaset controllers (the PriorityClass admission plugin checks their class) and
stay Pending; a test marks them Running and Ready as a kubelet would. Lectures are met on a clock
the test moves (the operator's `clock=`), never by waiting. Preemption, real pulls and real nodes:
the real-node test on the `capacity` branch (not in main yet: docs/capacity.md says why).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.operator.support import Cluster, OperatorRunner, gone, reconciled_since
from tests.support import eventually
from tests.support.clock import ManualClock
from userland.operator.capacity import replica_failure
from userland.operator.controller import Controller
from userland.platform.clients.kube import (
    DAEMONSETS,
    DEPLOYMENTS,
    PODS,
    TEMPLATES,
    USERLANDS,
    AlreadyExists,
    KubeClient,
    Resource,
)
from userland.platform.model import naming

JSON = dict[str, Any]
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
# Monday 23 November 2026, 08:20 UTC: forty minutes before the Monday lecture at 09:00 UTC.
BEFORE = datetime(2026, 11, 23, 8, 20, tzinfo=UTC)
SCHEDULE = {"timeZone": "UTC", "wakeBefore": "10m",
            "lectures": [{"days": ["Mon"], "start": "09:00", "end": "10:30"}]}
REQUESTS = {"requests": {"cpu": "500m", "memory": "1Gi"}}


def lab_pod(image: str = "registry.example.edu/lab:1") -> JSON:
    return {"containers": [{"name": "lab", "image": image, "resources": REQUESTS}],
            "nodeSelector": {"pool": "students"},
            "tolerations": [{"key": "classroom", "operator": "Exists", "effect": "NoSchedule"}]}


async def create_lab(cluster: Cluster, image: str = "registry.example.edu/lab:1", **spec: Any) -> JSON:
    body = {"apiVersion": "userland.dev/v1alpha1", "kind": "Template", "metadata": {"name": "lab"},
            "spec": {"routing": {"host": "lab.example.edu"}, "port": 8888, "podSpec": lab_pod(image), **spec}}
    return await cluster.kube.create(TEMPLATES, cluster.ns, body)


async def pullers(kube: KubeClient, ns: str) -> list[JSON]:
    listing = await kube.list(DAEMONSETS, ns, label_selector=f"{naming.LABEL_CAPACITY}=images")
    return list(listing["items"])


async def condition(kube: KubeClient, ns: str, kind: str, name: str = "lab") -> JSON:
    status = (await kube.get(TEMPLATES, ns, name)).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


async def condition_says(kube: KubeClient, ns: str, kind: str, message: str) -> JSON | None:
    found = await condition(kube, ns, kind)
    return found if found.get("message") == message else None


async def count_nodes(kube: KubeClient, daemonset: JSON, nodes: int, ready: int) -> None:
    """Write what the DaemonSet controller would: how many nodes should run it, how many do."""
    await kube.merge_patch(DAEMONSETS, daemonset["metadata"]["namespace"], daemonset["metadata"]["name"], {
        "status": {"observedGeneration": daemonset["metadata"]["generation"], "desiredNumberScheduled": nodes,
                   "currentNumberScheduled": nodes, "numberMisscheduled": 0, "numberReady": ready}},
        subresource="status")


async def one_puller(kube: KubeClient, ns: str, not_named: str = "",
                     also_not: str = "") -> JSON | None:
    found = [d for d in await pullers(kube, ns) if d["metadata"]["name"] not in (not_named, also_not)]
    return found[0] if len(found) == 1 else None


def foreign_daemonset() -> JSON:
    labels = {naming.LABEL_CAPACITY: "images", naming.LABEL_CAPACITY_FOR: "lab"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "someone-elses",
                         "labels": {**labels, naming.LABEL_MANAGED_BY: naming.MANAGED_BY}},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "other:1"}]}}}}


async def test_images_are_pulled_ahead_where_the_environments_may_land_and_go_with_the_template(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    """The puller follows the Template's placement, says "images on n/N nodes" from the
    DaemonSet's status (written here as its controller would), is replaced when the image
    changes, goes when no environment uses the Template, and goes with the Template."""
    await create_lab(cluster)
    async with run_operator():
        # Not in use: nothing to pull yet (True, but not "Pulled": no event says it was).
        unused = await eventually(lambda: condition_says(
            kube, namespace, "ImagesPulled", "no environment uses this Template: nothing to pull yet"))
        assert (unused["status"], unused["reason"]) == ("True", "NotInUse")
        assert await pullers(kube, namespace) == []
        # A DaemonSet with the pullers' labels that the Template does not own is never touched.
        await kube.create(DAEMONSETS, namespace, foreign_daemonset())
        await cluster.create_userland("alice", "lab")
        puller = await eventually(lambda: one_puller(kube, namespace, not_named="someone-elses"))
        spec = puller["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"pool": "students"}
        assert spec["tolerations"] == lab_pod()["tolerations"]
        assert [c["image"] for c in spec["initContainers"]] == ["registry.example.edu/lab:1"]
        assert spec["automountServiceAccountToken"] is False
        owner = puller["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Template", "lab")
        pulling = await eventually(lambda: condition_says(
            kube, namespace, "ImagesPulled", "image on 0 nodes yet: waiting for the nodes to be counted"))
        assert (pulling["status"], pulling["reason"]) == ("False", "Pulling")

        await count_nodes(kube, puller, nodes=4, ready=3)
        await eventually(lambda: condition_says(kube, namespace, "ImagesPulled", "image on 3/4 nodes"))
        await count_nodes(kube, puller, nodes=4, ready=4)
        pulled = await eventually(lambda: condition_says(kube, namespace, "ImagesPulled",
                                                         "image on 4/4 nodes"))
        assert (pulled["status"], pulled["reason"]) == ("True", "Pulled")

        # A new image: a new puller, the old one deleted, the count starts again.
        template = await kube.get(TEMPLATES, namespace, "lab")
        template["spec"]["podSpec"] = lab_pod("registry.example.edu/lab:2")
        await kube.replace(TEMPLATES, namespace, "lab", template)
        old = puller["metadata"]["name"]
        new = await eventually(lambda: one_puller(kube, namespace, not_named=old, also_not="someone-elses"))
        assert await eventually(lambda: gone(kube, DAEMONSETS, namespace, old))
        assert new["spec"]["template"]["spec"]["initContainers"][0]["image"] == "registry.example.edu/lab:2"
        await eventually(lambda: condition_says(
            kube, namespace, "ImagesPulled", "image on 0 nodes yet: waiting for the nodes to be counted"))

        # No environment uses it any more: nothing is pulled.
        await kube.delete(USERLANDS, namespace, "lab-alice")
        assert await eventually(lambda: gone(kube, DAEMONSETS, namespace, new["metadata"]["name"]))
        assert not await gone(kube, DAEMONSETS, namespace, "someone-elses")
        await kube.delete(DAEMONSETS, namespace, "someone-elses")
        await cluster.create_userland("bob", "lab")
        puller = await eventually(lambda: one_puller(kube, namespace))
    # The Template goes: the garbage collector takes its puller (no operator needed).
    await kube.delete(TEMPLATES, namespace, "lab")
    assert await eventually(lambda: gone(kube, DAEMONSETS, namespace, puller["metadata"]["name"]), timeout=60)


async def deployment_image(kube: KubeClient, ns: str, name: str) -> str:
    deployment = await kube.get(DEPLOYMENTS, ns, name)
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


async def test_a_new_image_rolls_environments_only_once_it_is_on_the_nodes(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    clock = ManualClock()
    await create_lab(cluster)
    await cluster.create_userland("alice", "lab")
    async with run_operator(clock=clock, settings_extra={"image_pull_wait_seconds": 1800}) as controller:
        puller = await eventually(lambda: one_puller(kube, namespace))
        await count_nodes(kube, puller, nodes=2, ready=2)
        await eventually(lambda: condition_says(kube, namespace, "ImagesPulled", "image on 2/2 nodes"))
        assert await deployment_image(kube, namespace, "lab-alice") == "registry.example.edu/lab:1"

        template = await kube.get(TEMPLATES, namespace, "lab")
        template["spec"]["podSpec"] = lab_pod("registry.example.edu/lab:2")
        await kube.replace(TEMPLATES, namespace, "lab", template)
        new = await eventually(lambda: one_puller(kube, namespace, not_named=puller["metadata"]["name"]))
        await count_nodes(kube, new, nodes=2, ready=1)
        await eventually(lambda: condition_says(kube, namespace, "ImagesPulled", "image on 1/2 nodes"))
        # The environment has been looked at since, and keeps its image.
        poked = await kube.merge_patch(USERLANDS, namespace, "lab-alice",
                                       {"metadata": {"annotations": {"test/poke": "1"}}})
        await reconciled_since(controller, namespace, "lab-alice", poked["metadata"]["resourceVersion"])
        assert await deployment_image(kube, namespace, "lab-alice") == "registry.example.edu/lab:1"

        # On every node: it rolls.
        await count_nodes(kube, new, nodes=2, ready=2)

        async def rolled() -> bool:
            return await deployment_image(kube, namespace, "lab-alice") == "registry.example.edu/lab:2"
        assert await eventually(rolled)

        # A third image that never reaches every node: held at most image_pull_wait_seconds.
        template = await kube.get(TEMPLATES, namespace, "lab")
        template["spec"]["podSpec"] = lab_pod("registry.example.edu/lab:3")
        await kube.replace(TEMPLATES, namespace, "lab", template)
        await eventually(lambda: condition_says(
            kube, namespace, "ImagesPulled", "image on 0 nodes yet: waiting for the nodes to be counted"))
        poked = await kube.merge_patch(USERLANDS, namespace, "lab-alice",
                                       {"metadata": {"annotations": {"test/poke": "2"}}})
        await reconciled_since(controller, namespace, "lab-alice", poked["metadata"]["resourceVersion"])
        assert await deployment_image(kube, namespace, "lab-alice") == "registry.example.edu/lab:2"
        clock.advance(1801)
        await poke_template(kube, namespace, "late")
        late = await eventually(lambda: _says(kube, namespace, "ImagesPulled", "no longer wait"))
        assert late["message"] == (
            "image on 0 nodes yet: waiting for the nodes to be counted; environments no longer wait for it "
            "(it has been pulling for over 30 min): they pull it as they start")
        await kube.merge_patch(USERLANDS, namespace, "lab-alice",
                               {"metadata": {"annotations": {"test/poke": "3"}}})

        async def rolled_anyway() -> bool:
            return await deployment_image(kube, namespace, "lab-alice") == "registry.example.edu/lab:3"
        assert await eventually(rolled_anyway)


async def ensure_priority_class(kube: KubeClient) -> None:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "userland-placeholder"}, "value": -10, "preemptionPolicy": "Never"}
    try:
        await kube.create(PRIORITY_CLASSES, None, body)
    except AlreadyExists:
        pass


async def poke_template(kube: KubeClient, ns: str, value: str) -> JSON:
    return await kube.merge_patch(TEMPLATES, ns, "lab", {"metadata": {"annotations": {"test/poke": value}}})


def lecture_metric(controller: Controller, ns: str, name: str = "userland_lecture_ready") -> float | None:
    value = controller.metrics.registry.get_sample_value(name, {"course": ns, "template": "lab"})
    return None if value is None else float(value)


async def test_room_is_held_before_a_lecture_and_the_course_says_whether_it_will_be_ready(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    await ensure_priority_class(kube)
    clock = ManualClock(BEFORE)
    await create_lab(cluster, schedule=SCHEDULE)
    for user in ("alice", "bob", "carol"):
        await cluster.create_userland(user, "lab")
    await cluster.create_userland("dave", "lab", suspended=True)  # not expected
    placeholders = naming.placeholders_name("lab")
    async with run_operator(clock=clock, settings_extra={"hold_room_seconds": 1800}) as controller:
        # 08:20: the window opens at 08:30.
        puller = await eventually(lambda: one_puller(kube, namespace))
        await count_nodes(kube, puller, nodes=2, ready=2)
        early = await eventually(lambda: condition_says(
            kube, namespace, "LectureReady", "Getting ready for the lecture at 09:00: 3 of 3 "
                                             "environments can start; software on all 2 servers; room will "
                                             "be held from 08:30"))
        assert early["status"] == "Unknown"
        assert await gone(kube, DEPLOYMENTS, namespace, placeholders)
        assert lecture_metric(controller, namespace) == 0
        assert lecture_metric(controller, namespace, "userland_lecture_next_start_timestamp_seconds") == \
            datetime(2026, 11, 23, 9, 0, tzinfo=UTC).timestamp()

        # 08:35: one placeholder for each environment without room (none is on a node here).
        clock.now = BEFORE + timedelta(minutes=15)
        await poke_template(kube, namespace, "1")
        deployment = await eventually(lambda: _replicas(kube, namespace, placeholders, 3))
        pod = deployment["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "userland-placeholder"
        assert pod["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": str(2**30)}
        assert pod["nodeSelector"] == {"pool": "students"}
        await eventually(lambda: condition_says(
            kube, namespace, "LectureReady", "Not ready for the lecture at 09:00: 3 of 3 environments "
                                             "can start; software on all 2 servers; room for 0 of 3 (3 would "
                                             "wait for a server to be added)"))
        # The placeholders run (a kubelet's word): room for all.
        selector = f"{naming.LABEL_CAPACITY}=room,{naming.LABEL_CAPACITY_FOR}=lab"
        assert await eventually(lambda: _pods(kube, namespace, selector, 3))
        await cluster.make_pods_ready(selector)
        ready = await eventually(lambda: condition_says(
            kube, namespace, "LectureReady", "Ready for the lecture at 09:00: 3 of 3 environments can "
                                             "start; software on all 2 servers; room for all 3"))
        assert (ready["status"], ready["reason"]) == ("True", "Ready")
        assert await eventually(lambda: lecture_metric(controller, namespace) == 1)

        # 09:00: the lecture has started, the placeholders go; the next lecture is a week away.
        clock.now = datetime(2026, 11, 23, 9, 0, 1, tzinfo=UTC)
        await poke_template(kube, namespace, "2")
        assert await eventually(lambda: gone(kube, DEPLOYMENTS, namespace, placeholders))
        await eventually(lambda: condition_says(
            kube, namespace, "LectureReady", "Getting ready for the lecture on Mon at 09:00: 3 of 3 "
                                             "environments can start; software on all 2 servers; room will "
                                             "be held from Mon 08:30"))
        # No schedule: no lecture condition, no metric.
        template = await kube.get(TEMPLATES, namespace, "lab")
        del template["spec"]["schedule"]
        await kube.replace(TEMPLATES, namespace, "lab", template)
        await eventually(lambda: _no_condition(kube, namespace, "LectureReady"))
        assert lecture_metric(controller, namespace) is None


async def test_placeholders_follow_an_environment_onto_a_node_and_back_to_sleep_untold(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    """Issue 26 (the real-node room test, 1 run in several): an environment that went to sleep in
    the hold window got no placeholder back. What changes is only the Userland's status, which
    the operator writes itself and stores in its cache before the watch brings it, so the watch
    reported no change and the Template was never told. Nothing here pokes the Template: the
    Userland's own status is all that moves it (a poke, as the tests above use, hid this)."""
    await ensure_priority_class(kube)
    # The operator's clock starts at the real now (a new Userland's start is timed from its
    # creation): a lecture in 26 minutes, in a zone where it is about noon (no midnight between),
    # the window open (30 minutes ahead), the students woken 10 minutes before.
    now = datetime.now(UTC).replace(microsecond=0)
    offset = max(-12, min(14, 12 - now.hour))
    zone = "Etc/GMT" + (f"{-offset:+d}" if offset else "")
    start = (now + timedelta(hours=offset, minutes=26)).replace(second=0)
    schedule = {"timeZone": zone, "wakeBefore": "10m", "lectures": [{
        "days": [start.strftime("%a")], "start": start.strftime("%H:%M"),
        "end": (start + timedelta(minutes=30)).strftime("%H:%M")}]}
    clock = ManualClock(now)
    await create_lab(cluster, schedule=schedule, idleTimeout="5m")
    # alice opened it now (the gateway's word): awake for 5 minutes.
    await kube.create(USERLANDS, namespace, {
        "apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
        "metadata": {"name": "lab-alice", "annotations": {
            naming.ANNOTATION_LAST_ACTIVITY: _stamp(clock.now)}},
        "spec": {"user": "alice", "template": "lab"}})
    placeholders = naming.placeholders_name("lab")
    async with run_operator(clock=clock, settings_extra={"hold_room_seconds": 1800}):
        # Starting, not on a node yet: one placeholder holds its room. (Once the deployment
        # controller has written its status: nothing but alice's status moves the Template next.)
        await eventually(lambda: _settled(kube, namespace, placeholders, 1))
        await eventually(lambda: _phase(kube, namespace, "lab-alice", "Starting"))
        # Its Pod is placed (a scheduler's word): it has room, and the placeholder goes.
        selector = "userland.dev/user=alice,userland.dev/template=lab"
        (pod,) = await eventually(lambda: _pods_of(kube, namespace, selector))
        await kube.merge_patch(PODS, namespace, pod["metadata"]["name"], {"status": {"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _stamp(clock.now)}]}},
            subresource="status")
        assert await eventually(lambda: gone(kube, DEPLOYMENTS, namespace, placeholders), timeout=15)

        # 6 minutes later: unused for 6 minutes, it sleeps (its reconcile is asked for by an unrelated
        # annotation, as any change would); asleep it has no room: the placeholder comes back.
        clock.now = now + timedelta(minutes=6)
        await kube.merge_patch(USERLANDS, namespace, "lab-alice",
                               {"metadata": {"annotations": {"test/poke": "1"}}})
        await eventually(lambda: _phase(kube, namespace, "lab-alice", "Idle"))
        assert await eventually(lambda: _replicas(kube, namespace, placeholders, 1), timeout=15)
        assert await eventually(lambda: _says(kube, namespace, "LectureReady", "room for 0 of 1"), timeout=15)


async def _settled(kube: KubeClient, ns: str, name: str, replicas: int) -> bool:
    """The Deployment asks for `replicas` and its controller has written status for that."""
    found = await _replicas(kube, ns, name, replicas)
    status = (found or {}).get("status") or {}
    return found is not None and status.get("observedGeneration") == found["metadata"]["generation"] \
        and status.get("replicas") == replicas


async def _phase(kube: KubeClient, ns: str, name: str, phase: str) -> bool:
    return ((await kube.get(USERLANDS, ns, name)).get("status") or {}).get("phase") == phase


async def _pods_of(kube: KubeClient, ns: str, selector: str) -> list[JSON]:
    items: list[JSON] = (await kube.list(PODS, ns, label_selector=selector))["items"]
    return items


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_placeholders_that_cannot_be_made_say_why(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    """A PriorityClass missing from the cluster (deploy/capacity.yaml not applied): the
    replicaset controller cannot make the Pods, and the course's condition says so."""
    clock = ManualClock(BEFORE + timedelta(minutes=15))
    await create_lab(cluster, schedule=SCHEDULE)
    await cluster.create_userland("alice", "lab")
    missing = f"missing-{namespace}"
    async with run_operator(clock=clock, settings_extra={"placeholder_priority_class": missing}):
        found = await eventually(lambda: _says(kube, namespace, "LectureReady", "tell your admin"),
                                 timeout=60)
        # (Its reason names the first part missing: here the images, which no kubelet pulls.)
        assert found["status"] == "False"
        assert found["message"].endswith("room for 0 of 1 (1 would wait: room for them cannot be held ahead, "
                                         "tell your admin)")
        # What the admin reads: the placeholders' Deployment says why (the real controller's words).
        deployment = await kube.get(DEPLOYMENTS, namespace, naming.placeholders_name("lab"))
        assert "no PriorityClass with name " + missing in replica_failure(deployment)


async def test_under_make_run_nothing_is_pulled_or_held_and_the_status_says_so(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    clock = ManualClock(BEFORE + timedelta(minutes=15))
    await create_lab(cluster, schedule=SCHEDULE)
    await cluster.create_userland("alice", "lab")
    async with run_operator(clock=clock, settings_extra={"nodes": "local"}) as controller:
        images = await eventually(lambda: condition_says(
            kube, namespace, "ImagesPulled", "images are local: nothing to pull"))
        assert (images["status"], images["reason"]) == ("True", "ImagesLocal")
        lecture = await eventually(lambda: condition_says(
            kube, namespace, "LectureReady", "Ready for the lecture at 09:00: 1 of 1 environment can "
                                             "start; software on this machine; no room to hold ahead"))
        assert lecture["status"] == "True"
        poked = await poke_template(kube, namespace, "1")
        await reconciled_since(controller, namespace, "lab", poked["metadata"]["resourceVersion"],
                               kind="Template")
        assert await pullers(kube, namespace) == []
        assert await gone(kube, DEPLOYMENTS, namespace, naming.placeholders_name("lab"))


async def _replicas(kube: KubeClient, ns: str, name: str, replicas: int) -> JSON | None:
    try:
        deployment = await kube.get(DEPLOYMENTS, ns, name)
    except Exception:
        return None
    return deployment if deployment["spec"]["replicas"] == replicas else None


async def _pods(kube: KubeClient, ns: str, selector: str, count: int) -> bool:
    return len((await kube.list(PODS, ns, label_selector=selector))["items"]) == count


async def _no_condition(kube: KubeClient, ns: str, kind: str) -> bool:
    return not await condition(kube, ns, kind)


async def _says(kube: KubeClient, ns: str, kind: str, words: str) -> JSON | None:
    found = await condition(kube, ns, kind)
    return found if words in str(found.get("message") or "") else None
