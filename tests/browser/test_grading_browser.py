"""Grading in a real browser (docs/grading.md): the teacher's table with scores and a failure, a
student's full results for staff, and alice's own results on /me within the visibility rules.

Real: Debian's Chromium (Playwright), the gateway in front of the web UI (its own ServiceAccount),
the control plane, Redis, the fake GitHub of tests/browser/conftest.py, and the assignment store
over HTTP, its copies put there by the collection worker's code and alice's results by the grading
Pod's own report step. The operator is not running: the status is written as it writes it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, expect

from tests.browser.conftest import ConsentGitHub
from tests.browser.test_web_pages import Classroom, _serve, sign_in_to
from tests.support.coursework import STORE_SECRET, store_server
from tests.web.course_support import apply_rbac, web_client
from tests.web.pages.support import INSTRUCTOR, make_course, wait_for_access
from tests.web.pages.test_assignment_pages import assignment_body, collect_into_store, lab, write_status
from tests.web.pages.test_grading_pages import GRADER, RESULTS, graded, report
from userland.local.controlplane import ControlPlane, free_port
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient
from userland.platform.model.settings import Settings
from userland.proxy.app import RUNNER_KWARGS
from userland.proxy.app import create_app as create_gateway
from userland.web.app import create_app as create_web

GRADING_TEST_DB = 14  # the other browser tests use 12 and 13
SECRET = "g" * 40


@pytest.fixture
async def graded_class(kube: KubeClient, namespace: str, redis_url: str, github: ConsentGitHub,
                       control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Classroom]:
    github.add_user(INSTRUCTOR, 3101)
    github.add_user("alice", 3102)
    apply_rbac(control_plane)
    await make_course(kube, namespace, title="Python 101")
    await lab(kube, namespace)
    db_url = redis_url.rsplit("/", 1)[0] + f"/{GRADING_TEST_DB}"
    flush = redis.asyncio.from_url(db_url)
    await flush.flushdb()
    await flush.aclose()
    port = free_port()
    public_url = f"http://userland.localhost:{port}"
    servers: list[TestServer] = []
    async with store_server(tmp_path / "store") as store, web_client(control_plane, tmp_path) as web_kube:
        await wait_for_access(web_kube, namespace)
        created = await kube.create(ASSIGNMENTS, namespace, assignment_body(grader=GRADER))
        uid = created["metadata"]["uid"]
        await collect_into_store(store, tmp_path, namespace, uid, {"alice": {"calculator.py": "x\n"},
                                                                   "bob": {"calculator.py": "y\n"}})
        await report(store, tmp_path, namespace, uid, "alice", RESULTS)
        await write_status(kube, namespace, [
            {**graded("alice", state="Graded", score=4.0), "deadline": "2099-01-01T00:00:00Z"},
            graded("bob", state="Failed", reason="TimedOut", message="timed out after 60 s")],
            graded="1/2", grading={"maxScore": 10, "graded": 1, "failed": 1})
        try:
            web_settings = Settings(redis_url=db_url, identity_secret=SECRET, public_url=public_url,
                                    store_url=store, store_secret=STORE_SECRET)
            web_ui = await _serve(create_web(web_settings, kube=web_kube))
            servers.append(web_ui)
            settings = Settings(
                namespaces=(namespace,), redis_url=db_url, identity_secret=SECRET,
                github_client_id=github.client_id, github_client_secret=github.client_secret,
                github_url=github.url, github_api_url=github.api_url,
                public_url=public_url, web_url=f"http://127.0.0.1:{web_ui.port}",
                upstream_mode="local", cookie_secure=False, session_ttl_seconds=3600)
            runner = {k: v for k, v in RUNNER_KWARGS.items() if k != "handler_cancellation"}
            servers.append(await _serve(create_gateway(settings, kube=kube), port, **runner))
            yield Classroom(url=public_url, namespace=namespace, github=github)
        finally:
            for server in reversed(servers):
                await server.close()


async def test_the_teacher_reads_scores_and_alice_reads_only_what_she_may(
        browser: Browser, graded_class: Classroom, kube: KubeClient, tmp_path: Path) -> None:
    ns = graded_class.namespace
    teacher = await (await browser.new_context(viewport={"width": 1200, "height": 900})).new_page()
    await sign_in_to(teacher, graded_class, INSTRUCTOR, f"/courses/{ns}/assignments/week1")
    alice_row = teacher.locator('tr[data-student="lab/alice"]')
    await expect(alice_row.locator(".grading")).to_contain_text("graded 4/10")
    bob_row = teacher.locator('tr[data-student="lab/bob"]')
    await expect(bob_row.locator(".grading")).to_contain_text("not graded")
    await expect(bob_row.locator(".grading .reason")).to_have_text("timed out after 60 s")
    await expect(teacher.get_by_role("button", name="Regrade everyone")).to_be_visible()
    # The score histogram: its words, a row per range; live, as the table is.
    histogram = teacher.locator("#score-histogram")
    await expect(histogram.locator("figcaption")).to_have_text("1 copy graded: mean 4, median 4 of 10")
    await expect(histogram.get_by_role("row", name=re.compile("^4 to 5"))).to_contain_text("1")
    await write_status(kube, ns, [
        {**graded("alice", state="Graded", score=4.0), "deadline": "2099-01-01T00:00:00Z"},
        graded("bob", state="Graded", score=8.0)],
        graded="2/2", grading={"maxScore": 10, "graded": 2, "failed": 0})
    await expect(histogram.locator("figcaption")).to_have_text("2 copies graded: mean 6, median 6 of 10")
    await expect(histogram.get_by_role("row", name=re.compile("^8 to 9"))).to_contain_text("1")
    await teacher.screenshot(path=tmp_path / "grading-teacher-table.png", full_page=True)
    # A student's full results: every test, the hidden one marked, outputs as text.
    await alice_row.get_by_role("link", name=re.compile("Details")).click()
    await teacher.get_by_role("link", name="Full results").click()
    await expect(teacher.get_by_role("heading", level=1)).to_contain_text("alice's results")
    hidden = teacher.locator('tr[data-test="secret edge case"]')
    await expect(hidden).to_contain_text("never")
    await expect(teacher.locator('tr[data-test="add works"] pre')).to_have_text("<b>passed</b>")
    await teacher.screenshot(path=tmp_path / "grading-full-results.png", full_page=True)

    alice = await (await browser.new_context()).new_page()
    await sign_in_to(alice, graded_class, "alice", "/me")
    await expect(alice.locator("p.grading")).to_contain_text("Automatic grading: graded")
    # Check my work: before her deadline, a button; pressing it asks (the operator runs it).
    await alice.get_by_role("button", name=re.compile("Check my work")).click()
    await alice.wait_for_url(re.compile("/me"))
    asked = (await kube.get(ASSIGNMENTS, ns, "week1"))["metadata"]["annotations"]
    assert asked["check.userland.dev/alice"].endswith(" lab")
    await alice.get_by_role("link", name=re.compile("See your results")).click()
    await expect(alice.get_by_role("heading", level=1)).to_contain_text("Your results")
    tests = alice.locator("table.tests tbody tr")
    await expect(tests).to_have_count(1)
    await expect(tests.first).to_contain_text("add works")
    await expect(alice.locator("main")).to_contain_text("3 more tests are graded and not shown to you now")
    await expect(alice.locator("main")).not_to_contain_text("secret edge case")
    await expect(alice.locator("main")).not_to_contain_text("4/10")
    await alice.screenshot(path=tmp_path / "grading-alice-before-return.png", full_page=True)
    # Once the results are returned (published), the total and all but the hidden test.
    await kube.merge_patch(ASSIGNMENTS, ns, "week1", {"spec": {"returnFeedback": True}})
    for _ in range(100):
        await alice.reload()
        if "4/10" in await alice.locator("main").inner_text():
            break
    await expect(alice.locator(".score")).to_have_text("4/10")
    await expect(tests).to_have_count(3)
    await expect(alice.locator("main")).not_to_contain_text("secret edge case")
