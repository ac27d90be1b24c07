"""Replicas on a real node: the operator's leader Pod killed (a live replica takes over), and a
rolling update of the gateway with students' WebSockets open (none dropped before the grace
period the gateway promises on SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from tests.cluster.conftest import (
    SYSTEM,
    NodeHosts,
    Platform,
    browser,
    eventually,
    kubectl,
    kubectl_json,
    origin,
    ready_userland,
    sign_in,
)

GATEWAY_GRACE_SECONDS = 30  # `userland gateway --grace`'s default (proxy/server.py)


def running_pods(component: str) -> list[dict[str, Any]]:
    pods = kubectl_json("-n", SYSTEM, "get", "pods", "-l", f"app.kubernetes.io/name={component}")["items"]
    return [p for p in pods
            if not p["metadata"].get("deletionTimestamp") and p["status"]["phase"] == "Running"]


def lease_holder() -> str:
    lease = kubectl_json("-n", SYSTEM, "get", "lease", "userland-operator")
    return str(lease["spec"].get("holderIdentity") or "")


def pod_of(identity: str) -> str:
    # The operator's identity is "<hostname>-<pid>"; a Pod's hostname is its name.
    return identity.rsplit("-", 1)[0]


async def test_killing_the_operator_leader_hands_the_lease_to_a_live_replica(platform: Platform) -> None:
    pods = sorted(p["metadata"]["name"] for p in running_pods("userland-operator"))
    assert len(pods) == 2
    leader = pod_of(lease_holder())
    assert leader in pods
    kubectl("-n", SYSTEM, "delete", "pod", leader, "--wait=false")

    # The leader releases the Lease on SIGTERM, so either the replica that was waiting or the
    # one the ReplicaSet starts in its place may win it: what matters is that a live replica
    # other than the killed one leads (seen on CI: the fresh replica won the race).
    async def handed_over() -> bool:
        holder = pod_of(lease_holder())
        live = {p["metadata"]["name"] for p in running_pods("userland-operator")}
        return holder != leader and holder in live

    await eventually(handed_over, "another live operator replica holds the Lease", timeout=90)
    # The new leader reconciles: a student added now gets a Pod.
    ready_userland("frank")

    async def two_replicas() -> bool:
        return len(running_pods("userland-operator")) == 2

    await eventually(two_replicas, "two operator replicas again", timeout=120)


@dataclass
class Socket:
    pod: str
    ws: aiohttp.ClientWebSocketResponse
    echoes: int = 0
    closed_at: float | None = None
    close_code: int | None = None
    error: str = ""
    log: list[str] = field(default_factory=list)


async def keep_talking(socket: Socket) -> None:
    """An echo every half second until the connection ends; when it ends, and how."""
    i = 0
    try:
        while True:
            i += 1
            await socket.ws.send_str(f"ping {i}")
            msg = await socket.ws.receive(timeout=10)
            if msg.type != aiohttp.WSMsgType.TEXT:
                socket.close_code = socket.ws.close_code
                break
            assert msg.data == f"ping {i}"
            socket.echoes += 1
            await asyncio.sleep(0.5)
    except (aiohttp.ClientError, ConnectionError, RuntimeError, TimeoutError) as err:
        socket.closed_at = time.monotonic()
        socket.error = repr(err)
        # A ping sent just as the server closed fails; its close frame is already here.
        try:
            msg = await socket.ws.receive(timeout=2)
            socket.close_code = msg.data if msg.type == aiohttp.WSMsgType.CLOSE else socket.ws.close_code
        except (aiohttp.ClientError, ConnectionError, RuntimeError, TimeoutError):
            socket.close_code = socket.ws.close_code
        return
    socket.closed_at = time.monotonic()


async def test_a_rolling_update_of_the_gateway_keeps_open_websockets(platform: Platform) -> None:
    ready_userland("alice")
    async with browser(platform.gateway_ip) as client:
        await sign_in(client, platform.github, "alice", origin("alice") + "/whoami")
        cookies = client.cookie_jar.filter_cookies(URL(origin("alice")))
    cookie_header = "; ".join(f"{k}={m.value}" for k, m in cookies.items())
    old = {p["metadata"]["name"]: p["status"]["podIP"] for p in running_pods("userland-gateway")}
    assert len(old) == 2
    # Three WebSockets held by each old gateway Pod (connected to the Pod itself, so it is
    # known which Pod holds which; through the Service it is the same, by conntrack).
    sessions, sockets = [], []
    for name, ip in old.items():
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=NodeHosts(ip)),
                                        cookie_jar=aiohttp.DummyCookieJar())
        sessions.append(session)
        for _ in range(3):
            ws = await session.ws_connect(origin("alice") + "/ws", origin=origin("alice"),
                                          headers={"Cookie": cookie_header}, heartbeat=None)
            sockets.append(Socket(pod=name, ws=ws))
    talkers = [asyncio.create_task(keep_talking(s)) for s in sockets]
    try:
        await asyncio.sleep(2)
        assert all(s.echoes > 0 and s.closed_at is None for s in sockets), [s.error for s in sockets]
        kubectl("-n", SYSTEM, "rollout", "restart", "deployment/userland-gateway")
        # When each old Pod is told to stop (its deletion is its SIGTERM).
        terminated: dict[str, float] = {}
        deadline = time.monotonic() + 240
        while len(terminated) < len(old) and time.monotonic() < deadline:
            for pod in kubectl_json("-n", SYSTEM, "get", "pods", "-l",
                                    "app.kubernetes.io/name=userland-gateway")["items"]:
                name = pod["metadata"]["name"]
                if name in old and name not in terminated and pod["metadata"].get("deletionTimestamp"):
                    terminated[name] = time.monotonic()
            await asyncio.sleep(0.5)
        assert set(terminated) == set(old), f"old gateway Pods never terminated: {terminated}"
        # Every socket lives through the grace period, then ends when its Pod is done.
        await asyncio.wait_for(asyncio.gather(*talkers), timeout=GATEWAY_GRACE_SECONDS + 60)
    finally:
        for task in talkers:
            task.cancel()
        for socket in sockets:
            await socket.ws.close()
        for session in sessions:
            await session.close()
    lived = {id(s): (s.closed_at or time.monotonic()) - terminated[s.pod] for s in sockets}
    report = [{"pod": s.pod, "lived_after_sigterm_s": round(lived[id(s)], 1), "close_code": s.close_code,
               "echoes": s.echoes, "error": s.error} for s in sockets]
    print(json.dumps({"gateway_rollout": report}))
    # Polling sees a deletion up to a second late: 2 s of slack below the promised grace.
    assert all(v >= GATEWAY_GRACE_SECONDS - 2 for v in lived.values()), report
    # Closed as "going away" (1001) by the draining gateway, not cut.
    assert all(s.close_code == 1001 for s in sockets), report
    kubectl("-n", SYSTEM, "rollout", "status", "deployment/userland-gateway", "--timeout=180s")
    # New connections reach the new Pods through the Service.
    async with browser(platform.gateway_ip) as client:
        await sign_in(client, platform.github, "alice", origin("alice") + "/whoami")
        async with client.ws_connect(origin("alice") + "/ws", origin=origin("alice")) as ws:
            await ws.send_str("after the update")
            assert (await ws.receive(timeout=10)).data == "after the update"
