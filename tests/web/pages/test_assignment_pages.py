"""The assignment pages of the web UI: the form, the list, the live table, the actions, the
streamed feedback upload and zip download, the CSV, /me's receipts, and who may do what.

Real: the web UI over HTTP as its own ServiceAccount (deploy/rbac/ and the course's RoleBinding),
the control plane, Redis, and the assignment store over HTTP (copies put there by the worker's
own code). The operator is not running: statuses are written as it writes them.
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.coursework import STORE_SECRET, GitServer, git_server, store_server
from tests.web.pages.support import (
    ASSISTANT,
    INSTRUCTOR,
    AppFactory,
    Browserless,
    headers,
    make_course,
)
from userland.coursework.worker import run
from userland.platform.clients.kube import ASSIGNMENTS, TEMPLATES, KubeClient
from userland.platform.model import naming
from userland.platform.model.coursework import Job, JobScope, Member, job_token

JSON = dict[str, Any]
DUE = "2026-12-07T23:59:00Z"
ROUND = "20261207T235900Z"


@pytest.fixture
async def git(tmp_path: Path) -> AsyncIterator[GitServer]:
    """A real git server with `w.git` (branch main): the form checks the repository it names."""
    async with git_server(tmp_path / "git") as server:
        server.repo("w", {"hello.py": "print('hello')\n"})
        yield server


@pytest.fixture
async def store_url(tmp_path: Path, git: GitServer) -> AsyncIterator[str]:
    """The store, fetching (and checking) only from `git` (USERLAND_STORE_GIT_URLS)."""
    async with store_server(tmp_path / "store", git_urls=(git.url + "/",)) as url:
        yield url


async def lab(kube: KubeClient, namespace: str) -> None:
    await kube.create(TEMPLATES, namespace, {
        "apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": "lab"},
        "spec": {"displayName": "JupyterLab", "routing": {"host": "lab.example.edu"}, "port": 8888,
                 "storage": {"size": "1Gi", "mountPath": "/home/jovyan"},
                 "podSpec": {"containers": [{"name": "lab", "image": "lab:1"}]}}})


async def teacher_in(kube: KubeClient, namespace: str, web_ui: AppFactory, store: str) -> Any:
    await make_course(kube, namespace, title="Python 101")
    await lab(kube, namespace)
    return await web_ui(settings_extra={"store_url": store, "store_secret": STORE_SECRET})


async def wait_cached(user: Browserless, path: str, text: str) -> str:
    deadline = time.monotonic() + 10
    while True:
        status, page = await user.get(path)
        if status == 200 and text in page:
            return page
        assert time.monotonic() < deadline, (status, page[:2000])
        await __import__("asyncio").sleep(0.05)


# Due in the future (a due date in the past is refused unless "collect what they have now").
FORM = {"title": "Week 1: Python basics", "templates": "lab", "url": "https://git.example.edu/c/w.git",
        "ref": "main", "path": "week1", "due": "2036-12-08T00:59", "zone": "Europe/Berlin"}


async def test_a_teacher_creates_an_assignment_and_every_bad_field_is_said(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, git: GitServer) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    teacher = as_user(INSTRUCTOR)
    form = {**FORM, "url": git.url_of("w")}
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments/new", "New assignment")
    assert 'name="templates" value="lab"' in page and "JupyterLab" in page
    for field, value, words in (("path", "../escape", "may not contain &#39;..&#39;"),
                                ("url", "git@github.com:c/w.git", "must be an https:// (or http://) address"),
                                ("due", "tomorrow", "is not a date and time"),
                                ("templates", "nope", "no environment &#39;nope&#39;")):
        status, page = await teacher.post(f"/courses/{namespace}/assignments", {**form, field: value})
        assert status == 400 and words in page and "Nothing was saved" in page, (field, page[:3000])
    assert (await kube.list(ASSIGNMENTS, namespace))["items"] == []
    status, _ = await teacher.post(f"/courses/{namespace}/assignments", form)
    assert status == 303
    created = await kube.get(ASSIGNMENTS, namespace, "week-1-python-basics")
    assert created["spec"]["due"] == "2036-12-07T23:59:00Z"  # 00:59 in Berlin is 23:59 UTC
    assert created["spec"]["templates"] == ["lab"] and created["spec"]["path"] == "week1"
    status, page = await teacher.post(f"/courses/{namespace}/assignments", form)
    assert status == 409 and "already has an assignment called" in page
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments", "Week 1: Python basics")
    audit = await wait_cached(teacher, f"/courses/{namespace}/audit", "Created an assignment")
    assert "Week 1: Python basics" in audit


async def test_who_may_see_and_do_what(kube: KubeClient, namespace: str, web_ui: AppFactory,
                                       store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body())
    assistant, student = as_user(ASSISTANT), as_user("alice")
    page = await wait_cached(assistant, f"/courses/{namespace}/assignments/week1", "Week 1")
    assert "Download every copy" in page and "Upload feedback" in page
    assert "Collect now" not in page  # assistants grade; the instructor hands out and collects
    status, page = await assistant.post(f"/courses/{namespace}/assignments/week1/actions",
                                        {"action": "collect"})
    assert status == 403 and "cannot act on assignments" in page
    for path in (f"/courses/{namespace}/assignments", f"/courses/{namespace}/assignments/week1",
                 f"/courses/{namespace}/assignments/week1/collected.zip"):
        status, page = await student.get(path)
        assert status == 404 and "No such course" in page, path
    # A form without its token, or from another site, changes nothing.
    teacher = as_user(INSTRUCTOR)
    for csrf, origin in ((None, None), ("", "https://evil.example")):
        status, _ = await teacher.post(f"/courses/{namespace}/assignments/week1/actions",
                                       {"action": "collect"},
                                       csrf=csrf, **({"origin": origin} if origin else {}))
        assert status == 403
    annotations = (await kube.get(ASSIGNMENTS, namespace, "week1"))["metadata"].get("annotations") or {}
    assert naming.ANNOTATION_COLLECT_NOW not in annotations


def assignment_body(**spec: Any) -> JSON:
    return {"apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": "week1"},
            "spec": {"title": "Week 1", "templates": ["lab"], "path": "week1", "due": DUE,
                     "source": {"url": "https://git.example.edu/c/w.git"}, **spec}}


async def write_status(kube: KubeClient, namespace: str, students: list[JSON], **more: Any) -> None:
    await kube.merge_patch(ASSIGNMENTS, namespace, "week1", {"status": {
        "phase": "Collected", "handedOut": f"{len(students)}/{len(students)}", "collected": "1/2",
        "students": students, "conditions": [{"type": "Ready", "status": "True", "reason": "Collected",
                                              "message": "every copy is taken"}], **more}},
        subresource="status")


async def tell_members(store: str, namespace: str, uid: str, logins: list[str]) -> None:
    """What the operator tells the store of an assignment's students (none runs here)."""
    from userland.platform.clients.store_client import StoreClient
    client = StoreClient(store, STORE_SECRET, "operator")
    try:
        await client.members(namespace, "week1", uid, [("lab", login) for login in logins])
    finally:
        await client.close()


