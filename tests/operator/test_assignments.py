"""Assignments end to end: the operator, the local runner running its worker Pods (and the
students' environments), a real git server and the assignment store, on the real control plane.

Real: kube-apiserver, etcd and the controllers; the operator (`Controller`, in this process); the
runner (the kubelet's part: every Pod is a local process, every volume a folder); git's own
http-backend; the store over HTTP. Students' environments are Debian's `python3 -m http.server`
serving their home (the volume), so "running" means a process with the volume in use.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.operator.support import OperatorRunner
from tests.support import MUST_COMPLETE, eventually, free_port
from tests.support.coursework import STORE_SECRET, GitServer, git_server, store_server
from tests.support.runner import running
from userland.local.runner import LocalRunner
from userland.operator.controller import Controller
from userland.platform.clients.kube import (
    ASSIGNMENTS,
    DEPLOYMENTS,
    PODS,
    SECRETS,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    NotFound,
)
from userland.platform.clients.store_client import StoreClient
from userland.platform.model import naming
from userland.platform.model.objects import rfc3339

JSON = dict[str, Any]
LEAD = 8.0  # the operator makes collection Pods this long before a deadline


def template(name: str, *, idle: str | None = None) -> JSON:
    spec: JSON = {
        "displayName": name.title(), "routing": {"host": f"{name}.localhost"}, "port": 8080,
        "storage": {"size": "1Gi", "mountPath": "/home/student"},
        "podSpec": {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
            "containers": [{
                "name": "ide", "image": "lab:1", "command": ["/usr/bin/python3"],
                "args": ["-m", "http.server", "--bind", "0.0.0.0", "8080"], "workingDir": "/home/student",
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}}]},
    }
    if idle is not None:
        spec["idleTimeout"] = idle
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name}, "spec": spec}


def userland(user: str, tpl: str, **spec: Any) -> JSON:
    return {"apiVersion": naming.API_VERSION, "kind": "Userland",
            "metadata": {"name": naming.userland_name(tpl, user)},
            "spec": {"user": user, "template": tpl, **spec}}


@dataclass
class Course:
    kube: KubeClient
    ns: str
    git: GitServer
    store: StoreClient
    runner: LocalRunner
    controller: Controller

    def volume(self, tpl: str, login: str) -> Path:
        return Path(self.runner._claims_root) / self.ns / naming.pvc_name(tpl, login)

    def folder(self, tpl: str, login: str, path: str = "week1") -> Path:
        return self.volume(tpl, login) / path

    async def add(self, *objects: JSON) -> None:
        for obj in objects:
            resource = TEMPLATES if obj["kind"] == "Template" else USERLANDS
            await self.kube.create(resource, self.ns, obj)

    async def assignment(self, name: str = "week1", **spec: Any) -> JSON:
        body = {"apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": name},
                "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1",
                         "source": {"url": self.git.url_of("course"), "ref": "main"}, **spec}}
        return await self.kube.create(ASSIGNMENTS, self.ns, body)

    async def status(self, name: str = "week1") -> JSON:
        return (await self.kube.get(ASSIGNMENTS, self.ns, name)).get("status") or {}

    async def students(self, name: str = "week1") -> dict[str, JSON]:
        return {f"{e['template']}/{e['user']}": e for e in (await self.status(name)).get("students") or []}

    async def uid(self, name: str = "week1") -> str:
        return str((await self.kube.get(ASSIGNMENTS, self.ns, name))["metadata"]["uid"])

    async def states(self, name: str = "week1") -> dict[str, str]:
        return {k: e["state"] for k, e in (await self.students(name)).items()}

    async def workers(self) -> list[JSON]:
        pods = (await self.kube.list(PODS, self.ns, label_selector=naming.LABEL_ASSIGNMENT))["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    async def ready(self, tpl: str, login: str) -> bool:
        obj = await self.kube.get(USERLANDS, self.ns, naming.userland_name(tpl, login))
        return (obj.get("status") or {}).get("phase") == "Ready"


@pytest.fixture
async def course(kube: KubeClient, namespace: str, tmp_path: Path,
                 run_operator: OperatorRunner) -> AsyncIterator[Course]:
    (tmp_path / "run").mkdir()
    async with contextlib.AsyncExitStack() as stack:
        git = await stack.enter_async_context(git_server(tmp_path / "git"))
        store_url = await stack.enter_async_context(store_server(
            tmp_path / "store", git_urls=(git.url + "/", "http://127.0.0.1:9/")))
        runner = await stack.enter_async_context(running(kube, namespace, tmp_path / "run"))
        controller = await stack.enter_async_context(run_operator(settings_extra={
            "store_url": store_url, "store_secret": STORE_SECRET, "collect_lead_seconds": LEAD,
            "assignment_batch": 2}))
        store = StoreClient(store_url, STORE_SECRET, "web")
        stack.push_async_callback(store.close)
        yield Course(kube, namespace, git, store, runner, controller)


STARTER = {"week1/hello.py": "print('hello')\n", "week1/data/points.csv": "1,2\n",
           "week1/run.sh": "#!/bin/sh\n",
           "README.md": "course\n"}


def _figure(course: Course, name: str, **labels: str) -> float | None:
    """One of the operator's exported figures for this course, as a scrape would read it."""
    return course.controller.metrics.registry.get_sample_value(name, {"course": course.ns, **labels})


