"""Sleep and wake end to end, as `make run` runs it: the real control plane, operator, gateway,
Redis and the local runner, students in real HTTP clients, an environment with a 1-minute idle
timeout. At once, for four students:

- alice does nothing after opening it: it sleeps after a minute;
- bob types into a WebSocket every few seconds: it stays awake;
- carol's tab only polls (a path the Template lists as background): it sleeps all the same;
- dave's tab only receives (the server pushes on a WebSocket): it sleeps all the same;

then alice opens it again: the waking page (200) with the steps, and then her environment, at
the address she asked for. A WebSocket to dave's sleeping environment is closed with 4503.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import free_port
from tests.support.make_run import HTML, browser, sign_in, userland_local
from userland.platform.clients.kube import DEPLOYMENTS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.platform.model.models import parse_time
from userland.proxy.websocket import CLOSE_NOT_RUNNING

# The test starts `userland local` itself (tests/support/make_run.py), not through a fixture.
pytestmark = pytest.mark.make_run

NAMESPACE = "classroom"
STUDENTS = ("alice", "bob", "carol", "dave")
IDLE = 60
__all__ = ["sign_in"]  # bench/sleep_bench.py imports it from here


async def phase(kube: KubeClient, name: str) -> str:
    return str(((await kube.get(USERLANDS, NAMESPACE, name)).get("status") or {}).get("phase") or "")


@pytest.fixture
async def platform(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    port = free_port()
    os.chmod(tmp_path, 0o755)
    state_dir = tmp_path / "state"
    async with userland_local(port, state_dir, "--students", "teacher"):
        yield port, state_dir


async def napper_template(kube: KubeClient) -> None:
    """The demo environment with a 1-minute idle timeout and a background path."""
    demo = await kube.get(TEMPLATES, NAMESPACE, "demo")
    spec: dict[str, Any] = {**demo["spec"], "displayName": "Napper", "routing": {"host": "napper.localhost"},
                            "idleTimeout": "1m",
                            "activity": {"backgroundPaths": ["/poll*"], "quietFrameBytes": 8}}
    await kube.create(TEMPLATES, NAMESPACE, {"apiVersion": "userland.dev/v1alpha1", "kind": "Template",
                                             "metadata": {"name": "napper"}, "spec": spec})
    for login in STUDENTS:
        await kube.create(USERLANDS, NAMESPACE, {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
                                                 "metadata": {"name": f"napper-{login}"},
                                                 "spec": {"user": login, "template": "napper"}})


def origin(login: str, port: int) -> str:
    return f"http://{login}.napper.localhost:{port}"


async def until(check: Any, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := await check():
            return result
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


@pytest.mark.slow
async def test_environments_sleep_when_unused_and_wake_on_the_next_visit(platform: tuple[int, Path]) -> None:
    port, state_dir = platform
    async with await KubeClient.connect(str(state_dir / "kubeconfig")) as kube:
        await napper_template(kube)
        for login in STUDENTS:
            await until(lambda login=login: _is(phase(kube, f"napper-{login}"), "Ready"),
                        f"{login} ready", 120)
        sessions = {login: browser() for login in STUDENTS}
        try:
            for login, http in sessions.items():
                page = await sign_in(http, port, login, origin(login, port) + "/")
                assert page.status == 200 and page.url.host == f"{login}.napper.localhost", await page.text()
            started, started_at = time.monotonic(), datetime.now(UTC)
            stop = asyncio.Event()

            async def bob_types() -> int:
                sent = 0
                async with sessions["bob"].ws_connect(origin("bob", port) + "/ws",
                                                      origin=origin("bob", port)) as ws:
                    while not stop.is_set():
                        await ws.send_str(f"keystrokes number {sent}")
                        await ws.receive(timeout=10)
                        sent += 1
                        await asyncio.sleep(5)
                return sent

            async def carol_polls() -> int:
                polls = 0
                while not stop.is_set():
                    async with sessions["carol"].get(origin("carol", port) + "/poll/status") as response:
                        polls += response.status == 200
                    await asyncio.sleep(5)
                return polls

            async def dave_receives() -> str:
                async with sessions["dave"].ws_connect(origin("dave", port) + "/clock",
                                                       origin=origin("dave", port)) as ws:
                    async for message in ws:
                        if message.type is not aiohttp.WSMsgType.TEXT:
                            break
                return "closed"  # its environment went to sleep: the connection ends, never hangs

            tasks = [asyncio.create_task(bob_types()), asyncio.create_task(carol_polls()),
                     asyncio.create_task(dave_receives())]
            for login in ("alice", "carol", "dave"):
                await until(lambda login=login: _is(phase(kube, f"napper-{login}"), "Idle"),
                            f"{login} asleep", IDLE + 60)
            slept_after = time.monotonic() - started
            assert slept_after >= IDLE - 5, slept_after  # not before its minute was up
            # Bob has kept typing all along: once his use is on record well past the minute in
            # which he would have slept without it, he is awake.
            past_his_minute = started_at + timedelta(seconds=IDLE + 15)
            await until(lambda: _used_since(kube, "napper-bob", past_his_minute),
                        "bob's typing on record past his idle timeout", IDLE + 60)
            assert await phase(kube, "napper-bob") == "Ready"
            assert (await kube.get(DEPLOYMENTS, NAMESPACE, "napper-alice"))["spec"]["replicas"] == 0
            assert await asyncio.wait_for(tasks[2], 30) == "closed"
            stop.set()
            bob_sent, carol_polled = await asyncio.gather(*tasks[:2])
            assert bob_sent >= 14 and carol_polled >= 10, (bob_sent, carol_polled)

            # A WebSocket to a sleeping environment: closed at once with 4503, and it stays asleep.
            async with sessions["dave"].ws_connect(origin("dave", port) + "/clock",
                                                   origin=origin("dave", port)) as ws:
                closed = await ws.receive(timeout=5)
                assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == CLOSE_NOT_RUNNING
            assert await phase(kube, "napper-dave") == "Idle"

            # Alice comes back: the waking page at once, then her environment at her address.
            woken = time.monotonic()
            async with sessions["alice"].get(origin("alice", port) + "/notes/today", headers=HTML) as page:
                text = await page.text()
                assert page.status == 200 and "Waking up your Napper" in text, text
                assert str(page.url) == origin("alice", port) + "/notes/today"

            async def her_environment() -> str | None:
                url = origin("alice", port) + "/notes/today"
                async with sessions["alice"].get(url, headers=HTML) as page:
                    body = await page.text()
                    assert page.status == 200, body
                    return body if "Waking up" not in body and "Starting" not in body else None

            body = await until(her_environment, "alice's environment answering", 60)
            assert "alice" in body and "/notes/today" in body
            print(f"\nasleep after {slept_after:.0f} s; woke in {time.monotonic() - woken:.1f} s")
        finally:
            for http in sessions.values():
                await http.close()


async def _used_since(kube: KubeClient, name: str, moment: datetime) -> bool:
    """Whether the gateway has written `name`'s use at `moment` or later."""
    annotations = (await kube.get(USERLANDS, NAMESPACE, name))["metadata"].get("annotations") or {}
    used = parse_time(annotations.get(naming.ANNOTATION_LAST_ACTIVITY))
    return used is not None and used >= moment


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)
