"""The demo environment as an aiohttp app (in-process test server, nothing faked)."""

from __future__ import annotations

from typing import Any

import aiohttp

from userland.local.demo_env import create_app


async def test_page_shows_owner_x_user_signature_and_path(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app("alice", "demo"))
    response = await client.get("/demo/some/page", headers={"X-User": "alice", "X-User-Signature": "s"})
    assert response.status == 200
    body = await response.text()
    assert 'X-User: <code id="x-user">alice</code>' in body
    assert '<td id="signature">present</td>' in body
    assert '<code id="path">/demo/some/page</code>' in body
    assert "not the owner" not in body


async def test_page_warns_without_identity_and_escapes(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app("bob", "demo"))
    body = await (await client.get("/")).text()
    assert "(missing)" in body and "did not come through the gateway" in body
    assert '<td id="signature"><span class="warn">missing</span></td>' in body
    other = await (await client.get("/", headers={"X-User": "<b>eve</b>"})).text()
    assert "&lt;b&gt;eve&lt;/b&gt;" in other and "<b>eve</b>" not in other
    assert "not the owner of this environment" in other


async def test_websocket_echo_under_a_prefix(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app("alice", "demo"))
    async with client.ws_connect("/demo/ws") as ws:
        await ws.send_str("hello")
        assert (await ws.receive_str()) == "hello"
        await ws.send_bytes(b"\x00\x01")
        message = await ws.receive()
        assert message.type == aiohttp.WSMsgType.BINARY and message.data == b"\x00\x01"


async def test_page_script_uses_relative_websocket_url(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app("alice", "demo"))
    body = await (await client.get("/demo/")).text()
    assert 'new URL("ws", window.location.href)' in body
    assert 'href="/' not in body and 'src="/' not in body and 'action="/' not in body
