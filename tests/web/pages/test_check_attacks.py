"""Attack review of the form's repository check, from the form (SECURITY.md, "The form's
repository check is not a network scanner"): an address that never answers, or a flood of checks, must not
get an assignment saved unchecked.

Real: the web UI over HTTP as its ServiceAccount, the control plane, Redis, the assignment store
over HTTP, git, a TCP server that accepts and never answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.coursework.test_check_attacks import FLOOD_CHECK_SECONDS, Silent
from tests.support.coursework import ASG, NS, STORE_SECRET, GitServer, git_server, store_server
from tests.web.pages.support import INSTRUCTOR, AppFactory
from tests.web.pages.test_assignment_pages import teacher_in, wait_cached
from userland.coursework.store_fetch import CHECKS_AT_ONCE
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient
from userland.platform.clients.store_client import StoreClient
from userland.web.routes_assignments import CHECKS_PER_WINDOW


@pytest.fixture
async def git(tmp_path: Path) -> AsyncIterator[GitServer]:
    async with git_server(tmp_path / "git") as server:
        server.repo("w", {"hello.py": "print('hello')\n"})
        yield server


@pytest.fixture
async def silent() -> AsyncIterator[Silent]:
    async with Silent(expect=1 + CHECKS_AT_ONCE) as server:
        yield server


@pytest.fixture
async def store_url(tmp_path: Path, git: GitServer, silent: Silent) -> AsyncIterator[str]:
    """The store, checking only the git server and the silent server (USERLAND_STORE_GIT_URLS);
    a check of the silent one holds its slot FLOOD_CHECK_SECONDS, long enough for the form to be
    sent while every slot is taken, however loaded the machine (3 s was a race)."""
    async with store_server(tmp_path / "store", check_timeout=FLOOD_CHECK_SECONDS, git_urls=(
            git.url + "/", f"http://127.0.0.1:{silent.port}/")) as url:
        yield url


def form(url: str) -> dict[str, str]:
    return {"title": "Week 1", "name": "week1", "templates": "lab", "url": url, "ref": "main",
            "path": "week1", "due": "2036-12-08T00:59", "zone": "UTC"}


async def test_a_silent_address_or_a_flood_of_checks_saves_nothing(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, silent: Silent) -> None:
    teacher = (await teacher_in(kube, namespace, web_ui, store_url))(INSTRUCTOR)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/new", "New assignment")
    # An address that accepts and never answers: the check held past the web UI's wait, and
    # the form saved it unchecked.
    status, page = await teacher.post(f"/courses/{namespace}/assignments", form(silent.url))
    assert status == 400 and "is not reachable from the platform" in page, page[:2000]
    assert (await kube.list(ASSIGNMENTS, namespace))["items"] == []
    # Every check slot taken (by checks of that address, sent as the web UI signs them): the
    # form says busy and saves nothing.
    flood = StoreClient(store_url, STORE_SECRET, "web")
    try:
        running = [asyncio.create_task(flood.check(NS, ASG, url=silent.url, ref=""))
                   for _ in range(CHECKS_AT_ONCE)]
        await asyncio.wait_for(silent.full.wait(), 60)
        status, page = await teacher.post(f"/courses/{namespace}/assignments", form(silent.url))
        assert status == 400 and "checking other repositories just now: try again in a minute" in page
        assert (await kube.list(ASSIGNMENTS, namespace))["items"] == []
        await asyncio.gather(*running)
    finally:
        await flood.close()


async def test_a_member_of_staff_checks_a_bounded_number_of_repositories(
        kube: KubeClient, namespace: str, web_ui: AppFactory, store_url: str, git: GitServer) -> None:
    """Attack: submit the form in a loop, each time with another address, to keep the store's
    check slots busy for every course (or to scan). Each member of staff has CHECKS_PER_WINDOW
    checks per window; past them the form says to wait and the store is not asked."""
    teacher = (await teacher_in(kube, namespace, web_ui, store_url))(INSTRUCTOR)
    await wait_cached(teacher, f"/courses/{namespace}/assignments/new", "New assignment")
    for attempt in range(CHECKS_PER_WINDOW):
        status, page = await teacher.post(f"/courses/{namespace}/assignments",
                                          {**form(git.url_of("w")), "ref": f"no-branch-{attempt}"})
        assert status == 400 and f"no branch or tag &#39;no-branch-{attempt}&#39;" in page, attempt
    status, page = await teacher.post(f"/courses/{namespace}/assignments", form(git.url_of("w")))
    assert status == 400 and "checked many repositories" in page and "Nothing was saved" in page
    assert (await kube.list(ASSIGNMENTS, namespace))["items"] == []