async def collect_into_store(store: str, tmp_path: Path, namespace: str, uid: str,
                             files: dict[str, dict[str, str]]) -> None:
    """Copies taken by the worker's own code (as a collection Pod would), into the store."""
    members = []
    for login, content in files.items():
        folder = tmp_path / "volumes" / login / "week1"
        folder.mkdir(parents=True)
        for path, text in content.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text)
        members.append(Member(login, "lab", str(tmp_path / "volumes" / login)))
    scope = JobScope(kind="collect", namespace=namespace, assignment="week1", members=tuple(members),
                     expires=int(time.time()) + 600, round=ROUND, uid=uid)
    await tell_members(store, namespace, uid, list(files))
    (tmp_path / "scratch").mkdir()
    assert await run(Job(scope=scope, path="week1"), job_token(STORE_SECRET, scope), store,
                     tmp_path / "scratch") == 0


async def test_the_table_the_downloads_and_the_csv(kube: KubeClient, namespace: str, web_ui: AppFactory,
                                                   store_url: str, tmp_path: Path) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    created = await kube.create(ASSIGNMENTS, namespace,
                                assignment_body(grades={"bob": {"grade": "=HYPERLINK(1)"}}))
    await collect_into_store(store_url, tmp_path, namespace, created["metadata"]["uid"], {
        "alice": {"answer.py": "print(42)\n",
                  "data/points.csv": "1,2\n"}, "bob": {"answer.py": "print(41)\n"}})
    receipt = {"round": DUE, "takenAt": "2026-12-07T23:59:00Z", "sha256": "3f2a9c01" + "0" * 56, "files": 2,
               "bytes": 15, "late": False}
    await write_status(kube, namespace, [
        {"user": "alice", "template": "lab", "state": "Conflicts", "commit": "c0ffee", "deadline": DUE,
         "conflicts": [{"path": "hello.py", "kind": "changed"}], "conflictCount": 1, "collected": receipt},
        {"user": "bob", "template": "lab", "state": "HandedOut", "deadline": DUE,
         "collected": {**receipt, "files": 1, "bytes": 11}},
        {"user": "carol", "template": "lab", "state": "Failed",
         "reason": "the student's storage is full: nothing more could be written"}])
    teacher = as_user(INSTRUCTOR)
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "storage is full")
    for words in ("Handed out, some files kept as theirs", "hello.py", "receipt <code>3f2a9c01</code>",
                  "Could not be handed out", "2 files, 15 bytes"):
        assert words in page, words
    # Every copy, streamed through the web UI, file by file.
    response = await teacher.client.get(f"/courses/{namespace}/assignments/week1/collected.zip",
                                        headers=headers(INSTRUCTOR, "student"))
    assert response.status == 200
    assert response.headers["Content-Disposition"].endswith('"week1-collected.zip"')
    with zipfile.ZipFile(io.BytesIO(await response.read())) as archive:
        assert {n: archive.read(n) for n in archive.namelist()} == {
            "alice/answer.py": b"print(42)\n", "alice/data/points.csv": b"1,2\n",
            "bob/answer.py": b"print(41)\n"}
    response = await teacher.client.get(f"/courses/{namespace}/assignments/week1/students/bob/collected.zip",
                                        headers=headers(INSTRUCTOR, "student"))
    with zipfile.ZipFile(io.BytesIO(await response.read())) as archive:
        assert archive.namelist() == ["bob/answer.py"]
    status, _ = await teacher.get(f"/courses/{namespace}/assignments/week1/students/carol/collected.zip")
    assert status == 404
    status, text = await teacher.get(f"/courses/{namespace}/assignments/week1/grades.csv")
    assert status == 200
    lines = text.lstrip("\ufeff").splitlines()
    assert lines[0].startswith("login,environment,handed out,collected at")
    assert lines[2].startswith("bob,JupyterLab,Handed out,2026-12-07T23:59:00Z,1,11,")
    assert lines[2].endswith(",'=HYPERLINK(1),,")  # a spreadsheet never runs it
    audit = await wait_cached(teacher, f"/courses/{namespace}/audit", "Exported grades")
    assert "Downloaded students&#39; work" in audit


