"""The web form's repository check (issue 24): the store answers whether a public repository has
the branch or tag, with `git ls-remote`, before an Assignment is made. Real: git's http-backend
on loopback, the store over HTTP, an HTTP server that is not git, a port nothing listens on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.coursework import ASG, NS, STORE_SECRET, GitServer, store_server
from userland.coursework.gitfetch import ref_found
from userland.platform.clients.store_client import StoreClient, StoreError


@pytest.fixture
async def not_git() -> AsyncIterator[str]:
    """A web server that is not a git server: 404 for everything but a page at /page.git."""
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>hello</html>", content_type="text/html")
    app = web.Application()
    app.router.add_get("/page.git/info/refs", page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


async def test_a_repository_and_its_branch_or_tag(git_server: GitServer, web: StoreClient) -> None:
    git_server.repo("course", {"a.py": "a\n"})
    git_server.repo("course", {"b.py": "b\n"}, branch="week2")
    url = git_server.url_of("course")
    for ref in ("", "main", "week2", "refs/heads/main", "c" * 40):
        assert await web.check(NS, ASG, url=url, ref=ref) is None, ref
    assert await web.check(NS, ASG, url=url, ref="no-such-branch") == (
        "UnknownRef", "the repository has no branch or tag 'no-such-branch'")


async def test_what_is_not_a_repository_is_said_the_same_way_whatever_answered(
        git_server: GitServer, web: StoreClient, not_git: str, tmp_path: Path) -> None:
    """A port nothing listens on, an HTTP 404, a web page, a private repository without its token:
    one sentence, which says nothing of which (the check must not map what answers where). An
    address outside USERLAND_STORE_GIT_URLS is not even asked (the `web` store allows only the
    git server)."""
    git_server.repo("private", {"a.py": "a\n"})
    refused = await web.check(NS, ASG, url=f"{not_git}/page.git", ref="main")
    assert refused is not None and refused[0] == "URLNotAllowed" and "USERLAND_STORE_GIT_URLS" in refused[1]
    said = set()
    async with store_server(tmp_path / "open-store", git_urls=(
            git_server.url + "/", not_git + "/", "http://127.0.0.1:1/")) as url_of_store:
        open_web = StoreClient(url_of_store, STORE_SECRET, "web")
        try:
            for url in ("http://127.0.0.1:1/nothing-here.git", f"{not_git}/nothing.git",
                        f"{not_git}/page.git", git_server.url_of("private"), git_server.url_of("missing")):
                problem = await open_web.check(NS, ASG, url=url, ref="main")
                assert problem is not None and problem[0] == "Unreachable", url
                said.add(problem[1].replace(url, "URL"))
        finally:
            await open_web.close()
    assert said == {"the repository at URL is not reachable from the platform or is not a git repository "
                    "(a private one also looks like this: name its token in the form)"}


async def test_only_the_web_ui_may_ask_and_only_for_a_web_address(
        git_server: GitServer, operator: StoreClient, web: StoreClient) -> None:
    with pytest.raises(StoreError) as refused:
        await operator.check(NS, ASG, url=git_server.url_of("course"), ref="main")
    assert refused.value.status == 403
    for url in ("file:///etc", "ext::sh -c id", "git@github.com:c/w.git"):
        with pytest.raises(StoreError) as bad:
            await web.check(NS, ASG, url=url, ref="main")
        assert bad.value.status == 400, url
    with pytest.raises(StoreError) as bad:
        await web.check(NS, ASG, url=git_server.url_of("course"), ref="--upload-pack=touch /tmp/x")
    assert bad.value.status == 400


@pytest.mark.parametrize(("ref", "found"), [
    ("", True), ("main", True), ("v1", True), ("refs/heads/main", True), ("week2", False),
    ("ain", False), ("a" * 40, True),
])
def test_ref_found_in_a_listing(ref: str, found: bool) -> None:
    listing = ("1111111111111111111111111111111111111111\tHEAD\n"
               "1111111111111111111111111111111111111111\trefs/heads/main\n"
               "2222222222222222222222222222222222222222\trefs/tags/v1\n"
               "2222222222222222222222222222222222222222\trefs/tags/v1^{}\n")
    assert ref_found(listing, ref) is found
