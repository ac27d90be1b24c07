"""What an assignment keeps in the store, against its quotas, on its page (issue 25): the figures
the operator writes into `status.storage`, and an upload past a quota. Real: the web UI over
HTTP, the control plane, the store over HTTP."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import aiohttp

from tests.support.coursework import store_server
from tests.web.pages.support import ASSISTANT, INSTRUCTOR, AppFactory, headers
from tests.web.pages.test_assignment_pages import (
    _store_state,
    assignment_body,
    git,
    store_url,
    teacher_in,
    tell_members,
    wait_cached,
    write_status,
)
from userland.coursework.store_files import Quotas
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient

__all__ = ["git", "store_url"]  # the fixtures, used here as there


async def test_the_page_shows_what_the_assignment_keeps_against_its_quotas(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str) -> None:
    as_user = await teacher_in(kube, namespace, web_ui, store_url)
    await kube.create(ASSIGNMENTS, namespace, assignment_body())
    await write_status(kube, namespace, [{"user": "alice", "template": "lab", "state": "HandedOut"}],
                       storage={"bytes": 1_500_000, "quotaBytes": 5_000_000_000, "courseBytes": 9_700_000_000,
                                "courseQuotaBytes": 10_000_000_000})
    page = await wait_cached(as_user(INSTRUCTOR), f"/courses/{namespace}/assignments/week1", 'id="storage"')
    assert "1.5 MB of its 5.0 GB quota" in page
    assert "the course: 9.7 GB of 10 GB" in page


async def test_feedback_past_the_quota_is_a_page_that_says_which_and_keeps_nothing(
        kube: KubeClient, namespace: str, web_ui: AppFactory, tmp_path: Path) -> None:
    """An assistant's upload that would take the assignment past its quota in the store: a 413
    page in the store's words (which quota, which setting), nothing kept."""
    async with store_server(tmp_path / "store", quotas=Quotas(assignment=1_000_000)) as store:
        as_user = await teacher_in(kube, namespace, web_ui, store)
        uid = (await kube.create(ASSIGNMENTS, namespace, assignment_body()))["metadata"]["uid"]
        await tell_members(store, namespace, uid, ["alice"])
        await write_status(kube, namespace, [{"user": "alice", "template": "lab", "state": "HandedOut"}])
        teacher = as_user(ASSISTANT)
        await wait_cached(teacher, f"/courses/{namespace}/assignments/week1", "alice")
        upload = io.BytesIO()
        with zipfile.ZipFile(upload, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("alice/recording.bin", bytes(2_000_000))
        form = aiohttp.FormData()
        form.add_field("csrf", teacher.csrf)
        form.add_field("file", upload.getvalue(), filename="feedback.zip", content_type="application/zip")
        response = await teacher.client.post(f"/courses/{namespace}/assignments/week1/feedback", data=form,
                                             headers=headers(ASSISTANT, "student"))
        page = await response.text()
        assert response.status == 413 and "No room for this feedback" in page
        assert "USERLAND_STORE_ASSIGNMENT_QUOTA_MB" in page and "Nothing was kept" in page
        assert (await _store_state(store, namespace, uid))["feedback"] == {}