async def test_staff_of_another_course_cannot_download(kube: KubeClient, namespace: str, web_ui: AppFactory,
                                                      store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body())
    other = as_user("otherteacher")  # named on no course here
    for path in ("collected.zip", "students/alice/collected.zip", "grades.csv"):
        status, page = await other.get(f"/courses/{namespace}/assignments/week1/{path}")
        assert status == 404 and "No such course" in page


async def test_extensions_grades_and_actions_write_the_assignment(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body())
    await write_status(kube, namespace, [{"user": "bob", "template": "lab", "state": "HandedOut"}])
    teacher = as_user(INSTRUCTOR)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/week1/students/bob", "bob")
    base = f"/courses/{namespace}/assignments/week1"
    assert (await teacher.post(f"{base}/students/bob/extend", {"deadline": "2026-12-09T23:59",
                                                               "zone": "UTC"}))[0] \
        == 303
    assert (await teacher.post(f"{base}/students/bob/grade", {"grade": "B+", "comment": "Good."}))[0] == 303
    for action in ("collect", "handout", "return"):
        status, _ = await teacher.post(f"{base}/actions", {"action": action})
        assert status == 303
    obj = await kube.get(ASSIGNMENTS, namespace, "week1")
    assert obj["spec"]["extensions"] == {"bob": "2026-12-09T23:59:00Z"}
    assert obj["spec"]["grades"] == {"bob": {"grade": "B+", "comment": "Good."}}
    assert obj["spec"]["returnFeedback"] is True
    assert {naming.ANNOTATION_COLLECT_NOW, naming.ANNOTATION_HANDOUT_AT, naming.ANNOTATION_FEEDBACK_AT} <= \
        set(obj["metadata"]["annotations"])
    status, _ = await teacher.post(f"{base}/students/alice/grade", {"grade": "A"})
    assert status == 404  # not a student of this assignment
    status, page = await teacher.post(f"{base}/actions", {"action": "delete"})
    assert status == 200 and "Delete the assignment" in page
    status, _ = await teacher.post(f"{base}/actions", {"action": "delete", "confirmed": "yes"})
    assert status == 303
    audit = await wait_cached(teacher, f"/courses/{namespace}/audit", "Deleted an assignment")
    for label in ("Changed a deadline", "Graded", "Collected now", "Handed out again", "Returned feedback"):
        assert label in audit


