"""A real git server on loopback: git's own `git-http-backend` (the smart HTTP protocol GitHub,
GitLab and Gitea speak) behind a small aiohttp CGI bridge. `make run` serves the project's
starter repository with it; the tests serve theirs, public and private.

`create_git_app(root, tokens)` serves every bare repository under `root` at `/<name>.git/...`;
a repository named in `tokens` is private: it answers 401 (as hosting services do) unless the
request carries HTTP Basic credentials whose password is its token. Fetching a commit by its id
is allowed (`uploadpack.allowAnySHA1InWant`, as GitHub allows for reachable commits).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

GIT = shutil.which("git") or "/usr/bin/git"


def _authorized(request: web.Request, token: str) -> bool:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        _user, _, password = base64.b64decode(value).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return hmac.compare_digest(password, token)


def create_git_app(root: Path, tokens: Mapping[str, str] | None = None) -> web.Application:
    tokens = dict(tokens or {})

    async def backend(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        repository = path.split("/", 1)[0]
        if ".." in path.split("/") or not repository.endswith(".git"):
            raise web.HTTPNotFound()
        if repository in tokens and not _authorized(request, tokens[repository]):
            raise web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="git"'})
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": "/" + path,
            "QUERY_STRING": request.query_string,
            "REQUEST_METHOD": request.method,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "REMOTE_ADDR": request.remote or "",
            "REMOTE_USER": "git" if repository in tokens else "",
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "uploadpack.allowAnySHA1InWant",
            "GIT_CONFIG_VALUE_0": "true",
            "GIT_CONFIG_KEY_1": "safe.directory",
            "GIT_CONFIG_VALUE_1": "*",
        }
        if encoding := request.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if protocol := request.headers.get("Git-Protocol"):
            env["HTTP_GIT_PROTOCOL"] = protocol
        process = await asyncio.create_subprocess_exec(
            GIT, "http-backend", env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)
        assert process.stdin is not None and process.stdout is not None

        async def feed() -> None:
            assert process.stdin is not None
            try:
                async for chunk in request.content.iter_chunked(64 * 1024):
                    process.stdin.write(chunk)
                    await process.stdin.drain()
            finally:
                with contextlib.suppress(OSError):
                    process.stdin.close()

        feeding = asyncio.create_task(feed())
        try:
            status, headers = 200, {}
            while (line := (await process.stdout.readline()).rstrip(b"\r\n")):
                name, _, value = line.decode(errors="replace").partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                else:
                    headers[name.strip()] = value.strip()
            response = web.StreamResponse(status=status, headers=headers)
            await response.prepare(request)
            while chunk := await process.stdout.read(64 * 1024):
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await feeding
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    app = web.Application(client_max_size=1024**3)
    app.router.add_route("*", "/{path:.+}", backend)
    return app


def make_repository(root: Path, name: str, files: Mapping[str, bytes | str | None], *,
                    message: str = "Starter files", branch: str = "main") -> str:
    """A bare repository `<root>/<name>.git` whose branch holds `files` in one new commit (on top of
    what is there; None removes a file; a str starting with "->" makes a link); the commit id.
    Author and date are fixed, so the same files make the same commit."""
    bare = root / f"{name}.git"
    work = root / f".work-{name}"
    env = {**os.environ, "GIT_AUTHOR_NAME": "Userland", "GIT_AUTHOR_EMAIL": "userland@localhost",
           "GIT_COMMITTER_NAME": "Userland", "GIT_COMMITTER_EMAIL": "userland@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}

    def git(*args: str, cwd: Path) -> str:
        done = subprocess.run([GIT, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    root.mkdir(parents=True, exist_ok=True)
    if not bare.exists():
        git("init", "-q", "--bare", "-b", branch, str(bare), cwd=root)
    shutil.rmtree(work, ignore_errors=True)
    git("init", "-q", "-b", branch, str(work), cwd=root)
    try:
        if git("ls-remote", str(bare), f"refs/heads/{branch}", cwd=work):
            git("fetch", "-q", str(bare), branch, cwd=work)
            git("reset", "-q", "--hard", "FETCH_HEAD", cwd=work)
        for path, content in files.items():
            target = work / path
            if content is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str) and content.startswith("->"):
                target.unlink(missing_ok=True)
                target.symlink_to(content[2:])
            else:
                data = content.encode() if isinstance(content, str) else content
                target.write_bytes(data)
                target.chmod(0o755 if data.startswith(b"#!") else 0o644)
        git("add", "-A", cwd=work)
        if git("status", "--porcelain", cwd=work):
            git("commit", "-q", "-m", message, cwd=work)
        git("push", "-q", str(bare), f"HEAD:refs/heads/{branch}", cwd=work)
        return git("rev-parse", "HEAD", cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
