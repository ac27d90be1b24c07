"""Fetching one commit of an assignment's repository with git, once, for the store.

`git fetch --depth 1` of the ref (or the default branch) into a throwaway bare repository, then
`git archive` of the commit (or of its sub-folder) made safe to hand out (trees.normalize_source).
A token for a private repository goes to git in its environment as an `http.extraHeader`, never
on a command line (other processes can read those) and never to disk; git never prompts and may
speak only http(s) (no `ext::` or file remotes through a redirect). What git says when it fails is
turned into one sentence a teacher can act on (`classify`, a pure function with a table test).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from userland.coursework.trees import BadArchive, Limits, SourceResult, TooLarge, normalize_source
from userland.platform.coursework import size_words

GIT = shutil.which("git") or "/usr/bin/git"
# Stop a fetch that passes the source limit by this much on disk (packs are compressed, so a
# fetch this large is a source too large to hand out).
DISK_SLACK = 1.25


@dataclass(frozen=True)
class FetchProblem(Exception):
    """Why a source cannot be had: a CamelCase reason and a sentence."""

    reason: str
    message: str

    def __str__(self) -> str:
        return self.message


def classify(stderr: str, *, url: str, ref: str, secret: str = "") -> FetchProblem:
    """git's own words (LC_ALL=C) -> what went wrong, for the Assignment's status."""
    text = stderr.lower()
    host = urlsplit(url).hostname or url
    what = f"the branch or tag {ref!r}" if ref else "the default branch"
    if "couldn't find remote ref" in text or "invalid refspec" in text:
        return FetchProblem("UnknownRef",
                            f"the repository has no branch or tag {ref!r}: check spec.source.ref")
    if any(f"returned error: {code}" in text for code in (301, 302, 303, 307, 308)):
        return FetchProblem("Redirected", f"the repository at {url} answers with a redirect to another "
                                          "address; a token is never sent through a redirect: put the "
                                          "repository's current address in spec.source.url")
    if "could not resolve host" in text:
        return FetchProblem("Unreachable", f"the repository's host {host} is not known here: check "
                                           "spec.source.url")
    if any(s in text for s in ("failed to connect", "connection refused", "timed out", "could not connect",
                               "connection reset", "network is unreachable", "no route to host")):
        return FetchProblem("Unreachable", f"the repository at {url} cannot be reached (its server does not "
                                           "answer); it is tried again later")
    if any(s in text for s in ("authentication failed", "could not read username", "could not read password",
                               "terminal prompts disabled", "returned error: 401", "returned error: 403")):
        if secret:
            return FetchProblem("Unauthorized", f"the repository refused the token in the Secret {secret!r}: "
                                                "check that it is current and may read the repository")
        return FetchProblem("Unauthorized", f"the repository at {url} asks for a password: if it is private, "
                                            "put a token in a Secret and name it in spec.source.tokenSecret")
    if "not found" in text or "returned error: 404" in text:
        private = "" if secret else " (a private repository also looks like this without a token)"
        return FetchProblem("NotFound", f"there is no repository at {url}{private}")
    if "unadvertised object" in text or "not our ref" in text:
        return FetchProblem("CommitNotAllowed", f"the server does not let {what} be fetched by its commit "
                                                "id: use a branch or tag name")
    if "ssl" in text or "certificate" in text:
        return FetchProblem("Untrusted", f"the certificate of {host} is not trusted here")
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "no message")
    return FetchProblem("FetchFailed", f"git could not fetch {what}: {last[:300]}")


def _env(home: Path, token: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ALLOW_PROTOCOL": "http:https",
        "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
        "GIT_HTTP_LOW_SPEED_TIME": "60",
    }
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        # git sends http.extraHeader with every request, and after a redirect of its first one it
        # asks the new server for the rest: a redirect would carry the token past the addresses
        # its Secret allows (userland.dev/git-urls). With a token, redirects are not followed.
        env.update({"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
                    "GIT_CONFIG_KEY_1": "http.followRedirects", "GIT_CONFIG_VALUE_1": "false"})
    return env


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


async def _git(*args: str, cwd: Path, env: dict[str, str], timeout: float,
               watch: tuple[Path, int] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        GIT, *args, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def watchdog() -> None:
        assert watch is not None
        folder, limit = watch
        while True:
            await asyncio.sleep(0.5)
            if await asyncio.to_thread(_size, folder) > limit:
                process.kill()
                raise TooLarge(f"the source is larger than {size_words(int(limit / DISK_SLACK))} (the limit)")

    guard = asyncio.create_task(watchdog()) if watch is not None else None
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise FetchProblem("Unreachable", f"git did not finish within {int(timeout)} s; it is tried again "
                                          "later") from None
    finally:
        if guard is not None:
            guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await guard  # raises TooLarge when the watchdog stopped the fetch
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def fetch(url: str, ref: str, sub_path: str, *, token: str, secret_name: str, work: Path, out: Path,
                limits: Limits, timeout: float = 600.0) -> tuple[str, SourceResult]:
    """(commit, what was written to `out`) for `ref` of `url`; FetchProblem or TooLarge otherwise."""
    await asyncio.to_thread(work.mkdir, parents=True)
    env = _env(work, token)
    try:
        code, _, err = await _git("init", "-q", "--bare", str(work / "repo"), cwd=work, env=env, timeout=60)
        if code != 0:
            raise FetchProblem("FetchFailed", f"git could not start: {err.strip()[:200]}")
        repo = work / "repo"
        watch = (repo, int(limits.bytes * DISK_SLACK) + 16 * 1024 * 1024)
        code, _, err = await _git("fetch", "--depth", "1", "--no-tags", "--no-recurse-submodules", "--quiet",
                                  "--", url, ref or "HEAD", cwd=repo, env=env, timeout=timeout, watch=watch)
        if code != 0:
            raise classify(err, url=url, ref=ref, secret=secret_name)
        code, commit, err = await _git("rev-parse", "FETCH_HEAD^{commit}", cwd=repo, env=env, timeout=60)
        commit = commit.strip()
        if code != 0 or len(commit) != 40:
            raise FetchProblem("FetchFailed", f"git fetched no commit: {err.strip()[:200]}")
        tree = f"{commit}:{sub_path}" if sub_path else commit
        if sub_path:
            code, kind, _ = await _git("cat-file", "-t", tree, cwd=repo, env=env, timeout=60)
            if code != 0 or kind.strip() != "tree":
                raise FetchProblem("NoSuchFolder", f"the repository has no folder {sub_path!r} in commit "
                                                   f"{commit[:8]}: check spec.source.subPath")
        return commit, await _archive(repo, tree, env, out, limits)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


async def _archive(repo: Path, tree: str, env: dict[str, str], out: Path, limits: Limits) -> SourceResult:
    """`git archive` of `tree`, read as it comes by normalize_source in a thread (through a pipe:
    the process stays asyncio's, which reaps it)."""
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            GIT, "archive", "--format=tar", tree, cwd=repo, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end, stderr=asyncio.subprocess.PIPE)
    finally:
        os.close(write_end)

    def normalize() -> SourceResult:
        with open(read_end, "rb") as stream, open(out, "wb") as written:
            return normalize_source(stream, written, limits)

    try:
        result = await asyncio.to_thread(normalize)
    except (TooLarge, BadArchive):
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    assert process.stderr is not None
    error = (await process.stderr.read()).decode(errors="replace")
    if await process.wait() != 0:
        raise FetchProblem("FetchFailed", f"git could not archive the commit: {error.strip()[:200]}")
    return result