async def test_hand_out_to_running_asleep_and_suspended_students_and_one_added_later(course: Course) -> None:
    await course.add(template("lab"), template("sleepy", idle="1s"), userland("alice", "lab"),
                     userland("carol", "lab", suspended=True), userland("bob", "sleepy"))
    await eventually(lambda: course.ready("lab", "alice"), timeout=MUST_COMPLETE)
    alice_pod = (await eventually(lambda: course.runner.workers and next(
        (w for k, w in course.runner.workers.items() if k[1].startswith("lab-alice-")), None)))

    async def asleep() -> bool:
        obj = await course.kube.get(USERLANDS, course.ns, "sleepy-bob")
        deployment = await course.kube.get(DEPLOYMENTS, course.ns, "sleepy-bob")
        return (obj.get("status") or {}).get("phase") == "Idle" and deployment["spec"]["replicas"] == 0
    await eventually(asleep, timeout=MUST_COMPLETE)

    commit = course.git.repo("course", STARTER)
    await course.assignment(templates=["lab", "sleepy"],
                            source={"url": course.git.url_of("course"), "subPath": "week1"})
    wanted = {"lab/alice": "HandedOut", "lab/carol": "HandedOut", "sleepy/bob": "HandedOut"}
    await eventually(lambda: _equal(course.states(), wanted), timeout=MUST_COMPLETE)
    for tpl, login in (("lab", "alice"), ("lab", "carol"), ("sleepy", "bob")):
        folder = course.folder(tpl, login)
        assert (folder / "hello.py").read_text() == "print('hello')\n"
        assert (folder / "data" / "points.csv").read_text() == "1,2\n"
        assert (folder / "run.sh").stat().st_mode & 0o111
        assert not (folder / "README.md").exists()  # only the sub-folder
    status = await course.status()
    assert status["source"]["commit"] == commit and status["handedOut"] == "3/3"
    assert status["phase"] == "Open"
    assert (await course.students())["lab/alice"]["commit"] == commit[:12]
    # The operator's figures (what Prometheus scrapes) say the same, by course.
    await eventually(lambda: _figure(course, "userland_assignment_students", state="HandedOut") == 3)
    assert _figure(course, "userland_assignments", phase="Open") == 1
    assert _figure(course, "userland_assignment_students", state="Failed") == 0
    # Nobody was woken or restarted for it.
    assert (await course.kube.get(DEPLOYMENTS, course.ns, "sleepy-bob"))["spec"]["replicas"] == 0
    assert (await course.kube.get(DEPLOYMENTS, course.ns, "lab-carol"))["spec"]["replicas"] == 0
    assert next(w for k, w in course.runner.workers.items() if k[1].startswith("lab-alice-")) is alice_pod
    # The worker Pods are gone once their students' outcomes are in.
    await eventually(lambda: _none(course.workers()), timeout=MUST_COMPLETE)

    # A student added later receives it when their environment is made.
    await course.add(userland("dave", "lab"))
    await eventually(lambda: _equal(course.states(), {**wanted, "lab/dave": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    assert (course.folder("lab", "dave") / "hello.py").exists()


async def test_a_second_commit_keeps_a_students_edit_and_says_so(course: Course) -> None:
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut", "lab/bob": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    (course.folder("lab", "alice") / "hello.py").write_text("print('my answer')\n")
    second = course.git.repo("course", {"week1/hello.py": "print('hello, fixed')\n",
                                        "week1/new.py": "# new\n"}, message="fix")
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_HANDOUT_AT: rfc3339()}}})

    async def handed_again() -> dict[str, JSON] | None:
        students = await course.students()
        done = all(s.get("commit") == second[:12] and s["state"] in ("HandedOut", "Conflicts")
                   for s in students.values())
        return students if done else None
    students = await eventually(handed_again, timeout=MUST_COMPLETE)
    assert students["lab/alice"]["state"] == "Conflicts"
    assert students["lab/alice"]["conflicts"] == [{"path": "hello.py", "kind": "changed"}]
    assert students["lab/bob"]["state"] == "HandedOut"
    assert (course.folder("lab", "alice") / "hello.py").read_text() == "print('my answer')\n"
    assert (course.folder("lab", "alice") / "new.py").read_text() == "# new\n"
    assert (course.folder("lab", "bob") / "hello.py").read_text() == "print('hello, fixed')\n"
    status = await course.status()
    assert status["conditions"][0]["reason"] == "HandedOut"  # conflicts are the students', not failures


