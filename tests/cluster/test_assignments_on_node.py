"""Assignments on the real node: the assignment store in its own Pod (deploy/store.yaml, on its
own volume, without an API token), a private repository fetched by it with the token the operator
read from a Secret (the operator's RBAC, checked by the API server), worker Pods that the real
kubelet runs with students' real volumes mounted (a running student's and a suspended one's), a
copy collected from each, and the instructor's zip through the gateway and the web UI's Pod."""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.cluster.conftest import (
    COURSE,
    GIT_PORT,
    INSTRUCTOR,
    NODE,
    PUBLIC_URL,
    SYSTEM,
    Platform,
    browser,
    eventually,
    kubectl,
    kubectl_json,
    ready_userland,
    sign_in,
    student_pods,
    userland,
    wait_until,
)
from userland.local.gitserver import create_git_app, make_repository
from userland.platform.model import naming
from userland.platform.model.objects import rfc3339

TOKEN = secrets.token_hex(16)
NAME = "week1"
FILES = {"hello.py": 'print("hello")\n', "data/points.csv": "x,y\n1,2\n"}
UID = 1000  # the test Template's runAsUser


class ThreadedGit:
    """git's http-backend (local/gitserver.py) on the node's address, on a loop of its own, so the
    store's Pod can fetch from it whichever test's loop runs; `private.git` needs TOKEN."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = GIT_PORT  # the one the store may fetch from (conftest.py)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="git-server", daemon=True)
        self.thread.start()
        self.runner = web.AppRunner(create_git_app(root, {"private.git": TOKEN}), access_log=None)
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, NODE.ip, self.port).start()

    def url_of(self, name: str) -> str:
        return f"http://{NODE.ip}:{self.port}/{name}.git"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedGit]:
    server = ThreadedGit(tmp_path_factory.mktemp("git"))
    yield server
    server.close()


def folder_of(login: str) -> Path:
    """The assignment's folder in `login`'s volume, on this node (a hostPath PersistentVolume)."""
    claim = kubectl_json("-n", COURSE, "get", "pvc", naming.pvc_name("testenv", login))
    volume = kubectl_json("get", "pv", claim["spec"]["volumeName"])
    return Path(volume["spec"]["hostPath"]["path"]) / NAME


def status() -> dict[str, Any]:
    return kubectl_json("-n", COURSE, "get", "assignment", NAME).get("status") or {}


def worker_pods() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl_json("-n", COURSE, "get", "pods", "-l",
                                               f"{naming.LABEL_ASSIGNMENT}={NAME}")["items"]
    return items


async def test_hand_out_collect_and_download_on_the_node(platform: Platform, git: ThreadedGit) -> None:
    commit = make_repository(git.root, "private", FILES)
    # ivy runs; jack is suspended (his volume is written while he has no Pod).
    ivy = ready_userland("ivy")
    kubectl("apply", "-f", "-", stdin=json.dumps({**userland("jack"), "spec": {
        "user": "jack", "template": "testenv", "suspended": True}}))
    wait_until(lambda: kubectl_json("-n", COURSE, "get", "pvc", naming.pvc_name("testenv", "jack"))
               .get("status", {}).get("phase") == "Bound", "jack's volume bound")
    kubectl("-n", COURSE, "create", "secret", "generic", "course-github", f"--from-literal=token={TOKEN}")
    kubectl("-n", COURSE, "annotate", "secret", "course-github",
            f"{naming.ANNOTATION_GIT_URLS}={git.url_of('private')}")
    kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": naming.API_VERSION, "kind": "Assignment",
        "metadata": {"name": NAME, "namespace": COURSE},
        "spec": {"title": "Week 1", "templates": ["testenv"], "path": NAME, "students": ["ivy", "jack"],
                 "source": {"url": git.url_of("private"), "ref": "main",
                            "tokenSecret": {"name": "course-github", "key": "token"}},
                 "due": rfc3339(time.time() + 7 * 86400)}}))

    # Handed out: fetched once by the store's Pod with the token, written by worker Pods that
    # the kubelet ran as the Template's user, with each student's own volume mounted.
    wait_until(lambda: status().get("handedOut") == "2/2", "both students have the files", timeout=300)
    for login in ("ivy", "jack"):
        folder = folder_of(login)
        assert {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*")
                if p.is_file() and p.name != ".userland-handout.json"} == FILES, login
        assert {p.stat().st_uid for p in folder.rglob("*")} == {UID}, login
    rows = {s["user"]: s for s in status()["students"]}
    assert rows["ivy"]["commit"] == rows["jack"]["commit"] == commit[:12]
    # Nobody's environment was restarted or woken for it.
    (pod,) = student_pods("ivy")
    assert pod["metadata"]["uid"] == ivy["metadata"]["uid"]
    assert all(s["restartCount"] == 0 for s in pod["status"]["containerStatuses"])
    assert student_pods("jack") == []
    # The token reached git in the store's Pod only: no Pod, Event or status carries it.
    for kind in ("pods", "events", "assignments"):
        assert TOKEN not in kubectl("-n", COURSE, "get", kind, "-o", "json"), kind
    assert TOKEN not in kubectl("-n", SYSTEM, "get", "pods", "-o", "json")
    # Done worker Pods are removed once the store has their outcome.
    wait_until(lambda: worker_pods() == [], "the hand-out's worker Pods removed", timeout=120)

    # ivy works on it; then the instructor collects now.
    answer = folder_of("ivy") / "answer.md"
    answer.write_text("# ivy's answer\n")
    os.chown(answer, UID, UID)
    kubectl("-n", COURSE, "annotate", "assignment", NAME, f"{naming.ANNOTATION_COLLECT_NOW}={rfc3339()}",
            "--overwrite")
    wait_until(lambda: status().get("collected") == "2/2", "both copies taken", timeout=300)

    # The instructor's zip, through the gateway and the web UI's Pod, from the store's Pod.
    async with browser(platform.gateway_ip) as client:
        page = f"{PUBLIC_URL}/courses/{COURSE}/assignments/{NAME}"
        await sign_in(client, platform.github, INSTRUCTOR, f"{PUBLIC_URL}/auth/login?next={page}")

        # (A web UI that started before the course was set up reads it within its probe interval.)
        async def page_shown() -> bool:
            response = await client.get(page)
            return response.status == 200 and "ivy" in await response.text()
        await eventually(page_shown, "the assignment's page", timeout=90, interval=2)
        response = await client.get(f"{page}/collected.zip")
        body = await response.read()
        assert response.status == 200, body[:2000]
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        got = {n: archive.read(n).decode() for n in archive.namelist()}
    assert got == {**{f"ivy/{k}": v for k, v in FILES.items()}, "ivy/answer.md": "# ivy's answer\n",
                   **{f"jack/{k}": v for k, v in FILES.items()}}
    # The copies are on the store's own volume.
    copies = (NODE.state / "volumes" / "store").rglob(f"assignments/{COURSE}/{NAME}/*/copies/*/testenv/*.tar")
    assert sorted(c.name for c in copies) == ["ivy.tar", "jack.tar"]

    # The store's Pod has no API token; its account may do nothing.
    (store,) = [p for p in kubectl_json("-n", SYSTEM, "get", "pods", "-l",
                                        "app.kubernetes.io/name=userland-store")["items"]
                if not p["metadata"].get("deletionTimestamp")]
    assert store["spec"]["automountServiceAccountToken"] is False
    assert all(m["mountPath"] != "/var/run/secrets/kubernetes.io/serviceaccount"
               for m in store["spec"]["containers"][0].get("volumeMounts") or [])
    who = f"system:serviceaccount:{SYSTEM}:userland-store"
    assert kubectl("auth", "can-i", "get", "pods", "-n", COURSE, f"--as={who}", check=False).strip() == "no"

    kubectl("-n", COURSE, "delete", "assignment", NAME, "--wait=true")
    kubectl("-n", COURSE, "delete", "userland", "testenv-ivy", "testenv-jack", "--wait=true")
    kubectl("-n", COURSE, "delete", "secret", "course-github")
