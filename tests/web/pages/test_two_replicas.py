"""Two web UI replicas side by side (deploy/web.yaml runs 2): no per-user state lives in one.

Each replica is the project's `create_app` with its own watches and HTTP server, both on the same
real control plane (as the web UI's ServiceAccount) and the same real Redis. A form rendered by
one replica is accepted by the other (stateless CSRF tokens), a student added through one shows
up on the other's dashboard (its own watch), and the other's audit page lists the action.
"""

from __future__ import annotations

import asyncio
import re
import time

from tests.web.pages.support import INSTRUCTOR, AppFactory, make_course, make_template
from userland.platform.clients.kube import KubeClient


async def test_a_form_from_one_replica_works_on_the_other_and_both_show_the_result(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace, title="Two replicas")
    await make_template(kube, namespace, "vscode")
    first, second = (await web_ui())(INSTRUCTOR), (await web_ui())(INSTRUCTOR)
    assert first.client is not second.client

    status, form = await first.get(f"/courses/{namespace}/add")
    assert status == 200
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token, form
    status, page = await second.post(f"/courses/{namespace}/add", {"login": "dave", "template": "vscode"},
                                     csrf=token.group(1))
    assert status == 200, page
    assert "Created" in page

    deadline = time.monotonic() + 10
    while True:  # the first replica learns it from its own watch
        status, dashboard = await first.get(f"/courses/{namespace}")
        if 'id="student-dave"' in dashboard:
            break
        assert time.monotonic() < deadline, "the other replica never showed the new student"
        await asyncio.sleep(0.05)
    status, audit = await first.get(f"/courses/{namespace}/audit")
    assert status == 200 and "dave" in audit and INSTRUCTOR in audit