async def test_collection_at_the_deadline_and_an_extension(course: Course) -> None:
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    # Handed out with the deadline far ahead, however long the hand-out takes on this machine;
    # then the teacher moves it (and bob's extension) to a few seconds from now: the collection
    # is timed by the deadline itself, not by how fast the hand-out was.
    far = datetime.now(UTC).replace(microsecond=0) + timedelta(days=7)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"}, due=rfc3339(far),
                            extensions={"bob": rfc3339(far + timedelta(seconds=12))})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut", "lab/bob": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD + 12)
    # Bob's own deadline well after alice's copy is taken, however long that takes here.
    extended = due + timedelta(seconds=30)
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"spec": {
        "due": rfc3339(due), "extensions": {"bob": rfc3339(extended)}}})
    alice, bob = course.folder("lab", "alice"), course.folder("lab", "bob")
    # Just before the deadline (the collection Pod is made ahead of it, and waits).
    await _until(due - timedelta(seconds=3))
    assert await course.workers(), "the collection Pod is made before the deadline"
    (alice / "answer.py").write_text("print('on time')\n")
    (bob / "answer.py").write_text("print('on time')\n")
    assert datetime.now(UTC) < due, "the edits took until the deadline: the test needs more time"
    # After it, once alice's copy is taken: her edit is too late; bob has until his own deadline.
    # (The order of events, not a moment of the clock: how soon after the deadline a copy is taken
    # is bench/assignment_bench.py's "lateness", which a loaded machine would stretch.)
    alice_taken = await eventually(lambda: _collected(course, "lab/alice", due), timeout=MUST_COMPLETE)
    (alice / "late.py").write_text("print('too late')\n")
    (bob / "late.py").write_text("print('in his extension')\n")
    assert datetime.now(UTC) < extended, "alice's copy took until bob's deadline: the test needs more time"
    bob_taken = await eventually(lambda: _collected(course, "lab/bob", extended), timeout=MUST_COMPLETE)
    (bob / "later.py").write_text("print('after his extension')\n")
    students = await course.students()
    assert students["lab/alice"]["collected"]["round"] == rfc3339(due)
    # Never before the deadline: the on-time edits are in, whatever came just before it.
    assert alice_taken >= due and bob_taken >= extended
    assert students["lab/bob"]["extended"] is True
    assert (await course.status())["collected"] == "2/2"
    await eventually(lambda: _figure(course, "userland_assignments", phase="Collected") == 1)
    assert _figure(course, "userland_assignment_copies_missing") == 0
    files = await _zip_files(course)
    assert files["alice/answer.py"] == b"print('on time')\n"
    assert "alice/late.py" not in files
    assert files["bob/late.py"] == b"print('in his extension')\n"
    assert "bob/later.py" not in files
    assert files["alice/hello.py"] == b"print('hello')\n"
    assert not [name for name in files if name.endswith(".userland-handout.json")]
    # The copy is kept once: collecting the same deadline again changes nothing.
    receipt = students["lab/alice"]["collected"]
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_COLLECT_NOW: rfc3339(due)}}})  # "collect now" at the very same moment
    await eventually(lambda: _none(course.workers()), timeout=MUST_COMPLETE)
    assert (await course.students())["lab/alice"]["collected"]["sha256"] == receipt["sha256"]