async def test_feedback_is_streamed_to_the_store_only_after_its_token(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    created = await kube.create(ASSIGNMENTS, namespace, assignment_body())
    uid = created["metadata"]["uid"]
    await tell_members(store_url, namespace, uid, ["alice", "bob"])
    await write_status(kube, namespace, [{"user": "alice", "template": "lab", "state": "HandedOut"},
                                         {"user": "bob", "template": "lab", "state": "HandedOut"}])
    teacher = as_user(ASSISTANT)  # assistants grade
    await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "alice")
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        archive.writestr("alice/notes.md", "Well done.\n")
        archive.writestr("zed/notes.md", "Not a student of it.\n")
    url = f"/courses/{namespace}/assignments/week1/feedback"

    async def send(token: str | None, first: bool = True) -> tuple[int, str]:
        form = aiohttp.FormData()
        if token is not None and first:
            form.add_field("csrf", token)
        form.add_field("file", upload.getvalue(), filename="feedback.zip", content_type="application/zip")
        if token is not None and not first:
            form.add_field("csrf", token)
        response = await teacher.client.post(url, data=form, headers=headers(ASSISTANT, "student"))
        return response.status, await response.text()

    for token, first in ((None, True), ("1.forged", True), (teacher.csrf, False)):
        status, _ = await send(token, first)
        assert status == 403, (token, first)
    state = await _store_state(store_url, namespace, uid)
    assert state["feedback"] == {}  # nothing reached the store
    status, page = await send(teacher.csrf)
    # zed is not a student of it: his folder is said and never kept (it would be kept for nobody).
    assert status == 200 and "Feedback for 1 student" in page
    assert "zed (not a student of this assignment)" in page
    state = await _store_state(store_url, namespace, uid)
    assert set(state["feedback"]) == {"alice"}


async def test_a_feedback_zip_bomb_is_a_400_page_and_loses_nothing(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, tmp_path: Path) -> None:
    """A zip of 300 MB of zeros in one file (about 300 KB) uploaded after real feedback: a 400 page
    that says why, and the feedback already uploaded is still there."""
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    uid = (await kube.create(ASSIGNMENTS, namespace, assignment_body()))["metadata"]["uid"]
    await tell_members(store_url, namespace, uid, ["alice"])
    await write_status(kube, namespace, [{"user": "alice", "template": "lab", "state": "HandedOut"}])
    teacher = as_user(ASSISTANT)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "alice")
    url = f"/courses/{namespace}/assignments/week1/feedback"

    async def send(data: bytes) -> tuple[int, str]:
        form = aiohttp.FormData()
        form.add_field("csrf", teacher.csrf)
        form.add_field("file", data, filename="feedback.zip", content_type="application/zip")
        response = await teacher.client.post(url, data=form, headers=headers(ASSISTANT, "student"))
        return response.status, await response.text()

    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as archive:
        archive.writestr("alice/notes.md", "Well done.\n")
    assert (await send(good.getvalue()))[0] == 200
    before = (await _store_state(store_url, namespace, uid))["feedback"]
    with zipfile.ZipFile(tmp_path / "bomb.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        info = zipfile.ZipInfo("alice/zeros.bin")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w") as target:
            for _ in range(300):
                target.write(bytes(1024 * 1024))
    status, page = await send((tmp_path / "bomb.zip").read_bytes())
    assert status == 400 and "That file cannot be used" in page and "larger than" in page
    assert "Nothing was uploaded" in page
    assert (await _store_state(store_url, namespace, uid))["feedback"] == before


