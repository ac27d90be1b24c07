"""Sleep and wake at the gateway: what counts as use, what it writes (Redis, the API server,
once across replicas), and what a student meets at a sleeping environment. Real Redis, the real
control plane, the real gateway app."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from tests.support import eventually
from userland.platform.clients.kube import TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.platform.model.models import Activity
from userland.proxy.activity import ActivityTracker, counts_as_use, frame_counts, intervals
from userland.proxy.app import GATEWAY
from userland.proxy.websocket import CLOSE_NOT_RUNNING

from .conftest import (
    IDE_HOST,
    EchoFactory,
    GatewayFactory,
    Origins,
    World,
    gateway_settings,
    golden_vscode_frames,
    origin_cookie,
    routes_of,
    template_body,
)

ALICE_HOST = f"alice.{IDE_HOST}"
HTML = {"Accept": "text/html,application/xhtml+xml"}
JUPYTER = Activity(background_paths=("/api/kernels*", "/api/contents*", "PUT /lab/api/workspaces*"),
                   quiet_frame_bytes=26)


def test_what_counts_as_use() -> None:
    assert counts_as_use("GET", "/lab", JUPYTER)
    assert not counts_as_use("GET", "/api/kernels", JUPYTER)
    assert not counts_as_use("HEAD", "/api/kernels/1/channels", JUPYTER)  # * matches / too
    assert not counts_as_use("GET", "/api/contents/notes/a.ipynb", JUPYTER)
    assert counts_as_use("PUT", "/api/contents/a.ipynb", JUPYTER)  # saving is use, whatever the path
    assert counts_as_use("POST", "/api/kernels", JUPYTER)
    # An entry with a method is for that method only: JupyterLab saving its layout by itself.
    assert not counts_as_use("PUT", "/lab/api/workspaces/default", JUPYTER)
    assert counts_as_use("GET", "/lab/api/workspaces/default", JUPYTER)
    assert counts_as_use("POST", "/lab/api/workspaces/default", JUPYTER)
    assert counts_as_use("GET", "/api/kernels", Activity())  # no rules: everything counts
    assert not frame_counts(b"x" * 13, JUPYTER) and not frame_counts("x" * 26, JUPYTER)
    assert frame_counts(b"x" * 27, JUPYTER)
    assert frame_counts("x", Activity())


def test_write_intervals_honour_a_short_idle_timeout() -> None:
    settings = gateway_settings("ns", "redis://x")
    assert intervals(settings, None) == (60.0, 300.0)
    assert intervals(settings, 7200) == (60.0, 300.0)
    assert intervals(settings, 60) == (15.0, 15.0)  # a 1-minute timeout: a write every 15 s


async def idle(world: World, template: str, user: str) -> None:
    await world.kube.merge_patch(USERLANDS, world.namespace, naming.userland_name(template, user), {
        "status": {"phase": "Idle", "progress": [], "conditions": [{
            "type": "Ready", "status": "False", "reason": "Idle", "message": "asleep",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")


async def last_activity(kube: KubeClient, namespace: str, name: str) -> str | None:
    obj = await kube.get(USERLANDS, namespace, name)
    return (obj["metadata"].get("annotations") or {}).get(naming.ANNOTATION_LAST_ACTIVITY)


async def sleeping_alice(world: World, gateway_factory: GatewayFactory, **activity: Any) -> Any:
    body = template_body("vscode", host=IDE_HOST)
    body["spec"]["activity"] = activity or {"backgroundPaths": ["/poll*"]}
    await world.kube.create(TEMPLATES, world.namespace, body)
    await world.userland("vscode", "alice", ready=False)
    await idle(world, "vscode", "alice")
    gw = await gateway_factory()
    await eventually(lambda: (s := routes_of(gw).userland(world.namespace, "vscode", "alice")) is not None
                     and s.phase == "Idle")
    return gw


async def test_a_visit_wakes_it_once_and_shows_the_waking_page(
        world: World, gateway_factory: GatewayFactory, origins: Origins) -> None:
    gw = await sleeping_alice(world, gateway_factory)
    alice = {"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))}
    # A tab that only polls does not wake it (or it would never sleep again).
    poll = await gw.get("/poll/status", headers=alice)
    assert poll.status == 503 and poll.headers["Retry-After"].isdigit()
    assert await last_activity(world.kube, world.namespace, "vscode-alice") is None
    # Twenty tabs at once: every one gets the page, one write wakes it.
    gateway = gw.app[GATEWAY]
    responses = await asyncio.gather(*(gw.get("/src/main.py", headers={**alice, **HTML}) for _ in range(20)))
    assert [r.status for r in responses] == [200] * 20
    page = await responses[0].text()
    assert "Waking up your VSCODE" in page and "Finding a place to run it" in page
    assert "http-equiv=\"refresh\"" in page
    assert await last_activity(world.kube, world.namespace, "vscode-alice") is not None
    assert gateway.activity.api_writes == 1


async def test_a_websocket_to_a_sleeping_environment_is_closed_at_once_and_wakes_nothing(
        world: World, gateway_factory: GatewayFactory, origins: Origins) -> None:
    gw = await sleeping_alice(world, gateway_factory)
    cookie = origin_cookie(await origins.login("alice"))
    async with gw.session.ws_connect(gw.make_url("/ws"), headers={"Host": ALICE_HOST, **cookie,
                                                                  "Origin": f"http://{ALICE_HOST}"}) as ws:
        message = await ws.receive(timeout=5)
        assert message.type is aiohttp.WSMsgType.CLOSE and message.data == CLOSE_NOT_RUNNING
        assert "reload the page" in message.extra
    assert await last_activity(world.kube, world.namespace, "vscode-alice") is None


async def test_another_student_neither_wakes_nor_sees_it(
        world: World, gateway_factory: GatewayFactory, origins: Origins) -> None:
    gw = await sleeping_alice(world, gateway_factory)
    bob = {"Host": ALICE_HOST, **origin_cookie(await origins.login("bob")), **HTML}
    response = await gw.get("/", headers=bob)
    assert response.status == 403 and "Waking" not in await response.text()
    assert await last_activity(world.kube, world.namespace, "vscode-alice") is None


async def test_use_reaches_redis_each_interval_and_the_api_once_across_replicas(
        kube: KubeClient, namespace: str, world: World, redis_url: str) -> None:
    await world.template("vscode", host=IDE_HOST)
    await world.userland("vscode", "alice")
    settings = gateway_settings(namespace, redis_url, activity_redis_seconds=0.2, activity_api_seconds=30)
    client = aioredis.from_url(redis_url)
    try:
        clock = [1000.0]  # the replicas' monotonic clock, moved by hand (no sleeping for an interval)
        replicas = [ActivityTracker(settings, kube, client, clock=lambda: clock[0]) for _ in range(2)]
        for replica in replicas:
            replica.touch(namespace, "vscode-alice", None)
            await replica.flush()
        # Both wrote Redis; only the lease's winner wrote the API server.
        assert [r.redis_writes for r in replicas] == [1, 1]
        assert sum(r.api_writes for r in replicas) == 1
        first = await last_activity(kube, namespace, "vscode-alice")
        assert first is not None
        # Nothing new: nothing written, however often it flushes.
        for replica in replicas:
            await replica.flush()
        assert [r.redis_writes for r in replicas] == [1, 1]
        # More use within the interval: one Redis write when it is due, no API write (leased).
        replicas[0].touch(namespace, "vscode-alice", None)
        await replicas[0].flush()
        assert replicas[0].redis_writes == 1  # not due yet
        clock[0] += 0.25
        await replicas[0].flush()
        assert replicas[0].redis_writes == 2 and sum(r.api_writes for r in replicas) == 1
    finally:
        await client.aclose()


async def test_redis_down_loses_nothing_that_is_written_later(
        kube: KubeClient, namespace: str, world: World, redis_url: str) -> None:
    await world.template("vscode", host=IDE_HOST)
    await world.userland("vscode", "alice")
    settings = gateway_settings(namespace, redis_url, activity_redis_seconds=0.1, activity_api_seconds=0.1)
    dead = aioredis.from_url("redis://127.0.0.1:9", socket_connect_timeout=0.5)
    tracker = ActivityTracker(settings, kube, dead)
    tracker.touch(namespace, "vscode-alice", None)
    await tracker.flush()  # no exception: requests go on being forwarded
    assert (tracker.redis_writes, tracker.api_writes) == (0, 0)
    await dead.aclose()
    tracker.redis = aioredis.from_url(redis_url)
    try:
        await tracker.flush()
        assert (tracker.redis_writes, tracker.api_writes) == (1, 1)
        assert await last_activity(kube, namespace, "vscode-alice") is not None
    finally:
        await tracker.redis.aclose()


VSCODE_FRAMES = golden_vscode_frames()
VSCODE_IDLE = [bytes.fromhex(f["hex"]) for f in VSCODE_FRAMES if not f["counts"]]
VSCODE_TYPING = [bytes.fromhex(f["hex"]) for f in VSCODE_FRAMES if "remoteterminal.$input" in f["what"]]


@pytest.mark.parametrize(("activity", "frames", "counted"), [
    ({"quietFrameBytes": 20}, ["x" * 13, "y" * 20], False),
    ({"quietFrameBytes": 20}, ["typing in the terminal: ls -la"], True),
    # A real VS Code tab's own traffic (tests/proxy/golden/vscode_frames.json), then its typing.
    ({"quietFrameBytes": 26, "webSocketProtocol": "vscode"}, VSCODE_IDLE, False),
    ({"quietFrameBytes": 26, "webSocketProtocol": "vscode"}, VSCODE_IDLE[:3] + VSCODE_TYPING, True),
    # Without the protocol, the same idle tab would count (what the protocol rule is for).
    ({"quietFrameBytes": 26}, VSCODE_IDLE[:3], True),
], ids=["small-frames", "typing", "vscode-idle-tab", "vscode-typing", "vscode-by-size-only"])
async def test_only_the_browsers_own_larger_frames_count(
        world: World, gateway_factory: GatewayFactory, origins: Origins, echo_factory: EchoFactory,
        activity: dict[str, Any], frames: list[str | bytes], counted: bool) -> None:
    echo = await echo_factory("ide")
    body = template_body("vscode", host=IDE_HOST)
    body["spec"]["activity"] = activity
    body["spec"]["idleTimeout"] = "2h"  # without one nothing is tracked (it never sleeps)
    await world.kube.create(TEMPLATES, world.namespace, body)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    await eventually(lambda: routes_of(gw).service(world.namespace, naming.service_name("vscode", "alice")))
    gateway = gw.app[GATEWAY]
    cookie = origin_cookie(await origins.login("alice"))
    async with gw.session.ws_connect(gw.make_url("/ws"), headers={"Host": ALICE_HOST, **cookie,
                                                                  "Origin": f"http://{ALICE_HOST}"}) as ws:
        for frame in frames:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                await ws.send_str(frame)
            await ws.receive(timeout=5)  # the server's answer never counts
        await ws.ping()
    # The flusher (every second) writes the first use of an environment at once.
    if counted:
        await eventually(lambda: gateway.activity.api_writes == 1, timeout=5)
        assert await last_activity(world.kube, world.namespace, "vscode-alice") is not None
    else:
        flushed = gateway.activity.flushes
        await eventually(lambda: gateway.activity.flushes >= flushed + 2)  # it looked, twice
        assert gateway.activity.unwritten == 0 and gateway.activity.api_writes == 0
        assert await last_activity(world.kube, world.namespace, "vscode-alice") is None