async def test_feedback_and_grades_go_back_into_the_students_folders(course: Course) -> None:
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"},
                            grades={"alice": {"grade": "9/10", "comment": "Clear and tested."}})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut", "lab/bob": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        archive.writestr("alice/review.md", "See line 3.\n")
        archive.writestr("bob/review.md", "Start earlier.\n")
    await course.store.put_feedback(course.ns, "week1", await course.uid(), upload.getvalue())
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {
        "metadata": {"annotations": {naming.ANNOTATION_FEEDBACK_AT: rfc3339()}},
        "spec": {"returnFeedback": True}})

    async def returned() -> bool:
        return all(s.get("feedbackState") == "HandedOut" for s in (await course.students()).values())
    await eventually(returned, timeout=MUST_COMPLETE)
    assert (course.folder("lab", "alice") / "feedback" / "review.md").read_text() == "See line 3.\n"
    assert "**Grade:** 9/10" in (course.folder("lab", "alice") / "feedback" / "FEEDBACK.md").read_text()
    assert (course.folder("lab", "bob") / "feedback" / "review.md").read_text() == "Start earlier.\n"
    # A new grade is feedback to return again.
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"spec": {"grades": {"alice": {
        "grade": "10/10", "comment": "Clear and tested."}}}})
    graded = course.folder("lab", "alice") / "feedback" / "FEEDBACK.md"
    await eventually(lambda: "10/10" in graded.read_text(), timeout=MUST_COMPLETE)


@pytest.mark.parametrize(("case", "reason", "words"), [
    ("unknown ref", "UnknownRef", "has no branch or tag 'nope'"),
    ("unreachable", "Unreachable", "not reachable or not a git repository"),
    ("private without a token", "Unreachable", "spec.source.tokenSecret"),
    ("a token Secret that is not there", "TokenSecretMissing", "no Secret 'course-git'"),
])
async def test_a_source_that_cannot_be_had_is_said_and_nothing_is_written(
        course: Course, case: str, reason: str, words: str) -> None:
    await course.add(template("lab"), userland("alice", "lab"))
    course.git.repo("course", STARTER)
    course.git.repo("private", STARTER)
    source: JSON = {"url": course.git.url_of("course"), "ref": "main"}
    if case == "unknown ref":
        source["ref"] = "nope"
    elif case == "unreachable":
        source["url"] = "http://127.0.0.1:9/course.git"
    elif case == "private without a token":
        source["url"] = course.git.url_of("private")
    else:
        source = {"url": course.git.url_of("private"), "tokenSecret": {"name": "course-git"}}
    await course.assignment(source=source)

    async def said() -> JSON | None:
        status = await course.status()
        ready = next(iter(status.get("conditions") or []), {})
        return status if ready.get("reason") == reason else None
    status = await eventually(said, timeout=MUST_COMPLETE)
    assert words in status["conditions"][0]["message"]
    assert status["phase"] == "Failed"
    assert not course.folder("lab", "alice").exists()


async def test_a_private_repository_with_its_token_and_links_left_out(course: Course) -> None:
    from tests.support.coursework import GIT_TOKEN
    await course.add(template("lab"), userland("alice", "lab"))
    course.git.repo("private", {"a.py": "a\n", "escape": "->../../../etc/passwd"})
    token = base64.b64encode(GIT_TOKEN.encode()).decode()
    secret = {"metadata": {"name": "course-git", "annotations": {
        naming.ANNOTATION_GIT_URLS: course.git.url_of("private")}}, "data": {"token": token}}
    await course.kube.create(SECRETS, course.ns, secret)
    await course.assignment(source={"url": course.git.url_of("private"),
                                    "tokenSecret": {"name": "course-git"}})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)
    assert (course.folder("lab", "alice") / "a.py").read_text() == "a\n"
    assert not (course.folder("lab", "alice") / "escape").exists()
    problems = (await course.status())["problems"]
    assert any("escape" in p and "outside the assignment's folder" in p for p in problems)
    # The token reached no Pod (the store fetched; worker Pods only read the store).
    for pod in (await course.kube.list(PODS, course.ns))["items"]:
        assert GIT_TOKEN not in str(pod["spec"])


