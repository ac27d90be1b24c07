"""Ready before the lecture on a real node (docs/capacity.md).

- A Template's image, served by a registry of our own in the node's network namespace (Debian's
  docker-registry: tests/support/registry.py), is pulled for real by the Template's puller
  before any student's environment runs it, and the Template says "image on 1/1 nodes"; a
  student then starts on an image already there, and a new image reaches them the same way.
- Before a scheduled lecture, placeholders hold room for the sleeping students: the course says
  it is ready, then not ready when something else takes the room (a Pod of higher priority
  preempts a placeholder, as any Pod may), then ready again when the room is back (what a
  cluster autoscaler's new node would do); the schedule wakes the students, their environments
  preempt the placeholders and are Ready before the lecture starts, and the placeholders go.

Each test removes what it made (Userlands, Templates, the other Pod) and waits until their Pods
are gone, whatever happened: the room test's environments request most of the node's free CPU,
and the tests after this file need it.
"""

from __future__ import annotations

import copy
import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.cluster.conftest import (
    COURSE,
    NODE,
    Platform,
    envapp_template,
    kubectl,
    kubectl_json,
    student_pods,
    wait_until,
)
from tests.support.registry import Registry, archive_of
from userland.operator.rules.capacity.room import parse_quantity, pod_requests

REPOSITORY = "capacity/env"


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    workdir = Path(tempfile.mkdtemp(prefix="userland-registry-"))
    served = Registry(workdir)
    try:
        served.start()
        yield served
    finally:
        served.close()
        shutil.rmtree(workdir, ignore_errors=True)


# ----- helpers ---------------------------------------------------------------------------------


def template(name: str, image: str, cpu: str = "50m", **spec: Any) -> dict[str, Any]:
    """The test environment as a Template of its own, without storage (the node's volumes are the
    other tests'), requesting `cpu`."""
    body = copy.deepcopy(envapp_template())
    body["metadata"]["name"] = name
    body["spec"].pop("storage")
    body["spec"]["displayName"] = f"Capacity test {name}"
    body["spec"]["routing"] = {"host": f"{name}.test"}
    container = body["spec"]["podSpec"]["containers"][0]
    container["image"] = image
    container["env"] = [{"name": "STUDENT", "value": "${USER}"}]
    container["resources"] = {"requests": {"cpu": cpu, "memory": "32Mi"},
                              "limits": {"cpu": cpu, "memory": "256Mi"}}
    body["spec"].update(spec)
    return body


def userland(login: str, tpl: str, suspended: bool = False) -> dict[str, Any]:
    return {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
            "metadata": {"name": f"{tpl}-{login}", "namespace": COURSE},
            "spec": {"user": login, "template": tpl, "suspended": suspended}}


