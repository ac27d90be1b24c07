"""The development login can never reach a deployment (issue 7 part 3).

Real: the `userland gateway` command as a subprocess (it must refuse to start before touching
anything), and the auth routes served on every address of this machine, reached once through
loopback and once through the machine's own non-loopback address.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from aiohttp import web
from authflow import create_test_app

from tests.support import free_port
from userland.auth.dev_login import refusal as dev_login_refusal
from userland.platform.clients.sessions import RedisSessionStore
from userland.platform.model.addresses import is_loopback_host
from userland.platform.model.settings import Settings

LOCAL_OK = {
    "USERLAND_DEV_LOGIN": "true", "USERLAND_COOKIE_SECURE": "false",
    "USERLAND_PUBLIC_URL": "http://localhost:8000", "USERLAND_IDENTITY_SECRET": "x" * 40,
    "USERLAND_REDIS_URL": "redis://127.0.0.1:9/0",
}

REFUSED = [
    ({"USERLAND_GITHUB_CLIENT_ID": "real-app", "USERLAND_GITHUB_CLIENT_SECRET": "real-secret"},
     "127.0.0.1:0", "GitHub credentials"),
    ({"USERLAND_GITHUB_CLIENT_ID": "real-app"}, "127.0.0.1:0", "GitHub credentials"),
    ({}, "0.0.0.0:0", "loopback"),
    ({}, "[::]:0", "loopback"),
    ({}, "192.0.2.2:0", "loopback"),
    ({"USERLAND_PUBLIC_URL": "https://userland.example.edu"}, "127.0.0.1:0", "https"),
    ({"USERLAND_COOKIE_SECURE": "true"}, "127.0.0.1:0", "COOKIE_SECURE"),
]


@pytest.mark.parametrize(("extra", "listen", "reason"), REFUSED)
def test_gateway_refuses_to_start_with_the_dev_login_outside_a_local_setup(
        extra: dict[str, str], listen: str, reason: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("USERLAND_")}
    env.update(LOCAL_OK)
    env.update(extra)
    result = subprocess.run([sys.executable, "-m", "userland.cli.main", "gateway", "--listen", listen],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "refusing to start" in result.stderr and reason in result.stderr
    assert "Traceback" not in result.stderr


def test_refusal_rules_as_a_pure_function() -> None:
    local = Settings.from_env(LOCAL_OK)
    assert dev_login_refusal(local, "127.0.0.1") is None
    assert dev_login_refusal(local, "localhost") is None
    assert dev_login_refusal(local, "::1") is None
    assert dev_login_refusal(Settings(), "0.0.0.0") is None  # dev login off: nothing to refuse
    assert not is_loopback_host("") and not is_loopback_host("10.0.0.1") and is_loopback_host("127.8.0.1")


def _non_loopback_address() -> str:
    """One of this machine's own addresses that is not loopback (the route to a public one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.123", 9))  # no packet is sent for a UDP connect
            address = str(sock.getsockname()[0])
        except OSError:
            address = ""
    if not address or is_loopback_host(address):
        pytest.fail("this machine has no non-loopback IPv4 address to test from")
    return address


@pytest.fixture
async def served_on_all_addresses(auth_redis: redis.asyncio.Redis) -> AsyncIterator[int]:
    port = free_port()
    settings = Settings(dev_login=True, cookie_secure=False, public_url=f"http://127.0.0.1:{port}",
                        session_ttl_seconds=3600)
    app = create_test_app(settings, redis=auth_redis, store=RedisSessionStore(auth_redis, 3600))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def test_dev_login_answers_only_loopback_clients(served_on_all_addresses: int) -> None:
    port = served_on_all_addresses
    address = _non_loopback_address()
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        local = await http.get(f"http://127.0.0.1:{port}/auth/dev-login")
        assert local.status == 200 and 'name="login"' in await local.text()
        remote: Any = await http.get(f"http://{address}:{port}/auth/dev-login")
        assert remote.status == 404
        remote = await http.post(f"http://{address}:{port}/auth/dev-login",
                                 data={"state": "x", "login": "admin"}, allow_redirects=False)
        assert remote.status == 404
        assert "Set-Cookie" not in remote.headers