async def test_a_submodule_in_the_source_is_said_in_the_status(course: Course) -> None:
    """A submodule's files are not in git's archive: the assignment's status says it is left
    out (it was left out without a word), and the rest is handed out (issue 25)."""
    from tests.support.coursework import add_submodule
    await course.add(template("lab"), userland("alice", "lab"))
    commit = course.git.repo("withsub", {"a.py": "a\n"})
    add_submodule(course.git, "withsub", "vendored", commit)
    await course.assignment(source={"url": course.git.url_of("withsub"), "ref": "main"})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)
    handed = sorted(p.name for p in course.folder("lab", "alice").iterdir())
    assert handed == [".userland-handout.json", "a.py"], handed
    problems = (await course.status())["problems"]
    assert any(p.startswith("vendored: a submodule") for p in problems), problems


async def test_a_token_goes_only_to_the_urls_its_secret_lists(course: Course) -> None:
    """Whoever may write an Assignment names a Secret of the namespace in tokenSecret and points
    the source at a host they control: the token must not be sent there. A Secret is used only
    for the URLs its annotation userland.dev/git-urls lists; the Assignment says how to fix it."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from tests.support.coursework import GIT_TOKEN
    asked: list[str] = []

    async def catch(request: web.Request) -> web.Response:
        asked.append(request.headers.get("Authorization", ""))
        return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", catch)
    thief = TestServer(app, host="127.0.0.1")
    await thief.start_server()
    try:
        await course.add(template("lab"), userland("alice", "lab"))
        course.git.repo("private", STARTER)
        token = base64.b64encode(GIT_TOKEN.encode()).decode()
        await course.kube.create(SECRETS, course.ns, {"metadata": {"name": "course-git"},
                                                      "data": {"token": token}})
        await course.assignment(source={"url": str(thief.make_url("/stolen.git")),
                                        "tokenSecret": {"name": "course-git"}})

        async def said() -> JSON | None:
            ready = next(iter((await course.status()).get("conditions") or []), {})
            return ready if ready.get("reason") == "TokenNotAllowed" else None
        ready = await eventually(said, timeout=MUST_COMPLETE)
        assert naming.ANNOTATION_GIT_URLS in ready["message"]
        assert "kubectl annotate secret" in ready["message"]
        # Allowed for the course's own host only: the thief's host still gets nothing.
        await course.kube.merge_patch(SECRETS, course.ns, "course-git", {"metadata": {"annotations": {
            naming.ANNOTATION_GIT_URLS: course.git.url + "/"}}})

        async def listed() -> JSON | None:
            ready = await said()
            return ready if ready is not None and "its annotation" in ready["message"] else None
        ready = await eventually(listed, timeout=MUST_COMPLETE)
        assert course.git.url in ready["message"]
        assert not any(GIT_TOKEN in a or token in a or a.startswith("Basic") for a in asked), asked
        # The course's own repository, which the Secret lists, gets it.
        await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"spec": {"source": {
            "url": course.git.url_of("private")}}})
        await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)
        for pod in (await course.kube.list(PODS, course.ns))["items"]:
            assert GIT_TOKEN not in str(pod["spec"])
    finally:
        await thief.close()


async def test_a_store_that_is_down_is_said_and_the_work_waits_for_it(
        kube: KubeClient, namespace: str, tmp_path: Path, run_operator: OperatorRunner) -> None:
    """The store not answering yet (starting, or restarting) holds hand-outs back, says so, and
    the operator tries again by itself, sooner than for a source that cannot be had."""
    port = free_port()
    (tmp_path / "run").mkdir()
    async with contextlib.AsyncExitStack() as stack:
        git = await stack.enter_async_context(git_server(tmp_path / "git"))
        runner = await stack.enter_async_context(running(kube, namespace, tmp_path / "run"))
        controller = await stack.enter_async_context(run_operator(settings_extra={
            "store_url": f"http://127.0.0.1:{port}", "store_secret": STORE_SECRET}))
        store = StoreClient(f"http://127.0.0.1:{port}", STORE_SECRET, "web")
        stack.push_async_callback(store.close)
        course = Course(kube, namespace, git, store, runner, controller)
        await course.add(template("lab"), userland("alice", "lab"))
        course.git.repo("course", STARTER)
        await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"})

        async def said() -> bool:
            ready = next(iter((await course.status()).get("conditions") or []), {})
            return ready.get("reason") == "StoreUnavailable"
        await eventually(said, timeout=MUST_COMPLETE)
        await stack.enter_async_context(store_server(tmp_path / "store", port=port,
                                                     git_urls=(git.url + "/",)))
        await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)


async def test_a_student_cannot_reach_another_students_folder_through_the_shared_worker_pod(
        course: Course) -> None:
    """alice and bob are in one worker Pod (a batch): alice links her folder to bob's volume (the
    path the Pod sees it at). Neither a hand-out nor her copy follows the links."""
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut", "lab/bob": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    alice, bob = course.folder("lab", "alice"), course.folder("lab", "bob")
    (bob / "private").mkdir()
    (bob / "private" / "secret.py").write_text("bob's answer\n")
    (alice / "answers").symlink_to(bob / "private")
    (alice / "stolen.py").symlink_to(bob / "private" / "secret.py")
    (alice / "hello.py").unlink()
    (alice / "hello.py").symlink_to(bob / "private" / "secret.py")
    second = course.git.repo("course", {"week1/answers/key.py": "# key\n",
                                        "week1/hello.py": "print('hello, v2')\n"}, message="v2")
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_HANDOUT_AT: rfc3339(), naming.ANNOTATION_COLLECT_NOW: rfc3339()}}})

    async def done() -> dict[str, JSON] | None:
        students = await course.students()
        finished = all(s.get("commit") == second[:12] and "collected" in s for s in students.values())
        return students if finished else None
    students = await eventually(done, timeout=MUST_COMPLETE)
    assert {(c["path"], c["kind"]) for c in students["lab/alice"]["conflicts"]} == {
        ("answers/key.py", "blocked"), ("hello.py", "blocked")}
    assert sorted(p.name for p in (bob / "private").iterdir()) == ["secret.py"]  # nothing of alice's
    assert (bob / "private" / "secret.py").read_text() == "bob's answer\n"
    assert (bob / "hello.py").read_text() == "print('hello, v2')\n"  # his own update
    assert (bob / "answers" / "key.py").read_text() == "# key\n"
    files = await _zip_files(course)
    assert not [name for name in files if name.startswith("alice/") and (
        "secret" in name or name.startswith(("alice/answers", "alice/stolen", "alice/hello")))]
    assert b"bob's answer" not in b"".join(v for k, v in files.items() if k.startswith("alice/"))


async def test_a_recreated_assignment_serves_only_its_own_copies(course: Course) -> None:
    """week1 is collected from alice and bob, deleted, and made again for alice only (a course
    reused next term): the class zip holds alice's new copy and nothing of the deleted one's
    (bob's copy was in it, and `bob/README.md` twice when the Templates changed)."""
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut", "lab/bob": "HandedOut"}),
                     timeout=MUST_COMPLETE)
    (course.folder("lab", "alice") / "answer.py").write_text("last term's alice\n")
    (course.folder("lab", "bob") / "answer.py").write_text("last term's bob\n")
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_COLLECT_NOW: rfc3339()}}})

    async def collected(wanted: set[str]) -> bool:
        students = await course.students()
        return set(students) == wanted and all("collected" in s for s in students.values())
    await eventually(lambda: collected({"lab/alice", "lab/bob"}), timeout=MUST_COMPLETE)
    old = await course.uid()
    assert "bob/answer.py" in await _zip_files(course)
    await course.kube.delete(ASSIGNMENTS, course.ns, "week1")

    async def gone() -> bool:
        try:
            await course.kube.get(ASSIGNMENTS, course.ns, "week1")
        except NotFound:
            return True
        return False
    await eventually(gone, timeout=MUST_COMPLETE)
    (course.folder("lab", "alice") / "answer.py").write_text("this term's alice\n")
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"},
                            students=["alice"])
    assert await course.uid() != old
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"metadata": {"annotations": {
        naming.ANNOTATION_COLLECT_NOW: rfc3339()}}})
    await eventually(lambda: collected({"lab/alice"}), timeout=MUST_COMPLETE)
    files = await _zip_files(course)
    assert files["alice/answer.py"] == b"this term's alice\n"
    assert not [name for name in files if not name.startswith("alice/")], sorted(files)
    # The deleted assignment's files are gone from the store (retention 0 here).
    assert (await course.store.state(course.ns, "week1", old))["copies"] == {}


