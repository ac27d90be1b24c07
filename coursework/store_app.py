"""`userland store`: the assignment store's HTTP API (docs/assignments.md, "Where things live").

Who may ask what (platform/coursework.py signs both kinds of caller):

| request | operator | web UI | a worker Pod (its job's scope) |
|---|---|---|---|
| POST .../fetch: fetch a commit of the source once | yes | | |
| GET .../state: every result, receipt and upload | yes | yes | |
| GET .../sources/<key>.tar | | | a hand-out of that source |
| POST .../results | | | for its own students and kind of work |
| PUT .../copies/<round>/<template>/<login> (written once) | | | a collection of that round, that student |
| GET .../feedback/<login>.tar | | | a feedback return to that student |
| PUT .../feedback[/<login>] (a zip from staff) | | yes | |
| GET .../collected.zip[?login=] (streamed) | | yes | |

Nothing else is served; a request without a valid signature or scope is a 403 that says why in
the store's log only. The token for a private repository arrives with a fetch, is given to git
for that fetch, and is never logged or kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tarfile
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from aiohttp import web

from userland.coursework import gitfetch, zipped
from userland.coursework.pipes import produce
from userland.coursework.store_files import BadName, StoreFiles
from userland.coursework.trees import BadArchive, Limits, TooLarge
from userland.platform import coursework, naming
from userland.platform.assignments import relative_path
from userland.platform.coursework import JobScope, ScopeRefused, WorkKind
from userland.platform.models import InvalidSpec
from userland.platform.objects import rfc3339

log = logging.getLogger("userland.store")
JSON = dict[str, Any]
FEEDBACK_LIMITS = Limits(files=20_000, bytes=1024**3)
# Uploads written to disk at once (the others wait, unread: TCP holds them back); each holds one
# chunk in memory while it is written. 500 students' copies arriving together at a deadline
# otherwise held 500 chunks: 680 MB (bench/assignment_bench.py, before this bound).
UPLOADS_AT_ONCE = 32
CHUNK = 256 * 1024


@dataclass(frozen=True)
class StoreOptions:
    data: Path
    secret: str
    source_limits: Limits
    copy_limits: Limits
    fetch_timeout: float = 600.0


STORE = web.AppKey("userland_store", StoreFiles)
OPTIONS = web.AppKey("userland_store_options", StoreOptions)
LOCKS = web.AppKey("userland_store_locks", dict)
UPLOADS = web.AppKey("userland_store_uploads", asyncio.Semaphore)


def _names(request: web.Request) -> tuple[str, str]:
    namespace, assignment = request.match_info["ns"], request.match_info["asg"]
    if not (naming.is_valid_dns_label(namespace) and naming.is_valid_dns_label(assignment)):
        raise web.HTTPNotFound()
    return namespace, assignment


def _refuse(request: web.Request, why: str) -> web.HTTPForbidden:
    log.warning("request refused", extra={"path": request.path, "method": request.method, "why": why})
    return web.HTTPForbidden(text="refused\n")


def signed(request: web.Request, *allowed: str) -> str:
    """The purpose of a request the operator or the web UI signed (403 otherwise)."""
    options = request.app[OPTIONS]
    try:
        purpose = coursework.verify_request(
            options.secret, request.headers.get(coursework.SIGNATURE_HEADER, ""), request.method,
            request.path_qs)
    except ScopeRefused as err:
        raise _refuse(request, str(err)) from None
    if purpose not in allowed:
        raise _refuse(request, f"not for the {purpose}")
    return purpose


def scoped(request: web.Request, kind: WorkKind) -> JobScope:
    """The job scope a worker Pod presents, for this assignment and kind of work (403 otherwise)."""
    namespace, assignment = _names(request)
    try:
        scope = coursework.verify_job(request.app[OPTIONS].secret,
                                      request.headers.get(coursework.SCOPE_HEADER, ""),
                                      request.headers.get(coursework.TOKEN_HEADER, ""))
    except ScopeRefused as err:
        raise _refuse(request, str(err)) from None
    if (scope.kind, scope.namespace, scope.assignment) != (kind, namespace, assignment):
        raise _refuse(request, "the job is for other work")
    return scope


async def _body_to_file(request: web.Request, target: Path, limit: int) -> int:
    size = 0
    out = await asyncio.to_thread(open, target, "wb")
    try:
        async for chunk in request.content.iter_chunked(CHUNK):
            size += len(chunk)
            if size > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
            await asyncio.to_thread(out.write, chunk)
    finally:
        await asyncio.to_thread(out.close)
    return size


# ----- the operator -----

async def fetch(request: web.Request) -> web.Response:
    signed(request, "operator")
    namespace, assignment = _names(request)
    files, options = request.app[STORE], request.app[OPTIONS]
    try:
        body = await request.json()
        url, ref = str(body["url"]), str(body.get("ref") or "")
        sub_path = relative_path(body.get("subPath") or "", "subPath", allow_empty=True)
        token, secret_name = str(body.get("token") or ""), str(body.get("secret") or "")
    except (ValueError, KeyError, InvalidSpec) as err:
        raise web.HTTPBadRequest(text=f"{err}\n") from None
    lock = request.app[LOCKS].setdefault((namespace, assignment), asyncio.Lock())
    async with lock:  # one fetch per assignment at a time: a retry waits for the first
        out = files.temp()
        try:
            commit, result = await gitfetch.fetch(
                url, ref, sub_path, token=token, secret_name=secret_name, work=files.temp(".git"), out=out,
                limits=options.source_limits, timeout=options.fetch_timeout)
        except gitfetch.FetchProblem as problem:
            out.unlink(missing_ok=True)
            log.info("fetch failed", extra={"assignment": f"{namespace}/{assignment}",
                                            "reason": problem.reason})
            return web.json_response({"reason": problem.reason, "message": problem.message}, status=422)
        except (TooLarge, BadArchive) as err:
            out.unlink(missing_ok=True)
            return web.json_response({"reason": "TooLarge" if isinstance(err, TooLarge) else "BadArchive",
                                      "message": str(err)}, status=422)
        key = f"{commit}-{hashlib.sha256(sub_path.encode()).hexdigest()[:8]}"
        index = {"commit": commit, "ref": ref, "subPath": sub_path, "fetchedAt": rfc3339(),
                 **result.to_json()}
        await asyncio.to_thread(files.put_source, namespace, assignment, key, out, index)
    log.info("fetched", extra={"assignment": f"{namespace}/{assignment}", "commit": commit,
                               "files": result.files, "bytes": result.bytes})
    return web.json_response({"key": key, **{k: v for k, v in index.items() if k != "files"}})


async def state(request: web.Request) -> web.Response:
    signed(request, "operator", "web")
    namespace, assignment = _names(request)
    version, data = await asyncio.to_thread(request.app[STORE].state, namespace, assignment)
    etag = f'"{version}"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})
    return web.json_response({"version": version, **data}, headers={"ETag": etag})


# ----- worker Pods -----

async def source(request: web.Request) -> web.StreamResponse:
    scope = scoped(request, "handout")
    namespace, assignment = _names(request)
    key = request.match_info["key"]
    if key != scope.source:
        raise _refuse(request, "another source")
    try:
        path = request.app[STORE].source_tar(namespace, assignment, key)
    except BadName:
        raise web.HTTPNotFound() from None
    if not path.exists():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


async def results(request: web.Request) -> web.Response:
    kind = request.query.get("kind", "")
    if kind not in coursework.WORK_KINDS:
        raise web.HTTPBadRequest(text="kind?\n")
    scope = scoped(request, kind)  # type: ignore[arg-type]
    namespace, assignment = _names(request)
    try:
        entries = (await request.json())["results"]
        assert isinstance(entries, list)
    except (ValueError, KeyError, AssertionError):
        raise web.HTTPBadRequest(text="results?\n") from None
    files = request.app[STORE]
    for entry in entries:
        template, login = str(entry.get("template")), str(entry.get("login"))
        if not scope.has(template, login):
            raise _refuse(request, "a student outside the job")
        result = {k: v for k, v in entry.items() if k not in ("template", "login")}
        try:
            await asyncio.to_thread(files.put_result, namespace, assignment, kind, template, login, result,
                                    round_=scope.round if kind == "collect" else "")
        except BadName as err:
            raise web.HTTPBadRequest(text=f"{err}\n") from None
    return web.json_response({"stored": len(entries)})


async def put_copy(request: web.Request) -> web.Response:
    scope = scoped(request, "collect")
    namespace, assignment = _names(request)
    round_, template, login = (request.match_info[k] for k in ("round", "template", "login"))
    if round_ != scope.round or not scope.has(template, login):
        raise _refuse(request, "another round or student")
    files, options = request.app[STORE], request.app[OPTIONS]
    taken_at = request.headers.get(coursework.TAKEN_AT_HEADER, "") or rfc3339()
    temp = files.temp()
    try:
        async with request.app[UPLOADS]:
            await _body_to_file(request, temp, options.copy_limits.bytes + 64 * 1024 * 1024)
            receipt, kept = await asyncio.to_thread(files.put_copy, namespace, assignment, round_, template,
                                                    login, temp, taken_at=taken_at)
    except (BadArchive, TooLarge) as err:
        raise web.HTTPBadRequest(text=f"{err}\n") from None
    except BadName:
        raise web.HTTPNotFound() from None
    finally:
        temp.unlink(missing_ok=True)
    if not kept:
        log.info("copy already taken", extra={"assignment": f"{namespace}/{assignment}", "round": round_,
                                              "environment": f"{template}/{login}"})
    return web.json_response(receipt, status=201 if kept else 409)


async def feedback_tar(request: web.Request) -> web.StreamResponse:
    scope = scoped(request, "feedback")
    namespace, assignment = _names(request)
    login = request.match_info["login"]
    if not any(m.login == login for m in scope.members):
        raise _refuse(request, "another student")
    try:
        path = request.app[STORE].feedback_tar(namespace, assignment, login)
    except BadName:
        raise web.HTTPNotFound() from None
    if not path.exists():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


# ----- the web UI -----

async def put_feedback(request: web.Request) -> web.Response:
    """A zip of feedback from staff: one folder per login, or (`/feedback/<login>`) one student's
    files; a single file that is not a zip is that student's one file (`?name=`)."""
    signed(request, "web")
    namespace, assignment = _names(request)
    only = request.match_info.get("login")
    if only is not None and (not naming.is_valid_login(only) or only != only.lower()):
        raise web.HTTPNotFound()
    files = request.app[STORE]
    upload = files.temp(".zip")
    made: list[Path] = []

    def make_tar() -> Path:
        made.append(files.temp())
        return made[-1]

    try:
        await _body_to_file(request, upload, FEEDBACK_LIMITS.bytes)
        name = request.query.get("name", "")
        if only is not None and name and not zipfile.is_zipfile(upload):
            single = relative_path(name.rsplit("/", 1)[-1] or "feedback", "name")
            split = await asyncio.to_thread(_one_file, upload, only, single, make_tar)
        else:
            split = await asyncio.to_thread(zipped.split_feedback, upload, make_tar, FEEDBACK_LIMITS,
                                            only=only)
        uploaded_at = rfc3339()
        for login, student in split.students.items():
            meta = {"files": student.files, "bytes": student.bytes, "sha256": student.sha256,
                    "uploadedAt": uploaded_at}
            await asyncio.to_thread(files.put_feedback, namespace, assignment, login, student.tar, meta)
    except zipfile.BadZipFile:
        return web.json_response({"message": "That file is not a zip."}, status=400)
    except (TooLarge, InvalidSpec) as err:
        return web.json_response({"message": str(err)}, status=400)
    finally:
        upload.unlink(missing_ok=True)
        for path in made:
            path.unlink(missing_ok=True)
    return web.json_response({"students": {login: {"files": s.files, "bytes": s.bytes}
                                           for login, s in split.students.items()},
                              "ignored": split.ignored})


