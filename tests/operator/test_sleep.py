"""Sleep and wake in the operator, against the real control plane: an unused environment
sleeps (replicas 0, phase Idle, an Event), its student's use wakes it, a suspended one never
wakes, "start all" wakes a class at the configured rate, a lecture keeps everyone awake, and
the waking page's steps come from the Pod's own status.

Nothing here sleeps to see that something did not happen: a test waits until the operator has
reconciled the version it wrote (`reconciled_since`), or runs the operator on a clock it moves.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.operator.support import Cluster, OperatorRunner, reconciled_since
from tests.support import eventually
from tests.support.clock import ManualClock
from userland.platform.clients.kube import DEPLOYMENTS, EVENTS, PODS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming


def now_stamp(offset: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def replicas(kube: KubeClient, namespace: str, name: str) -> int | None:
    try:
        return int((await kube.get(DEPLOYMENTS, namespace, name))["spec"]["replicas"])
    except Exception:
        return None


async def events_of(kube: KubeClient, namespace: str, name: str) -> list[tuple[str, str]]:
    items = (await kube.list(EVENTS, namespace))["items"]
    return [(e["reason"], e["message"]) for e in items
            if e["involvedObject"].get("kind") == "Userland" and e["involvedObject"]["name"] == name]


async def test_an_unused_environment_sleeps_and_its_students_use_wakes_it(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_template("vscode", idleTimeout="3s")
    await cluster.create_userland("alice", "vscode")
    async with run_operator():
        assert await eventually(lambda: replicas(kube, namespace, "vscode-alice")) == 1
        # Three seconds after its creation (no use at all): asleep.

        async def asleep() -> dict[str, Any] | None:
            status = await cluster.userland_status("vscode-alice")
            return status if status.get("phase") == "Idle" else None

        status = await eventually(asleep, timeout=30)
        assert await replicas(kube, namespace, "vscode-alice") == 0
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "Idle")
        assert "asleep since" in ready["message"] and "3 s without use" in ready["message"]
        assert status["sleepingSince"] and status["progress"] == []
        await eventually(lambda: _has_event(kube, namespace, "vscode-alice", "Sleeping"))

        # The gateway writes its student's use: it wakes.
        await kube.merge_patch(USERLANDS, namespace, "vscode-alice",
                               {"metadata": {"annotations": {naming.ANNOTATION_LAST_ACTIVITY: now_stamp()}}})
        assert await eventually(lambda: _equals(replicas(kube, namespace, "vscode-alice"), 1), timeout=10)
        await eventually(lambda: _phase(cluster, "vscode-alice", "Starting"))
        assert "sleepingSince" not in await cluster.userland_status("vscode-alice")
        message = await eventually(lambda: _has_event(kube, namespace, "vscode-alice", "Waking"))
        assert "its student opened it" in message
        # And sleeps again when the use is three seconds old.
        await eventually(asleep, timeout=30)


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _has_event(kube: KubeClient, namespace: str, name: str, reason: str) -> str | None:
    return next((m for r, m in await events_of(kube, namespace, name) if r == reason), None)


async def test_a_suspended_environment_never_wakes(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_template("vscode", idleTimeout="2s")
    await cluster.create_userland("bob", "vscode", suspended=True)
    async with run_operator() as controller:
        await eventually(lambda: _phase(cluster, "vscode-bob", "Suspended"))
        # Its student's use, and a staff member's Start: neither wakes a suspended environment.
        used = await kube.merge_patch(USERLANDS, namespace, "vscode-bob", {"metadata": {"annotations": {
            naming.ANNOTATION_LAST_ACTIVITY: now_stamp(), naming.ANNOTATION_STARTED_AT: now_stamp(),
            naming.ANNOTATION_STARTED_BY: "teacher"}}})
        await reconciled_since(controller, namespace, "vscode-bob", used["metadata"]["resourceVersion"])
        assert await replicas(kube, namespace, "vscode-bob") == 0
        assert (await cluster.userland_status("vscode-bob"))["phase"] == "Suspended"


async def scaled_up(kube: KubeClient, namespace: str, names: list[str], timeout: float) -> dict[str, float]:
    """When (seconds from now) each of `names` was first seen scaled to one replica."""
    woke_at: dict[str, float] = {}
    started = time.monotonic()
    while len(woke_at) < len(names) and time.monotonic() - started < timeout:
        for item in (await kube.list(DEPLOYMENTS, namespace))["items"]:
            name = item["metadata"]["name"]
            if item["spec"]["replicas"] == 1 and name not in woke_at:
                woke_at[name] = time.monotonic() - started
        await asyncio.sleep(0.05)
    return woke_at


async def _phase(cluster: Cluster, name: str, phase: str) -> bool:
    return (await cluster.userland_status(name)).get("phase") == phase


async def test_start_all_wakes_a_class_at_the_configured_rate(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    await cluster.create_template("vscode", idleTimeout="6s")
    names = [f"vscode-s{i:02d}" for i in range(12)]
    for i in range(12):
        await cluster.create_userland(f"s{i:02d}", "vscode")
    async with run_operator(settings_extra={"wake_rate": 4.0, "wake_burst": 2}):
        for name in names:
            await eventually(lambda name=name: _phase(cluster, name, "Idle"), timeout=40)
        await kube.merge_patch(TEMPLATES, namespace, "vscode",
                               {"metadata": {"annotations": {naming.ANNOTATION_WAKE_ALL: now_stamp()}}})
        woke_at = await scaled_up(kube, namespace, names, timeout=30)
        assert sorted(woke_at) == names  # everyone, none lost
        spread = max(woke_at.values()) - min(woke_at.values())
        # 2 at once, then 4 a second: the last of 12 about 2.5 s after the first.
        assert spread >= 2.0, woke_at
        for name in (names[0], names[-1]):  # woken at once, and after waiting in line
            message = await eventually(lambda name=name: _has_event(kube, namespace, name, "Waking"))
            assert "the whole class was started" in message, (name, message)


async def test_a_lecture_keeps_everyone_awake_and_the_steps_come_from_the_pod(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    # A zone where it is about noon now, so the lecture window never crosses midnight.
    utc_hour = datetime.now(UTC).hour
    offset = max(-12, min(14, 12 - utc_hour))
    zone = "Etc/GMT" + (f"{-offset:+d}" if offset else "")
    local = datetime.now(UTC) + timedelta(hours=offset)
    day = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[local.weekday()]
    start, end = local - timedelta(minutes=20), local + timedelta(minutes=20)
    schedule = {"timeZone": zone, "wakeBefore": "1m",
                "lectures": [{"days": [day], "start": start.strftime("%H:%M"), "end": end.strftime("%H:%M")}]}
    await cluster.create_template("vscode", idleTimeout="2s", schedule=schedule)
    await cluster.create_userland("carol", "vscode")
    await cluster.create_template("other", idleTimeout="2s")  # the same, with no lecture
    await cluster.create_userland("dan", "other")
    # The operator decides five minutes from now: long past the 2 s idle timeout, still in the
    # lecture (which runs from 20 minutes ago to 20 minutes from now).
    async with run_operator(clock=ManualClock(datetime.now(UTC) + timedelta(minutes=5))):
        assert await eventually(lambda: _equals(replicas(kube, namespace, "vscode-carol"), 1))
        await eventually(lambda: _phase(cluster, "vscode-carol", "Starting"))
        # Without the lecture the same clock puts it to sleep at once: the clock is in effect.
        await eventually(lambda: _phase(cluster, "other-dan", "Idle"))
        assert await replicas(kube, namespace, "other-dan") == 0
        assert await replicas(kube, namespace, "vscode-carol") == 1

        # Its Pod, as a kubelet reports it: placed, image there, not started yet.
        selector = "userland.dev/user=carol,userland.dev/template=vscode"
        pods = await eventually(lambda: _pods(kube, namespace, selector))
        await kube.merge_patch(PODS, namespace, pods[0]["metadata"]["name"], {"status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_stamp()}],
            "containerStatuses": [{"name": "ide", "image": "demo:1", "imageID": "sha256:abc", "ready": False,
                                   "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}],
        }}, subresource="status")

        async def progress() -> list[str] | None:
            steps = (await cluster.userland_status("vscode-carol")).get("progress")
            return steps if steps == ["Scheduled", "ImagePulled"] else None

        await eventually(progress)


async def _pods(kube: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await kube.list(PODS, namespace, label_selector=selector))["items"]
    return items


async def test_a_long_wake_line_is_carried_out_even_past_the_idle_timeout(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    # 10 environments woken at once at 1 a second: the last waits ~9 s for its turn, three times
    # its idle timeout. It must still be woken (and get its idle timeout from then), not drop out
    # of the line asleep and leave its student on the waking page for ever.
    await cluster.create_template("vscode", idleTimeout="3s")
    names = [f"vscode-l{i:02d}" for i in range(10)]
    for i in range(10):
        await cluster.create_userland(f"l{i:02d}", "vscode")
    async with run_operator(settings_extra={"wake_rate": 1.0, "wake_burst": 1}):
        for name in names:
            await eventually(lambda name=name: _phase(cluster, name, "Idle"), timeout=40)
        await kube.merge_patch(TEMPLATES, namespace, "vscode",
                               {"metadata": {"annotations": {naming.ANNOTATION_WAKE_ALL: now_stamp()}}})
        assert sorted(await scaled_up(kube, namespace, names, timeout=40)) == names


async def test_a_staff_start_says_who_started_it_and_no_sleep_or_wake_says_the_template_changed(
        cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner) -> None:
    clock = ManualClock()
    await cluster.create_template("vscode", idleTimeout="1h")
    await cluster.create_userland("erin", "vscode")
    # (Hours pass on this clock, not on the API server's: Pods are not timed here.)
    async with run_operator(clock=clock, start_timeout=None) as controller:
        await eventually(lambda: _phase(cluster, "vscode-erin", "Starting"))
        clock.advance(2 * 3600)  # two hours without use
        controller.enqueue_all(low=True)  # the periodic resync looks again
        await eventually(lambda: _phase(cluster, "vscode-erin", "Idle"))
        assert await replicas(kube, namespace, "vscode-erin") == 0
        # The web UI's Start: when, and who pressed it.
        await kube.merge_patch(USERLANDS, namespace, "vscode-erin", {"metadata": {"annotations": {
            naming.ANNOTATION_STARTED_AT: clock.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            naming.ANNOTATION_STARTED_BY: "teacher"}}})
        message = await eventually(lambda: _has_event(kube, namespace, "vscode-erin", "Waking"))
        assert message == "Vscode is waking up: teacher started it"
        assert await replicas(kube, namespace, "vscode-erin") == 1
        sleeping = await eventually(lambda: _has_event(kube, namespace, "vscode-erin", "Sleeping"))
        assert "asleep since" in sleeping and "1 h without use" in sleeping
        await controller.events.flush()
        told = await events_of(kube, namespace, "vscode-erin")
        # Scaling to 0 and back is told by Sleeping and Waking, never as a changed Template.
        assert [m for r, m in told if r == "Updated"] == [], told
        assert not [m for _, m in told if "the Template changed" in m], told