async def test_a_feedback_zip_with_two_spellings_of_a_login_is_a_page_naming_them(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    """`Alice/` and `alice/` in one feedback zip are both alice's (logins are the same whatever
    their case): one grade file would silently replace the other. A 400 page names the pair, and
    nothing of the zip is kept (issue 25)."""
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    uid = (await kube.create(ASSIGNMENTS, namespace, assignment_body()))["metadata"]["uid"]
    await tell_members(store_url, namespace, uid, ["alice"])
    await write_status(kube, namespace, [{"user": "alice", "template": "lab", "state": "HandedOut"}])
    teacher = as_user(ASSISTANT)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "alice")
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        archive.writestr("Alice/grade.md", "A\n")
        archive.writestr("alice/grade.md", "C\n")
    form = aiohttp.FormData()
    form.add_field("csrf", teacher.csrf)
    form.add_field("file", upload.getvalue(), filename="feedback.zip", content_type="application/zip")
    response = await teacher.client.post(f"/courses/{namespace}/assignments/week1/feedback", data=form,
                                         headers=headers(ASSISTANT, "student"))
    page = await response.text()
    assert response.status == 400 and "That file cannot be used" in page
    assert "Alice/" in page and "alice/" in page and "Nothing was uploaded" in page
    assert (await _store_state(store_url, namespace, uid))["feedback"] == {}


async def _store_state(store: str, namespace: str, uid: str) -> JSON:
    from userland.platform.clients.store_client import StoreClient
    client = StoreClient(store, STORE_SECRET, "web")
    try:
        return await client.state(namespace, "week1", uid)
    finally:
        await client.close()


async def test_a_student_sees_their_own_work_and_receipt_on_me(kube: KubeClient, namespace: str,
                                                              web_ui: AppFactory, store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body(
        returnFeedback=True, grades={"alice": {"grade": "9/10", "comment": "Clear."},
                                     "bob": {"grade": "5/10"}}))
    receipt = {"round": DUE, "takenAt": "2026-12-07T23:59:00Z", "sha256": "3f2a9c01" + "0" * 56, "files": 14,
               "bytes": 1_200_000, "late": False}
    await write_status(kube, namespace, [
        {"user": "alice", "template": "lab", "state": "Conflicts", "deadline": DUE, "collected": receipt,
         "conflicts": [{"path": "hello.py", "kind": "changed"}], "conflictCount": 1,
         "feedbackReturnedAt": "2026-12-09T10:00:00Z", "feedbackState": "HandedOut"},
        {"user": "bob", "template": "lab", "state": "HandedOut", "deadline": DUE}])
    alice = as_user("alice")
    # (Other tests' courses may still be going away: wait for this one's words.)
    page = await wait_cached(alice, "/me",
                             'collected at <time datetime="2026-12-07T23:59:00Z">Mon 7 Dec 2026, '
                             '23:59 UTC</time>, 14 files, 1.2 MB, receipt 3f2a9c01')
    assert "you changed it and your teacher updated it" in page
    assert "Grade: <strong>9/10</strong>" in page and "Clear." in page
    assert "5/10" not in page and "bob" not in page  # nobody else's
    bob = as_user("bob")
    page = await wait_cached(bob, "/me", "Python 101")
    assert "5/10" not in page  # his feedback is not returned yet
