"""A student's "my environments" page in each state, in plain words (no cluster or platform words).

Real: the web UI (`create_app`) with its watches on the real API server, a real Redis, and the
Userland statuses the operator's own code (operator/rules/status.py, operator/rules/route_conflicts.py)
writes for each situation, with the cluster's own messages in them; Warning Events as the
cluster posts them for a Deployment's pods. The student must read none of those words.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.jargon import jargon_in, visible_text
from tests.web.support import make_course
from tests.web.test_course_pages import eventually_page, headers, settings
from userland.operator.rules.route_conflicts import RouteConflicts
from userland.operator.rules.status import Problem, userland_status
from userland.platform.clients.kube import EVENTS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland
from userland.web.app import create_app

Client = TestClient[web.Request, web.Application]
NOW = "2026-11-23T09:00:00Z"
STUCK = {"status": {"conditions": [{"type": "Progressing", "status": "False",
                                    "reason": "ProgressDeadlineExceeded",
                                    "message": 'ReplicaSet "x-5d8f" has timed out progressing.'}]}}

# template name -> (display name, what the student reads about it)
CASES = {
    "start": ("Demo environment", "Starting. It is starting."),
    "ready": ("VS Code", "Ready to use. Open it and start working."),
    "pause": ("JupyterLab", "Paused by your course staff."),
    "stuck": ("Database", "It did not start in time. It cannot start right now."),
    "refused": ("Notebook", "Its setup has a mistake. It cannot start right now."),
    "clash": ("Python", "Another app of your course was given the same address."),
    "pulls": ("R Studio", "Its software cannot be downloaded. It cannot start right now."),
    "quota": ("Terminal", "Your course has no room left for it right now."),
    "sleep": ("Editor", "Asleep after a while without use; it wakes when opened."),
    "gone": ("gone", "Your course has not finished setting it up."),
    # The operator's contract (issue 16): a final Pod reason or a bounded wait makes it Failed at
    # once, with the Pod's reason as the Ready condition's reason and a message in words.
    "noprog": ("Notebook 2", "Its program is not installed here. It cannot start"),
    "slow": ("Slow app", "It did not start in time. It cannot start"),
    "crash": ("Crasher", "It keeps stopping as it starts."),
    # Suspended on purpose while its Template is missing: paused, not "waiting".
    "held": ("held", "Suspended Paused by your course staff."),
}
FAILED = {"noprog": ("ProgramNotInstalled", "code-server is not installed here: run `make local-apps`"),
          "slow": ("StartTimeout", "not ready after 10 minutes"),
          "crash": ("CrashLoopBackOff", "back-off 5m0s restarting failed container")}
MISSING = ("gone", "held")


def template_body(name: str, display: str) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
            "spec": {"displayName": display, "routing": {"host": f"{name}.example.edu"}, "port": 8080,
                     "podSpec": {"containers": [{"name": "main", "image": "example/app:1"}]}}}


def status_for(case: str, template: dict[str, Any] | None, namespace: str) -> dict[str, Any]:
    """What the operator writes for alice's Userland of this case's Template."""
    if case in FAILED:
        reason, message = FAILED[case]
        return {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                                                   "message": message, "lastTransitionTime": NOW}]}
    userland = Userland.from_object({"metadata": {"name": f"{case}-alice", "namespace": namespace,
                                                  "generation": 1},
                                     "spec": {"user": "alice", "template": case,
                                              "suspended": case in ("pause", "held")}})
    parsed = Template.from_object(template) if template is not None else None
    deployment: Any = None
    problem: Problem | None = None
    if case == "ready":
        deployment = {"status": {"availableReplicas": 1}}
    elif case == "stuck":
        deployment = STUCK
    elif case == "refused":
        problem = Problem("InvalidPodSpec", 'the API server refused it: Deployment.apps "x" is invalid: '
                          "spec.template.spec.containers[0].image: Required value")
    elif case == "clash":
        conflicts = RouteConflicts("userland.example.edu")
        older = template_body("older", "Older")
        older["metadata"].update(namespace=namespace, creationTimestamp="2026-01-01T00:00:00Z")
        mine = {**template_body("clash", "Python")}
        mine["metadata"] = {"name": "clash", "namespace": namespace, "creationTimestamp": NOW}
        mine["spec"]["routing"] = {"host": "older.example.edu"}
        conflicts.recompute([older, mine])
        problem = conflicts.userland_problem(namespace, "clash", "Python")
    elif case in MISSING:
        problem = Problem("TemplateNotFound", f"Template '{case}' not found in namespace '{namespace}'; it "
                          "will start when the Template is created", phase="Pending")
    status = userland_status(userland, parsed, deployment, problem, public_url="http://userland.test",
                             now=NOW)
    if case == "sleep":  # what an idle environment's status says (scaled to zero)
        status["phase"] = "Idle"
        status["conditions"][0].update(reason="Idle", message="scaled to 0 replicas after 2h without use")
    return status


def warning(namespace: str, kind: str, name: str, reason: str, message: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{name}.{reason.lower()}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
            "type": "Warning", "reason": reason, "message": message, "count": 1,
            "firstTimestamp": NOW, "lastTimestamp": NOW}


@pytest.fixture
async def client(aiohttp_client: Callable[[web.Application], Awaitable[Client]], kube: KubeClient,
                 redis_url: str, namespace: str) -> AsyncIterator[Client]:
    await make_course(kube, namespace, title="CS 101")
    for case, (display, _) in CASES.items():
        template = None
        if case not in MISSING:
            template = await kube.create(TEMPLATES, namespace, template_body(case, display))
        await kube.create(USERLANDS, namespace, {
            "apiVersion": naming.API_VERSION, "kind": "Userland", "metadata": {"name": f"{case}-alice"},
            "spec": {"user": "alice", "template": case, "suspended": case in ("pause", "held")}})
        await kube.merge_patch(USERLANDS, namespace, f"{case}-alice",
                               {"status": status_for(case, template, namespace)}, subresource="status")
    await kube.create(EVENTS, namespace, warning(namespace, "Pod", "pulls-alice-5d8f9c-x7k2p", "Failed",
                                                 'Failed to pull image "example/app:1": not found'))
    await kube.create(EVENTS, namespace, warning(
        namespace, "ReplicaSet", "quota-alice-5d8f9c", "FailedCreate",
        'pods "quota-alice-5d8f9c-x" is forbidden: exceeded quota: compute, requested: memory=2Gi'))
    conn = redis.asyncio.Redis.from_url(redis_url)
    test_client = await aiohttp_client(create_app(settings(redis_url), kube=kube, redis_client=conn))
    deadline = time.monotonic() + 20
    while (await test_client.get("/healthz")).status != 200:
        assert time.monotonic() < deadline, "healthz never became ready"
    yield test_client
    # The app first (its help monitor and sessions use the connection until it stops), then the
    # connection: closed under a running app, the monitor's channel broke and the app's cleanup
    # could hang until pytest's timeout on a loaded machine.
    await test_client.close()
    await conn.aclose()


async def test_my_environments_in_every_state_are_in_plain_words(client: Client) -> None:
    body = await eventually_page(client, "/me", headers("alice"), "Your course has no room left")
    for case, (display, words) in CASES.items():
        item = re.search(rf'<li class="env" id="env-{case}-alice">(.*?)</li>', body, re.DOTALL)
        assert item is not None, case
        text = visible_text(item.group(1))
        assert display in text and words in text, (case, text)
        if case in FAILED:  # never "Starting", whatever the Pod still says
            assert f"{display} Failed for" in text, text
    assert jargon_in(body) == [], visible_text(body)
