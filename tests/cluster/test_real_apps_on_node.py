"""The shipped Templates as real containers: their images built from deploy/images/Dockerfile
(the recipe `make local-apps` runs), started by the real kubelet with the shipped probes,
security contexts and limits, and used through the gateway the way a browser does: a
JupyterLab kernel computes over its WebSocket, code-server serves its workbench, phpMyAdmin is
logged into the student's own MariaDB; and a student's files survive being removed and
re-added."""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp

from tests.cluster.conftest import (
    COURSE,
    GATEWAY_PORT,
    Platform,
    browse,
    browser,
    kubectl,
    ready_userland,
    sign_in,
    student_pods,
    wait_until,
)

# The example Templates' hosts (deploy/course, deploy/examples): a student's origin is
# LOGIN.HOST; the test's resolver sends every such name to the gateway's Service.
HOSTS = {"vscode": "ide.example.edu", "jupyterlab": "jupyter.example.edu", "mariadb": "pma.example.edu"}
STARTUP = 300  # seconds: a first start initialises a database, and three apps share two cores


def app_origin(login: str, template: str) -> str:
    return f"http://{login}.{HOSTS[template]}:{GATEWAY_PORT}"


def _xsrf(client: aiohttp.ClientSession) -> dict[str, str]:
    """What JupyterLab's page sends with each write: its _xsrf cookie, echoed in a header."""
    token = next((c.value for c in client.cookie_jar if c.key == "_xsrf"), "")
    return {"X-XSRFToken": token} if token else {}


def execute_request(code: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    message = {"header": {"msg_id": msg_id, "username": "student", "session": uuid.uuid4().hex,
                          "msg_type": "execute_request", "version": "5.3",
                          "date": datetime.now(UTC).isoformat()},
               "parent_header": {}, "metadata": {}, "channel": "shell",
               "content": {"code": code, "silent": False, "store_history": True,
                           "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}
    return msg_id, json.dumps(message)


async def _run_in_kernel(client: aiohttp.ClientSession, base: str, code: str) -> str:
    created = await client.post(f"{base}/api/kernels", json={"name": "python3"},
                                headers={"Origin": base, **_xsrf(client)})
    assert created.status == 201, await created.text()
    kernel = (await created.json())["id"]
    async with client.ws_connect(f"{base}/api/kernels/{kernel}/channels", origin=base) as ws:
        msg_id, request = execute_request(code)
        await ws.send_str(request)
        while True:
            message = json.loads((await ws.receive(timeout=60)).data)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "execute_result":
                return str(message["content"]["data"]["text/plain"])
            assert message["msg_type"] != "error", message["content"]


async def test_jupyterlab_computes_over_its_kernel_websocket_and_keeps_files(platform: Platform) -> None:
    ready_userland("dana", "jupyterlab", timeout=STARTUP)
    base = app_origin("dana", "jupyterlab")
    work = f"dana's notebook {secrets.token_hex(6)}"
    async with browser(platform.gateway_ip) as client:
        lab = await sign_in(client, platform.github, "dana", f"{base}/lab")
        assert lab.status == 200 and "JupyterLab" in await lab.text()
        assert await _run_in_kernel(client, base, "6*7") == "42"
        # The kernel runs as the Template's unprivileged user, in the student's folder.
        assert await _run_in_kernel(client, base, "import os; (os.getuid(), os.getcwd())") == (
            "(1000, '/home/jovyan')")
        saved = await client.put(f"{base}/api/contents/notes.txt", headers={"Origin": base, **_xsrf(client)},
                                 json={"type": "file", "format": "text", "content": work})
        assert saved.status in (200, 201), await saved.text()

        kubectl("-n", COURSE, "delete", "userland", "jupyterlab-dana", "--wait=true")
        wait_until(lambda: not student_pods("dana", "jupyterlab"), "dana's Pod gone", timeout=120)
        ready_userland("dana", "jupyterlab", timeout=STARTUP)
        again = await browse(client, f"{base}/api/contents/notes.txt", headers={"Accept": "application/json"})
        assert again.status == 200, await again.text()
        assert (await again.json())["content"] == work


async def test_code_server_serves_its_workbench(platform: Platform) -> None:
    pod: dict[str, Any] = ready_userland("erik", "vscode", timeout=STARTUP)
    base = app_origin("erik", "vscode")
    async with browser(platform.gateway_ip) as client:
        page = await sign_in(client, platform.github, "erik", f"{base}/?folder=/home/coder")
        text = await page.text()
        assert page.status == 200, text[:500]
        assert "vscode-workbench-web-configuration" in text or "workbench" in text, text[:500]
        health = await client.get(f"{base}/healthz", headers={"Accept": "application/json"})
        assert health.status == 200 and (await health.json())["status"] in ("alive", "expired")
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "localhost/userland-vscode:1"


async def test_phpmyadmin_is_logged_into_the_students_own_database(platform: Platform) -> None:
    ready_userland("fiona", "mariadb", timeout=STARTUP)
    base = app_origin("fiona", "mariadb")
    async with browser(platform.gateway_ip) as client:
        home = await sign_in(client, platform.github, "fiona", f"{base}/")
        assert home.status == 200, (await home.text())[:500]
        listing = await client.get(f"{base}/index.php?route=/server/databases")
        text = await listing.text()
        assert listing.status == 200, text[:500]
        # Her own database, and nothing of anyone else's server (each student has their own).
        assert 'data-filter-row="FIONA"' in text or ">fiona<" in text, text[-2000:]
        assert "Access denied" not in text