def _one_file(upload: Path, login: str, name: str, make_tar: Callable[[], Path]) -> zipped.Split:
    size = upload.stat().st_size
    student = zipped.FeedbackFiles(make_tar(), files=1, bytes=size)
    with tarfile.open(student.tar, "w", format=tarfile.PAX_FORMAT) as archive, open(upload, "rb") as data:
        info = tarfile.TarInfo(name)
        info.size = size
        info.mode = 0o644
        archive.addfile(info, data)
    with open(upload, "rb") as data:
        student.digests.append((name, hashlib.file_digest(data, "sha256").hexdigest()))
    return zipped.Split(students={login: student})


async def collected_zip(request: web.Request) -> web.StreamResponse:
    signed(request, "web")
    namespace, assignment = _names(request)
    login = request.query.get("login") or None
    try:
        copies = request.app[STORE].latest_copies(namespace, assignment, login)
    except BadName:
        raise web.HTTPNotFound() from None
    entries = [zipped.ZipEntry(c.login, c.template, c.tar) for c in copies]
    nested = request.query.get("nested") == "1"
    response = web.StreamResponse(headers={"Content-Type": "application/zip",
                                           "X-Userland-Students": str(len({e.login for e in entries}))})
    await response.prepare(request)
    pipe, done = await produce(lambda out: zipped.write_collected(entries, cast(BinaryIO, out),
                                                                  nested=nested))
    try:
        async for chunk in pipe.chunks():
            await response.write(chunk)
        await done
    except (ConnectionResetError, asyncio.CancelledError):
        pipe.cancelled = True
        raise
    await response.write_eof()
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


