"""A student signs in through the gateway (fake GitHub) and their own real Pod answers, over
HTTP and WebSocket, at the Service's ClusterIP (this node has no DNS); their storage survives
deleting and re-adding them."""

from __future__ import annotations

import json
import secrets
from typing import Any

import aiohttp

from tests.cluster.conftest import (
    COURSE,
    PUBLIC_URL,
    Platform,
    browse,
    browser,
    kubectl,
    origin,
    ready_userland,
    sign_in,
    student_pods,
    wait_until,
)


async def test_a_student_signs_in_and_their_own_pod_answers(platform: Platform, student_pod: dict[str, Any]
                                                            ) -> None:
    async with browser(platform.gateway_ip) as client:
        response = await sign_in(client, platform.github, "alice", origin("alice") + "/whoami")
        assert response.status == 200, await response.text()
        assert str(response.url) == origin("alice") + "/whoami"
        seen = await response.json()
        # Her own Pod, which received the identity the gateway signed.
        assert seen == {"owner": "alice", "x_user": "alice", "signed": True,
                        "pod": student_pod["metadata"]["name"]}
        # A WebSocket through the gateway, with the Origin a browser sends.
        async with client.ws_connect(origin("alice") + "/ws", origin=origin("alice")) as ws:
            for text in ("hello", "from", "alice"):
                await ws.send_str(text)
                assert (await ws.receive(timeout=10)).data == text


async def test_a_student_never_reaches_another_students_pod(platform: Platform, student_pod: dict[str, Any]
                                                            ) -> None:
    ready_userland("bob")
    async with browser(platform.gateway_ip) as client:
        response = await sign_in(client, platform.github, "bob", origin("bob") + "/whoami")
        assert (await response.json())["owner"] == "bob"
        # Bob at Alice's origin: the gateway refuses (her Pod never sees the request).
        other = await client.get(origin("alice") + "/whoami", max_redirects=15)
        assert other.status == 403
        assert '"owner"' not in await other.text()


async def test_someone_outside_the_allowed_orgs_gets_nothing(platform: Platform) -> None:
    async with browser(platform.gateway_ip) as client:
        response = await sign_in(client, platform.github, "mallory", origin("mallory") + "/whoami")
        assert response.status == 403
        assert not [c for c in client.cookie_jar if c.key.endswith("userland_session")]


async def _put_and_get(client: aiohttp.ClientSession, login: str, name: str, body: str | None) -> str | int:
    url = f"{origin(login)}/files/{name}"
    if body is not None:
        put = await client.put(url, data=body, headers={"Origin": origin(login)})
        assert put.status == 201, await put.text()
    got = await browse(client, url)  # just re-added: its Service may route a moment later
    return await got.text() if got.status == 200 else got.status


async def test_storage_survives_deleting_and_re_adding_the_student(platform: Platform) -> None:
    ready_userland("carol")
    secret_text = f"carol's work {secrets.token_hex(8)}"
    async with browser(platform.gateway_ip) as client:
        await sign_in(client, platform.github, "carol", origin("carol") + "/whoami")
        assert await _put_and_get(client, "carol", "notes.txt", secret_text) == secret_text
        claim = json.loads(kubectl("-n", COURSE, "get", "pvc", "testenv-carol-data", "-o", "json"))
        volume = claim["spec"]["volumeName"]

        kubectl("-n", COURSE, "delete", "userland", "testenv-carol", "--wait=true")
        wait_until(lambda: not student_pods("carol"), "carol's Pod gone", timeout=120)
        # The Template's reclaimPolicy is Retain: the claim (and its volume) stay.
        kept = json.loads(kubectl("-n", COURSE, "get", "pvc", "testenv-carol-data", "-o", "json"))
        assert kept["spec"]["volumeName"] == volume

        pod = ready_userland("carol")
        assert pod["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] == "testenv-carol-data"
        assert await _put_and_get(client, "carol", "notes.txt", None) == secret_text


async def test_the_platform_host_serves_the_web_ui_through_the_gateway(platform: Platform) -> None:
    async with browser(platform.gateway_ip) as client:
        # The platform host shows a sign-in link to visitors; following it is the sign-in.
        response = await sign_in(client, platform.github, "dave", PUBLIC_URL + "/auth/login?next=/me")
        assert response.status == 200
        assert "dave" in await response.text()

