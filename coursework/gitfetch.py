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
import signal
from dataclasses import dataclass
from pathlib import Path

from userland.coursework.trees import BadArchive, Limits, SourceResult, TooLarge, normalize_source
from userland.platform.model.coursework import size_words

GIT = shutil.which("git") or "/usr/bin/git"
# Stop a fetch that passes the source limit by this much on disk (packs are compressed, so a
# fetch this large is a source too large to hand out).
DISK_SLACK = 1.25


@dataclass(frozen=True)
class FetchProblem(Exception):
    """Why a source cannot be had: a CamelCase reason and a sentence."""

    reason: str
    message: str
    detail: str = ""  # what git said, for the store's log only (never the Assignment's status)

    def __str__(self) -> str:
        return self.message


def classify(stderr: str, *, url: str, ref: str, secret: str = "") -> FetchProblem:
    """git's own words (LC_ALL=C) -> what went wrong, for the Assignment's status.

    Whatever does not come from a git server that answered (a host not known, a closed port, a
    redirect, an HTTP error, a page that is not a repository, a certificate) is one message,
    "not reachable or not a git repository": the status must not tell an instructor what the
    store found at an address (a port open or closed, a 404 or a 200), or the store would be a
    way to map what it can reach. git's own words go to the store's log (`detail`)."""
    text = stderr.lower()
    what = f"the branch or tag {ref!r}" if ref else "the default branch"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "no message")
    detail = last[:300]
    if "couldn't find remote ref" in text or "invalid refspec" in text:
        return FetchProblem("UnknownRef",
                            f"the repository has no branch or tag {ref!r}: check spec.source.ref", detail)
    if "no space left on device" in text:
        # The store's own disk, not the repository: said as such (it tells nothing of the address).
        return FetchProblem("StoreFull", "the assignment store's disk is full, so the source could not be "
                                         "fetched: tell your admin; it is tried again later", detail)
    if "unadvertised object" in text or "not our ref" in text:
        return FetchProblem("CommitNotAllowed", f"the server does not let {what} be fetched by its commit "
                                                "id: use a branch or tag name", detail)
    if secret and any(f"returned error: {code}" in text for code in (301, 302, 303, 307, 308)):
        # Said only with a token (its Secret already allows this address): it was not followed.
        return FetchProblem("Redirected", f"the repository at {url} answers with a redirect to another "
                                          "address; a token is never sent through a redirect: put the "
                                          "repository's current address in spec.source.url", detail)
    if secret and any(s in text for s in ("authentication failed", "could not read username",
                                          "could not read password", "terminal prompts disabled",
                                          "returned error: 401", "returned error: 403")):
        return FetchProblem("Unauthorized", f"the repository refused the token in the Secret {secret!r}: "
                                            "check that it is current and may read the repository", detail)
    private = "" if secret else (" (a private repository looks like this without a token: put one in a "
                                 "Secret and name it in spec.source.tokenSecret)")
    return FetchProblem("Unreachable", f"the repository at {url} is not reachable or not a git repository"
                                        f"{private}; it is tried again later", detail)


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
    # Its own process group: git runs git-remote-http (curl) as a child, which holds the pipes
    # open; killing git alone left it waiting on a server that never answers (until curl's low
    # speed limit, 60 s), and asyncio waits for the pipes: past every time limit here.
    process = await asyncio.create_subprocess_exec(
        GIT, *args, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    async def watchdog() -> None:
        assert watch is not None
        folder, limit = watch
        while True:
            await asyncio.sleep(0.5)
            if await asyncio.to_thread(_size, folder) > limit:
                kill()
                raise TooLarge(f"the source is larger than {size_words(int(limit / DISK_SLACK))} (the limit)")

    guard = asyncio.create_task(watchdog()) if watch is not None else None
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        kill()
        await process.wait()
        raise FetchProblem("Unreachable", "the repository is not reachable or not a git repository; it is "
                                           "tried again later", f"git did not finish within {int(timeout)} s"
                           ) from None
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


# What the form's check says when the repository does not answer as one: the same words whatever
# went wrong (no such host, a refused port, an HTTP error, a web page that is not git), so the
# check tells a teacher nothing about what else listens where the platform runs.
NOT_A_REPOSITORY = ("is not reachable from the platform or is not a git repository (a private one also "
                    "looks like this: name its token in the form)")


def ref_found(listing: str, ref: str) -> bool:
    """Whether `git ls-remote`'s `listing` has the branch or tag `ref` ("" the default branch;
    a 40-character commit id cannot be listed: the fetch checks it)."""
    names = {line.split("\t", 1)[1].strip() for line in listing.splitlines() if "\t" in line}
    if not ref:
        return "HEAD" in names
    if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref):
        return True
    return bool(names & {ref, f"refs/heads/{ref}", f"refs/tags/{ref}"})


async def check(url: str, ref: str, *, work: Path, timeout: float = 15.0) -> FetchProblem | None:
    """Whether `ref` of the public repository `url` can be fetched: `git ls-remote` (it lists the
    branches and tags, downloading nothing); None when it can."""
    await asyncio.to_thread(work.mkdir, parents=True)
    try:
        env = _env(work, "")
        try:
            code, out, _ = await _git("ls-remote", "--", url, cwd=work, env=env, timeout=timeout)
        except FetchProblem:
            code, out = 1, ""
        # A web server that is not git answers a listing of nothing (git reads it as the old "dumb"
        # protocol): no refs at all is no repository here (an empty one has nothing to hand out).
        if code != 0 or "\t" not in out:
            return FetchProblem("Unreachable", f"the repository at {url} {NOT_A_REPOSITORY}")
        if not ref_found(out, ref):
            if not ref:
                return FetchProblem("UnknownRef", "the repository has no default branch (is it empty?): "
                                                  "name a branch or tag")
            return FetchProblem("UnknownRef", f"the repository has no branch or tag {ref!r}")
        return None
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
