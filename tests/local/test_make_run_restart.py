"""`make run` started again on the same state folder keeps what was there: everyone stays signed
in (Redis keeps its data in the state folder), a Template the user changed with kubectl is kept
(and the banner says so), and an environment that went to sleep stays asleep.

Real: everything, as in test_make_run.py: the command twice on one state folder, each with its
own control plane processes, Redis, operator, web UI, gateway and runner; sign-in through the
development login; the Template changed through the API server as kubectl would.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support import eventually, free_port
from tests.support.make_run import HTML, browser, dev_login, userland_local
from userland.platform.clients.kube import DEPLOYMENTS, TEMPLATES, USERLANDS, KubeClient

pytestmark = pytest.mark.make_run

NAMESPACE = "classroom"


async def _phase(kube: KubeClient, name: str) -> str:
    return str(((await kube.get(USERLANDS, NAMESPACE, name)).get("status") or {}).get("phase") or "")


@pytest.mark.slow
async def test_a_restart_keeps_sign_ins_a_changed_template_and_sleeping_environments(tmp_path: Path) -> None:
    port = free_port()
    os.chmod(tmp_path, 0o755)
    state_dir = tmp_path / "state"
    no_apps = tmp_path / "no-apps"  # the demo only: quicker, and nothing else to wait for
    no_apps.mkdir()
    env = {**os.environ, "USERLAND_APPS_BIN": str(no_apps)}
    kubeconfig = str(state_dir / "kubeconfig")
    alice = f"http://alice.demo.localhost:{port}/"
    async with browser() as http:
        args = ("--students", "alice,bob", "--idle", "20s")
        async with userland_local(port, state_dir, *args, env=env) as banner:
            assert "Sleep       every example Template's environments sleep after 20s unused" in banner
            response = await dev_login(http, port, "alice")
            async with response:
                assert response.status == 200 and str(response.url) == alice
            async with await KubeClient.connect(kubeconfig) as kube:
                demo = await kube.get(TEMPLATES, NAMESPACE, "demo")
                assert demo["spec"]["idleTimeout"] == "20s"
                # The user tries a longer idle time with kubectl.
                await kube.merge_patch(TEMPLATES, NAMESPACE, "demo", {"spec": {"idleTimeout": "25s"}})
                # alice goes to sleep (nobody uses her environment).
                async def asleep() -> bool:
                    return await _phase(kube, "demo-alice") == "Idle"
                await eventually(asleep, timeout=120)

        started = time.monotonic()
        async with userland_local(port, state_dir, *args, env=env) as banner:
            # The banner comes without waiting for alice to wake (she is asleep: settled).
            print(f"\nsecond start to the banner: {time.monotonic() - started:.1f} s")
            assert "Templates   demo kept as changed here" in banner, banner
            async with await KubeClient.connect(kubeconfig) as kube:
                assert (await kube.get(TEMPLATES, NAMESPACE, "demo"))["spec"]["idleTimeout"] == "25s"
                # Still asleep: nothing woke her (the Template was not reverted under her).
                assert await _phase(kube, "demo-alice") == "Idle"
                deployment = await kube.get(DEPLOYMENTS, NAMESPACE, "demo-alice")
                assert deployment["spec"]["replicas"] == 0
            # Still signed in: her address opens (waking her environment) without the login form.
            async with http.get(alice, headers=HTML) as page:
                assert page.url.path != "/auth/dev-login", page.url
                assert page.status == 200
                assert "alice" in await page.text()