def apply(*objects: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": list(objects)}))


def condition(tpl: str, kind: str) -> dict[str, Any]:
    status = kubectl_json("-n", COURSE, "get", "template", tpl).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def condition_is(tpl: str, kind: str, status: str) -> dict[str, Any] | None:
    found = condition(tpl, kind)
    return found if found.get("status") == status else None


def on_nodes(tpl: str) -> dict[str, Any] | None:
    """ImagesPulled True, counted on the nodes (not "nothing to pull yet": no student seen yet)."""
    found = condition_is(tpl, "ImagesPulled", "True")
    return found if found and "nodes" in found["message"] else None


def node_images() -> set[str]:
    """The images the node's containerd holds (what a kubelet would not pull again)."""
    out = subprocess.run(["ctr", "--address", str(NODE.state / "run" / "containerd.sock"), "--namespace",
                          "k8s.io", "images", "ls", "-q"], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def ready_pod(login: str, tpl: str, image: str | None = None) -> dict[str, Any] | None:
    for pod in student_pods(login, tpl):
        statuses = pod["status"].get("containerStatuses") or []
        if statuses and all(s["ready"] for s in statuses) and (
                image is None or pod["spec"]["containers"][0]["image"] == image):
            return pod
    return None


def pull_events(pod: str) -> list[str]:
    events = kubectl_json("-n", COURSE, "get", "events", "--field-selector",
                          f"involvedObject.name={pod},reason=Pulled")["items"]
    return [str(e.get("message") or "") for e in events]


def capacity_pods(tpl: str, what: str) -> list[dict[str, Any]]:
    pods = kubectl_json("-n", COURSE, "get", "pods", "-l",
                        f"userland.dev/capacity={what},userland.dev/capacity-for={tpl}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def remove(templates: list[str], userlands: list[str], pods: tuple[str, ...] = ()) -> None:
    """Delete what a test made and wait until every Pod of it is gone (environments, pullers,
    placeholders), so the node's room is the next test's again."""
    if userlands:
        kubectl("-n", COURSE, "delete", "userlands", *userlands, "--ignore-not-found", "--wait=false")
    if pods:
        kubectl("-n", COURSE, "delete", "pods", *pods, "--ignore-not-found", "--grace-period=0",
                "--wait=false")

    def gone() -> bool:
        left = kubectl_json("-n", COURSE, "get", "userlands")["items"]
        return not any(u["metadata"]["name"] in userlands for u in left)

    wait_until(gone, f"Userlands {userlands} deleted", timeout=120)
    if templates:
        kubectl("-n", COURSE, "delete", "templates", *templates, "--ignore-not-found", "--wait=true",
                timeout=120)

    def no_pods() -> bool:
        for pod in kubectl_json("-n", COURSE, "get", "pods")["items"]:
            labels = pod["metadata"].get("labels") or {}
            if (labels.get("userland.dev/template") in templates
                    or labels.get("userland.dev/capacity-for") in templates
                    or pod["metadata"]["name"] in pods):
                return False
        return True

    wait_until(no_pods, f"every Pod of {templates} gone", timeout=180)


# ----- images pulled ahead ---------------------------------------------------------------------


def test_a_templates_new_image_is_on_the_node_before_its_students_get_it(
        platform: Platform, registry: Registry) -> None:
    archive = archive_of(NODE.images["testenv"], NODE.state / "images.env")
    run = secrets.token_hex(3)
    first = registry.push_variant(archive, REPOSITORY, f"first-{run}")
    assert first.reference not in node_images()
    name = "capacity-pull"
    try:
        # In use (a student, suspended for now): its puller pulls the image, and nothing else does.
        apply(template(name, first.reference), userland("gina", name, suspended=True))
        # (True at first, "nothing to pull yet", if the operator sees the Template before gina.)
        pulled = wait_until(lambda: on_nodes(name), "the Template's image pulled ahead", timeout=240)
        assert pulled["reason"] == "Pulled"
        assert pulled["message"] == "image on 1/1 nodes"
        assert first.reference in node_images()
        # A real pull: the layer no node had came from our registry, once.
        assert registry.served(REPOSITORY, first.fresh_layer) == 1
        assert student_pods("gina", name) == []
        (puller,) = capacity_pods(name, "images")
        assert any("Successfully pulled" in m for m in pull_events(puller["metadata"]["name"]))

        # The student starts: their environment finds the image on the node.
        kubectl("-n", COURSE, "patch", "userland", f"{name}-gina", "--type=merge",
                "-p", json.dumps({"spec": {"suspended": False}}))
        pod = wait_until(lambda: ready_pod("gina", name), "gina's environment Ready", timeout=180)
        assert any("already present on machine" in m for m in pull_events(pod["metadata"]["name"])), \
            pull_events(pod["metadata"]["name"])

        # A new image: pulled ahead again, and only then does gina's environment roll onto it.
        second = registry.push_variant(archive, REPOSITORY, f"second-{run}")
        kubectl("-n", COURSE, "patch", "template", name, "--type=json", "-p", json.dumps([
            {"op": "replace", "path": "/spec/podSpec/containers/0/image", "value": second.reference}]))
        rolled = wait_until(lambda: ready_pod("gina", name, second.reference),
                            "gina's environment on the new image", timeout=240)
        assert any("already present on machine" in m for m in pull_events(rolled["metadata"]["name"])), \
            pull_events(rolled["metadata"]["name"])
        assert registry.served(REPOSITORY, second.fresh_layer) == 1
        assert condition(name, "ImagesPulled")["message"] == "image on 1/1 nodes"
        # One puller, of the new image; the old one went.
        wait_until(lambda: [p["spec"]["initContainers"][0]["image"] for p in capacity_pods(name, "images")]
                   == [second.reference], "only the new image's puller left", timeout=60)
    finally:
        remove([name], [f"{name}-gina"])


# ----- room held before a lecture --------------------------------------------------------------


def free_millicores() -> int:
    """The node's allocatable CPU less what its Pods request (what the scheduler has left)."""
    node = kubectl_json("get", "node", NODE.name)
    free = parse_quantity(node["status"]["allocatable"]["cpu"])
    for pod in kubectl_json("get", "pods", "-A")["items"]:
        finished = pod["status"].get("phase") in ("Succeeded", "Failed")
        if pod["spec"].get("nodeName") == NODE.name and not finished:
            free -= parse_quantity(pod_requests(pod["spec"]).get("cpu", "0"))
    return int(free * 1000)


def lecture_ready(tpl: str, status: str) -> dict[str, Any] | None:
    return condition_is(tpl, "LectureReady", status)


def preempted(pod: str) -> str | None:
    events = kubectl_json("-n", COURSE, "get", "events", "--field-selector",
                          f"involvedObject.name={pod},reason=Preempted")["items"]
    return str(events[0].get("message") or "") if events else None


def running_placeholders(tpl: str) -> list[dict[str, Any]]:
    return [p for p in capacity_pods(tpl, "room") if any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]


def ready_since(pod: dict[str, Any]) -> datetime:
    (ready,) = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    return datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))


def test_placeholders_hold_room_before_a_lecture_and_the_students_take_it(platform: Platform) -> None:
    name, students = "capacity-room", ["hank", "iris"]
    # Each environment (and placeholder) requests 45% of the CPU the node has left: two fit, a
    # third does not, so any third Pod must preempt one.
    free = free_millicores()
    cpu = f"{free * 45 // 100}m"
    now = datetime.now(UTC)
    # The lecture: at a whole minute at least 150 s ahead, woken 60 s before (the CRD takes
    # clock times); in a zone where it does not cross midnight.
    start = (now + timedelta(seconds=150 + 59)).replace(second=0, microsecond=0)
    zone = "UTC" if 1 <= start.hour <= 22 else "Etc/GMT+6"
    local = start.astimezone(ZoneInfo(zone))
    schedule = {"timeZone": zone, "wakeBefore": "60s", "lectures": [{
        "days": [local.strftime("%a")], "start": local.strftime("%H:%M"),
        "end": (local + timedelta(minutes=30)).strftime("%H:%M")}]}
    hog = "capacity-room-other"
    try:
        apply(template(name, NODE.images["testenv"], cpu=cpu, idleTimeout="15s", schedule=schedule),
              *(userland(s, name) for s in students))
        # They start (a new Userland counts as used), then sleep: nobody uses them.
        wait_until(lambda: all(u.get("status", {}).get("phase") == "Idle" for u in kubectl_json(
            "-n", COURSE, "get", "userlands", *(f"{name}-{s}" for s in students))["items"]),
            "both environments asleep", timeout=150)
        # Room is held for both by two placeholders, and the course says it is ready. (It said so
        # already while both ran, in the same words: wait for the placeholders first.)
        wait_until(lambda: len(running_placeholders(name)) == 2, "two placeholders running", timeout=90)
        clock = local.strftime("%H:%M")
        expected = (f"Ready for the lecture at {clock}: 2 of 2 environments can start; software on the "
                    "server; room for all 2")
        wait_until(lambda: (lecture_ready(name, "True") or {}).get("message") == expected,
                   "LectureReady True with room held", timeout=90)

        # Another Pod (priority 0) takes the room of one: a placeholder is preempted, and the
        # course is not ready.
        apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": hog, "namespace": COURSE},
               "spec": {"containers": [{"name": "pause", "image": NODE.images["pause"],
                                        "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}],
                        "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False}})
        short = wait_until(lambda: lecture_ready(name, "False"), "LectureReady False", timeout=90)
        assert short["reason"] == "WaitingForNodes"
        assert short["message"].endswith("room for 1 of 2 (1 would wait for a server to be added)"), short
        # The room comes back (as a new node would): ready again.
        kubectl("-n", COURSE, "delete", "pod", hog, "--grace-period=0", "--wait=true")
        wait_until(lambda: lecture_ready(name, "True"), "LectureReady True again", timeout=90)
        placeholders = {p["metadata"]["name"] for p in capacity_pods(name, "room")}

        # wakeBefore: the schedule wakes both; each environment preempts a placeholder, and both
        # are Ready before the lecture starts.
        envs = [wait_until(lambda s=s: ready_pod(s, name), f"{s}'s environment woken and Ready",
                           timeout=(start - datetime.now(UTC)).total_seconds() + 30) for s in students]
        ready_at = [ready_since(e) for e in envs]
        assert all(t < start for t in ready_at), f"Ready at {ready_at}, the lecture at {start}"
        messages = [m for p in placeholders if (m := preempted(p))]
        env_names = {e["metadata"]["name"] for e in envs}
        # Every placeholder that went was preempted by a student's environment (the replicaset
        # may also remove one itself as the operator scales it down: not counted here).
        assert messages and all(any(e in m for e in env_names) for m in messages), messages
        ready = wait_until(lambda: lecture_ready(name, "True"), "ready with the students on the node",
                           timeout=30)
        assert ready["message"].endswith("room for all 2"), ready
        # The placeholders go (no room left to hold: everyone has theirs; and at the start).
        wait_until(lambda: not capacity_pods(name, "room"), "the placeholders gone", timeout=90)
        wait_until(lambda: datetime.now(UTC) > start + timedelta(seconds=5), "the lecture started",
                   timeout=(start - datetime.now(UTC)).total_seconds() + 30)
        assert not kubectl_json("-n", COURSE, "get", "deployments", "-l",
                                f"userland.dev/capacity=room,userland.dev/capacity-for={name}")["items"]
        assert all(ready_pod(s, name) for s in students)
    finally:
        remove([name], [f"{name}-{s}" for s in students], (hog,))