@web.middleware
async def log_errors(request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception:
        log.exception("store request failed", extra={"path": request.path, "method": request.method})
        return web.json_response({"message": "the store failed; see its log"}, status=500)


def create_store_app(options: StoreOptions) -> web.Application:
    app = web.Application(middlewares=[log_errors], client_max_size=1024**2,
                          handler_args={"max_field_size": 16 * 1024})
    app[OPTIONS] = options
    app[STORE] = StoreFiles(options.data, copy_limits=options.copy_limits)
    app[LOCKS] = {}
    app[UPLOADS] = asyncio.Semaphore(UPLOADS_AT_ONCE)
    base = "/v1/a/{ns}/{asg}"
    app.router.add_get("/healthz", healthz)
    app.router.add_post(f"{base}/fetch", fetch)
    app.router.add_get(f"{base}/state", state)
    app.router.add_get(base + "/sources/{key}.tar", source)
    app.router.add_post(f"{base}/results", results)
    app.router.add_put(base + "/copies/{round}/{template}/{login}", put_copy)
    app.router.add_get(base + "/feedback/{login}.tar", feedback_tar)
    app.router.add_put(f"{base}/feedback", put_feedback)
    app.router.add_put(base + "/feedback/{login}", put_feedback)
    app.router.add_get(f"{base}/collected.zip", collected_zip)

    async def cleanup(app: web.Application) -> None:
        await asyncio.to_thread(shutil.rmtree, options.data / "tmp", True)

    app.on_cleanup.append(cleanup)
    return app

