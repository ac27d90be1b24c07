"""Assignment pages that tell the truth (issue 24): a due date in the past is refused in the form
unless "collect what they have now" is ticked; a repository or branch that cannot be had is said
in the form before anything is made, in words that say nothing of what answered instead; a
failed assignment's students are not "being handed out"; copies taken late are the platform's
lateness, and an empty copy is never shown as success.

Real: the web UI over HTTP as its ServiceAccount, the control plane, Redis, a git server on
loopback (git-http-backend) and the assignment store over HTTP (it runs the form's check).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.coursework import GitServer, git_server, store_server
from tests.web.pages.support import INSTRUCTOR, AppFactory, headers
from tests.web.pages.test_assignment_pages import DUE, assignment_body, teacher_in, wait_cached, write_status
from tests.web.test_course_pages import read_event
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient

FAR = "2036-12-08T00:59"


@pytest.fixture
async def git(tmp_path: Path) -> AsyncIterator[GitServer]:
    async with git_server(tmp_path / "git") as server:
        server.repo("w", {"hello.py": "print('hello')\n"})
        yield server


@pytest.fixture
async def store_url(tmp_path: Path, git: GitServer) -> AsyncIterator[str]:
    """The store, fetching (and checking) only from `git` and a port nothing listens on
    (USERLAND_STORE_GIT_URLS): what is not a git server is said the same way."""
    async with store_server(tmp_path / "store", git_urls=(git.url + "/", "http://127.0.0.1:1/")) as url:
        yield url


def form(git: GitServer, **fields: str) -> dict[str, str]:
    return {"title": "Week 1", "name": "week1", "templates": "lab", "url": git.url_of("w"), "ref": "main",
            "path": "week1", "due": FAR, "zone": "UTC", **fields}


async def test_a_due_date_in_the_past_needs_collect_what_they_have_now(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, git: GitServer) -> None:
    teacher = (await teacher_in(kube, namespace, web_ui, store_url))(INSTRUCTOR)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/new", "New assignment")
    status, page = await teacher.post(f"/courses/{namespace}/assignments", form(git, due="2020-01-01T09:00"))
    assert status == 400 and "Nothing was saved" in page
    assert "The due date 2020-01-01 09:00 is in the past" in page
    assert 'name="collect_past"' in page and "Collect what they have now" in page
    assert (await kube.list(ASSIGNMENTS, namespace))["items"] == []
    # The same, ticked: made, with that due date.
    status, _ = await teacher.post(f"/courses/{namespace}/assignments",
                                   form(git, due="2020-01-01T09:00", collect_past="yes"))
    assert status == 303
    made = await kube.get(ASSIGNMENTS, namespace, "week1")
    assert made["spec"]["due"] == "2020-01-01T09:00:00Z"
    # Editing it without touching the due date is fine; moving it to another past time is asked.
    await wait_cached(teacher, f"/courses/{namespace}/assignments/week1/edit", "Edit assignment")
    status, _ = await teacher.post(f"/courses/{namespace}/assignments/week1/edit",
                                   form(git, title="Week 1 (again)", due="2020-01-01T09:00"))
    assert status == 303
    status, page = await teacher.post(f"/courses/{namespace}/assignments/week1/edit",
                                      form(git, due="2021-01-01T09:00"))
    assert status == 400 and "is in the past" in page and 'name="collect_past"' in page
    assert (await kube.get(ASSIGNMENTS, namespace, "week1"))["spec"]["due"] == "2020-01-01T09:00:00Z"
    # The form says what addresses it takes, as it takes them.
    assert "https://… (or http://…" in page


@pytest.mark.parametrize(("fields", "words"), [
    ({"url": "http://127.0.0.1:1/nothing-here.git"},
     "is not reachable from the platform or is not a git repository"),
    ({"ref": "no-such-branch"}, "The repository has no branch or tag &#39;no-such-branch&#39;"),
], ids=["unreachable", "unknown branch"])
async def test_a_repository_that_cannot_be_had_is_said_in_the_form(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, git: GitServer,
        fields: dict[str, str], words: str) -> None:
    teacher = (await teacher_in(kube, namespace, web_ui, store_url))(INSTRUCTOR)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/new", "New assignment")
    status, page = await teacher.post(f"/courses/{namespace}/assignments", form(git, **fields))
    assert status == 400 and "Nothing was saved" in page and words in page, page[:3000]
    # Never what answered instead of a git server: no port, status code or git's own words.
    for told in ("refused", "404", "Connection", "fatal:", "spec.source"):
        assert told not in page.split('id="form-error"', 1)[1].split("</div>", 1)[0], told
    assert (await kube.list(ASSIGNMENTS, namespace))["items"] == []
    # An edit to a broken repository is refused the same way; the assignment keeps its source.
    status, _ = await teacher.post(f"/courses/{namespace}/assignments", form(git))
    assert status == 303
    await wait_cached(teacher, f"/courses/{namespace}/assignments/week1/edit", "Edit assignment")
    status, page = await teacher.post(f"/courses/{namespace}/assignments/week1/edit", form(git, **fields))
    assert status == 400 and words in page
    source = (await kube.get(ASSIGNMENTS, namespace, "week1"))["spec"]["source"]
    assert source == {"url": git.url_of("w"), "ref": "main"}


async def test_a_failed_assignment_is_not_being_handed_out_for_anyone(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body(source={"url": "https://git.example.edu/c/w.git",
                                                                      "ref": "no-such-branch"}))
    problem = "the repository has no branch or tag 'no-such-branch': check spec.source.ref"
    await write_status(kube, namespace, [
        # As this operator writes it, and as an older one did (Pending).
        {"user": "alice", "template": "lab", "state": "Failed", "reason": f"the repository cannot be read: "
                                                                           f"{problem}"},
        {"user": "bob", "template": "lab", "state": "Pending"}],
        phase="Failed", handedOut="0/2", collected=None,
        conditions=[{"type": "Ready", "status": "False", "reason": "UnknownRef", "message": problem}])
    teacher = as_user(INSTRUCTOR)
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "Needs attention")
    assert "Being handed out" not in page and page.count("Could not be handed out") == 2
    assert "spec.source" not in page and "check the branch or tag (in the assignment&#39;s settings)" in page
    listing = await wait_cached(teacher, f"/courses/{namespace}/assignments", "Needs attention")
    assert "spec.source" not in listing
    for login in ("alice", "bob"):
        me = await wait_cached(as_user(login), "/me", "Week 1")
        assert "Not available yet: your teacher has been told" in me and "Being handed out" not in me


def copy(**more: Any) -> dict[str, Any]:
    return {"round": DUE, "takenAt": DUE, "sha256": "3f2a9c01" + "0" * 56, "files": 2, "bytes": 15,
            "late": False, **more}


async def test_late_and_empty_copies_say_what_the_platform_did(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body())
    await write_status(kube, namespace, [
        {"user": "alice", "template": "lab", "state": "HandedOut", "deadline": DUE,
         "collected": copy(takenAt="2026-12-08T00:02:00Z", late=True, lateSeconds=180)},
        {"user": "bob", "template": "lab", "state": "HandedOut", "deadline": DUE,
         "collected": copy(files=0, bytes=0)},
        {"user": "carol", "template": "lab", "state": "HandedOut", "deadline": DUE,
         "collected": copy(pastDue=True)}],
        collected="3/3", emptyCopies=1,
        conditions=[{"type": "Ready", "status": "True", "reason": "CollectedSomeEmpty",
                     "message": "every copy is taken (3); 1 of the copies taken is empty"}])
    teacher = as_user(INSTRUCTOR)
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "taken late")
    assert "copied 3 minutes after the deadline because the platform was busy" in page
    assert "no files were in the folder at that moment" in page and ">empty</span>" in page
    assert "the due date had already passed when the assignment was made" in page
    assert "Collected, 1 empty" in page and 'class="badge phase-ready" id="phase"' not in page
    # One student's page says it as the table does.
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments/week1/students/alice", "taken late")
    assert "copied 3 minutes after the deadline because the platform was busy" in page
    page = await wait_cached(teacher, f"/courses/{namespace}/assignments/week1/students/bob", ">empty</span>")
    assert "no files were in the folder at that moment" in page
    alice = await wait_cached(as_user("alice"), "/me", "Week 1")
    assert "copied 3 minutes after your deadline because the platform was busy" in alice
    assert "more than a minute" not in alice
    bob = await wait_cached(as_user("bob"), "/me", "Week 1")
    assert "Your folder had no files at that moment." in bob
    carol = await wait_cached(as_user("carol"), "/me", "Week 1")
    assert "after your deadline" not in carol


async def test_a_status_written_between_the_page_and_its_stream_reaches_the_page(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    """The page is rendered ("New"), the operator writes "Failed", then the page's script opens
    the stream: its first event says "Needs attention". Before, the stream sent only what changed
    after it opened, and a CI run's page said "New" for 3 minutes of a status long "Failed"."""
    teacher = (await teacher_in(kube, namespace, web_ui, store_url))(INSTRUCTOR)
    await kube.create(ASSIGNMENTS, namespace, assignment_body())
    page = f"/courses/{namespace}/assignments/week1"
    await wait_cached(teacher, page, 'id="phase">New<')
    await kube.merge_patch(ASSIGNMENTS, namespace, "week1", {"status": {
        "phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "UnknownRef",
                                           "message": "the repository has no branch or tag 'main'"}]}},
        subresource="status")
    await wait_cached(teacher, page, 'id="phase">Needs attention<')
    response = await teacher.client.get(page + "/stream", headers=headers(teacher.login, teacher.role))
    assert response.status == 200
    first = await read_event(response, "table", 30.0)
    assert first["phase"] == "Needs attention" and "no branch or tag" in first["message"]
    response.close()