# ----- helpers -----

async def _equal(value: Any, wanted: Any) -> bool:
    return bool(await value == wanted)


async def _none(value: Any) -> bool:
    return not await value


async def _collected(course: Course, student: str, round_: datetime) -> datetime | None:
    """When `student`'s copy of the round of `round_` was taken, once it is."""
    collected = (await course.students()).get(student, {}).get("collected") or {}
    if collected.get("round") != rfc3339(round_):
        return None
    return datetime.fromisoformat(str(collected["takenAt"]).replace("Z", "+00:00"))


async def _until(moment: datetime) -> None:
    """Wait for a moment of the wall clock (what a deadline is): the test's subject is time itself."""
    while (left := (moment - datetime.now(UTC)).total_seconds()) > 0:  # noqa: ASYNC110
        await asyncio.sleep(min(left, 0.5))


async def _zip_files(course: Course) -> dict[str, bytes]:
    response = await course.store.open_zip(course.ns, "week1", await course.uid())
    try:
        data = await response.read()
    finally:
        response.release()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


# ----- issue 24: assignments that tell the truth -----

async def test_a_due_date_in_the_past_collects_what_each_student_received(course: Course) -> None:
    """Applied with kubectl, due long ago: each copy waits for that student's hand-out, holds the
    files they received (never an empty folder), and is not "late" (the moment had passed when
    the assignment was made)."""
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"},
                            due="2020-01-01T09:00:00Z")

    async def collected() -> dict[str, JSON] | None:
        students = await course.students()
        return students if len(students) == 2 and all("collected" in s for s in students.values()) else None
    students = await eventually(collected, timeout=MUST_COMPLETE)
    for entry in students.values():
        copy = entry["collected"]
        assert entry["state"] == "HandedOut"
        assert copy["files"] == 3 and copy["late"] is False and copy["pastDue"] is True, copy
        assert copy["takenAt"] >= entry["handedOutAt"]  # after the files were there (RFC 3339 sorts)
    files = await _zip_files(course)
    assert files["alice/hello.py"] == b"print('hello')\n" and files["bob/data/points.csv"] == b"1,2\n"
    status = await course.status()
    assert status["collected"] == "2/2" and not status.get("emptyCopies")
    assert status["conditions"][0]["reason"] == "Collected"


