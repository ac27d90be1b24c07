"""Fetching an assignment's source with git from a real git server (git-http-backend on loopback):
refs, sub-folders, private repositories, and every way it fails said in words."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import free_port
from tests.support.coursework import GIT_TOKEN as TOKEN
from tests.support.coursework import GitServer
from userland.coursework.gitfetch import FetchProblem, classify, fetch
from userland.coursework.trees import Limits, TooLarge, read_index

LIMITS = Limits(files=100, bytes=10 * 1024 * 1024)


async def get(git: GitServer, tmp_path: Path, url: str, ref: str = "", sub: str = "", token: str = "",
              limits: Limits = LIMITS, secret: str = "") -> tuple[str, object, Path]:
    out = tmp_path / "out.tar"
    commit, result = await fetch(url, ref, sub, token=token, secret_name=secret, work=tmp_path / "work",
                                 out=out, limits=limits, timeout=60)
    return commit, result, out


async def test_a_branch_a_sub_folder_and_a_commit_id(git_server: GitServer, tmp_path: Path) -> None:
    first = git_server.repo("course", {"week1/hello.py": "print('hi')\n", "week1/run.sh": "#!/bin/sh\n",
                                       "week2/later.py": "x\n", "README.md": "course\n"})
    commit, result, out = await get(git_server, tmp_path, git_server.url_of("course"), "main", "week1")
    assert commit == first
    assert sorted(result.index) == ["hello.py", "run.sh"]  # type: ignore[attr-defined]
    index = read_index(str(out))
    assert index["run.sh"].executable and not index["hello.py"].executable
    with tarfile.open(out) as archive:
        assert archive.extractfile("hello.py").read() == b"print('hi')\n"  # type: ignore[union-attr]
    second = git_server.repo("course", {"week1/hello.py": "print('hello')\n"}, message="fix")
    commit, _, _ = await get(git_server, tmp_path, git_server.url_of("course"))  # the default branch
    assert commit == second
    commit, result, _ = await get(git_server, tmp_path, git_server.url_of("course"), first, "week1")
    assert commit == first  # an older commit, by its id


async def test_links_and_reserved_names_are_not_handed_out_and_said(git_server: GitServer,
                                                                    tmp_path: Path) -> None:
    git_server.repo("links", {"a.py": "a\n", "inside": "->a.py", "outside": "->../../etc/passwd",
                              "abs": "->/etc/passwd", ".userland-handout.json": "{}", "feedback/x.md": "x\n"})
    _, result, out = await get(git_server, tmp_path, git_server.url_of("links"))
    assert sorted(result.index) == ["a.py"]  # type: ignore[attr-defined]
    said = dict(result.skipped)  # type: ignore[attr-defined]
    assert "outside the assignment's folder" in said["outside"]
    assert "outside the assignment's folder" in said["abs"]
    assert "links are not handed out" in said["inside"]
    assert "keeps for itself" in said[".userland-handout.json"]
    assert "keeps for itself" in said["feedback/x.md"]
    with tarfile.open(out) as archive:
        assert archive.getnames() == ["a.py"]


async def test_a_private_repository_needs_its_token(git_server: GitServer, tmp_path: Path) -> None:
    git_server.repo("private", {"secret.py": "x\n"})
    url = git_server.url_of("private")
    with pytest.raises(FetchProblem) as refused:
        await get(git_server, tmp_path, url)
    assert refused.value.reason == "Unreachable" and "spec.source.tokenSecret" in refused.value.message
    with pytest.raises(FetchProblem) as refused:
        await get(git_server, tmp_path, url, token="wrong", secret="course-git")
    assert refused.value.reason == "Unauthorized" and "'course-git'" in refused.value.message
    _, result, _ = await get(git_server, tmp_path, url, token=TOKEN, secret="course-git")
    assert sorted(result.index) == ["secret.py"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("case", "reason", "words"), [
    ("unknown ref", "UnknownRef", "has no branch or tag 'nope'"),
    ("no such repository", "Unreachable", "is not reachable or not a git repository"),
    ("no such folder", "NoSuchFolder", "has no folder 'week9'"),
    ("nobody listening", "Unreachable", "is not reachable or not a git repository"),
])
async def test_failures_are_said_in_words(git_server: GitServer, tmp_path: Path, case: str, reason: str,
                                          words: str) -> None:
    git_server.repo("course", {"week1/a.py": "a\n"})
    url, ref, sub = git_server.url_of("course"), "", ""
    if case == "unknown ref":
        ref = "nope"
    elif case == "no such repository":
        url = git_server.url_of("nothing")
    elif case == "no such folder":
        sub = "week9"
    else:
        url = f"http://127.0.0.1:{free_port()}/course.git"
    with pytest.raises(FetchProblem) as refused:
        await get(git_server, tmp_path, url, ref, sub)
    assert refused.value.reason == reason
    assert words in refused.value.message


async def test_a_source_past_the_limits_is_refused(git_server: GitServer, tmp_path: Path) -> None:
    git_server.repo("many", {f"f{i}.txt": f"{i}\n" for i in range(12)})
    with pytest.raises(TooLarge, match="more than 10 files"):
        await get(git_server, tmp_path, git_server.url_of("many"), limits=Limits(files=10, bytes=10**6))
    git_server.repo("big", {"data.bin": bytes(range(256)) * 8000})
    with pytest.raises(TooLarge, match="larger than"):
        await get(git_server, tmp_path, git_server.url_of("big"), limits=Limits(files=10, bytes=100_000))


@pytest.mark.parametrize(("stderr", "secret", "reason"), [
    ("fatal: couldn't find remote ref refs/heads/x", "", "UnknownRef"),
    # What a server that is not a git server (or no server) said is one reason, one sentence:
    # the status never tells a closed port from a 404, a 401 or a page that is not a repository.
    ("fatal: unable to access 'https://x/': Could not resolve host: x", "", "Unreachable"),
    ("fatal: unable to access 'https://x/': Failed to connect to x port 443", "", "Unreachable"),
    ("fatal: could not read Username for 'https://x': terminal prompts disabled", "", "Unreachable"),
    ("fatal: Authentication failed for 'https://x/'", "s", "Unauthorized"),
    ("remote: Repository not found.\nfatal: repository 'https://x/' not found", "", "Unreachable"),
    ("error: Server does not allow request for unadvertised object abc", "", "CommitNotAllowed"),
    ("fatal: unable to access: SSL certificate problem: self signed", "", "Unreachable"),
    ("fatal: unable to access 'https://x/': The requested URL returned error: 302", "", "Unreachable"),
    ("fatal: something new", "", "Unreachable"),
    ("fatal: write error: No space left on device", "", "StoreFull"),
])
def test_classify(stderr: str, secret: str, reason: str) -> None:
    problem = classify(stderr, url="https://x/", ref="x", secret=secret)
    assert problem.reason == reason and problem.message
    assert problem.detail and problem.detail not in problem.message  # git's words: the log only


async def test_a_token_never_follows_a_redirect_to_another_server(git_server: GitServer,
                                                                   tmp_path: Path) -> None:
    """The Secret allows the token for one server (userland.dev/git-urls); that server answers
    with a redirect to another one, which serves a real repository and records what it is sent.
    git updates its base URL after the first redirect and sends http.extraHeader with every
    later request: the token would reach the other server. With a token, redirects are not
    followed: the fetch fails in words, and the other server never sees the token."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from userland.local.gitserver import create_git_app
    git_server.repo("course", {"a.py": "a\n"})
    seen: list[str] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        return await handler(request)  # type: ignore[no-any-return]
    other_app = create_git_app(git_server.root)
    other_app.middlewares.append(record)
    other = TestServer(other_app, host="127.0.0.1")
    await other.start_server()

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound(str(other.make_url(request.path_qs)))
    first_app = web.Application()
    first_app.router.add_route("*", "/{tail:.*}", moved)
    first = TestServer(first_app, host="127.0.0.1")
    await first.start_server()
    try:
        with pytest.raises(FetchProblem) as refused:
            await get(git_server, tmp_path, str(first.make_url("/course.git")), token=TOKEN,
                      secret="course-git")
        assert refused.value.reason == "Redirected" and "spec.source.url" in refused.value.message
        assert not [h for h in seen if h], seen
        # Without a token a redirect is followed as before (a renamed public repository).
        commit, _, _ = await get(git_server, tmp_path / "public", str(first.make_url("/course.git")))
        assert commit
    finally:
        await first.close()
        await other.close()
