"""`userland gateway` as a real subprocess: SIGTERM drains instead of dropping connections."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import WSMsgType

from tests.support import eventually
from userland.local.controlplane import ControlPlane, free_port

from .conftest import PUBLIC_URL, SECRET, EchoFactory, Origins, World

IDE_HOST = "ide.test"
GRACE = 4


async def refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    return False


@pytest.mark.slow
async def test_sigterm_keeps_websockets_for_the_grace_period_then_closes_with_1001(
        world: World, echo_factory: EchoFactory, origins: Origins, control_plane: ControlPlane,
        namespace: str, redis_url: str, tmp_path: Path) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    cookie = {"Cookie": f"userland_origin={await origins.login('alice')}", "Host": f"alice.{IDE_HOST}",
              "Origin": f"http://alice.{IDE_HOST}"}
    port, internal = free_port(), free_port()
    env = {**os.environ, "USERLAND_IDENTITY_SECRET": SECRET, "USERLAND_PUBLIC_URL": PUBLIC_URL,
           "USERLAND_REDIS_URL": redis_url, "USERLAND_NAMESPACES": namespace,
           "USERLAND_UPSTREAM_MODE": "local", "USERLAND_COOKIE_SECURE": "false",
           "USERLAND_INTERNAL_LISTEN": f"127.0.0.1:{internal}"}
    log = (tmp_path / "gateway.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "userland"), "gateway", "--listen", f"127.0.0.1:{port}",
        "--kubeconfig", str(control_plane.kubeconfig), "--grace", str(GRACE),
        env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def healthy() -> bool:
                try:
                    async with http.get(f"http://127.0.0.1:{internal}/healthz") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            deadline = time.monotonic() + 60
            while not await healthy():
                assert process.returncode is None, (tmp_path / "gateway.log").read_text()
                assert time.monotonic() < deadline, "gateway did not become healthy"
                await asyncio.sleep(0.2)

            ws = await http.ws_connect(f"{base}/ws", headers=cookie)
            await ws.send_str("before")
            assert (await ws.receive()).data == "upstream:before"
            slow = asyncio.create_task(http.get(f"{base}/slow?seconds=1.5", headers=cookie))
            await eventually(lambda: any(r["path_qs"].startswith("/slow") for r in echo.requests))

            process.send_signal(signal.SIGTERM)
            # new connections are refused while the WebSocket and the slow request go on
            deadline = time.monotonic() + GRACE
            # (the internal listener too: the readiness probe fails, the pod leaves the Service)
            while not (await refused(port) and await refused(internal)):
                assert time.monotonic() < deadline, "gateway still accepts connections"
                await asyncio.sleep(0.05)
            await ws.send_str("after-sigterm")
            assert (await ws.receive()).data == "upstream:after-sigterm"
            response = await slow
            assert (response.status, await response.text()) == (200, "slow done")
            await ws.send_str("still-there")
            assert (await ws.receive()).data == "upstream:still-there"

            msg = await ws.receive(timeout=GRACE + 10)  # the gateway closes it after the grace period
            assert msg.type is WSMsgType.CLOSE
            assert msg.data == 1001
        assert await asyncio.wait_for(process.wait(), 30) == 0
        await eventually(lambda: echo.ws_closes)
        assert echo.ws_closes == [1001]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        log.close()