async def test_a_source_that_cannot_be_had_fails_each_student_and_the_figure_counts_them(
        course: Course) -> None:
    await course.add(template("lab"), userland("alice", "lab"), userland("bob", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "ref": "no-such-branch"})

    async def failed() -> dict[str, JSON] | None:
        students = await course.students()
        return students if len(students) == 2 and all(s["state"] == "Failed" for s in students.values()) \
            else None
    students = await eventually(failed, timeout=MUST_COMPLETE)
    assert students["lab/alice"]["reason"].startswith("the repository cannot be read: the repository has "
                                                      "no branch or tag 'no-such-branch'")
    # What UserlandAssignmentHandOutFailing counts (tests/observability/rules/assignments.test.yaml).
    await eventually(lambda: _figure(course, "userland_assignment_students", state="Failed") == 2)
    assert not _figure(course, "userland_assignment_students", state="Pending")


async def test_received_files_stay_handed_out_when_a_later_fetch_fails(course: Course) -> None:
    """`make run`'s case: the repository's address changed and the new one cannot be read; the
    students still have the files, and the status says so."""
    await course.add(template("lab"), userland("alice", "lab"))
    course.git.repo("course", STARTER)
    await course.assignment(source={"url": course.git.url_of("course"), "subPath": "week1"})
    await eventually(lambda: _equal(course.states(), {"lab/alice": "HandedOut"}), timeout=MUST_COMPLETE)
    await course.kube.merge_patch(ASSIGNMENTS, course.ns, "week1", {"spec": {"source": {
        "url": "http://127.0.0.1:9/course.git"}}})

    async def unreachable() -> JSON | None:
        status = await course.status()
        return status if status["conditions"][0]["reason"] == "Unreachable" else None
    status = await eventually(unreachable, timeout=MUST_COMPLETE)
    assert status["handedOut"] == "1/1"
    assert [s["state"] for s in status["students"]] == ["HandedOut"]
    assert (course.folder("lab", "alice") / "hello.py").read_text() == "print('hello')\n"
