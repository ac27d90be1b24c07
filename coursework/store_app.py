"""`userland store`: the assignment store's HTTP API (docs/assignments.md, "Where things live").

Who may ask what (platform/model/coursework.py signs both kinds of caller):

Every assignment's path is `/v1/a/<namespace>/<name>/<uid>`: the Assignment object's uid keeps a
name deleted and made again apart from the first one (store_files.py).

| request | operator | web UI | a worker Pod (its job's scope) |
|---|---|---|---|
| PUT /v1/n/<ns>/live: the assignments that exist (the others are retired) | yes | | |
| PUT .../members: the assignment's current students | yes | | |
| POST .../fetch: fetch a commit of the source once | yes | | |
| POST .../check: can this repository and ref be fetched (the form's check) | | yes | |
| GET .../state: every result, receipt and upload | yes | yes | |
| GET .../sources/<key>.tar | | | a hand-out of that source |
| POST .../results | | | for its own students and kind of work |
| PUT .../copies/<round>/<template>/<login> (written once) | | | a collection of that round, that student |
| GET .../feedback/<login>.tar | | | a feedback return to that student |
| PUT .../feedback[/<login>] (a zip from staff) | | yes | |
| GET .../collected.zip[?login=] (streamed) | | yes | |

The handlers of the operator's and the web UI's repository requests are in store_fetch.py,
the web UI's feedback and collected zip in store_web.py, retirement in store_retention.py;
what they share (signatures, job scopes, bodies) in store_requests.py.

Nothing else is served (but /healthz; /metrics, the volume's use and each course's, is served by
`create_internal_app` on a listener of its own, which worker Pods cannot reach); a request
without a valid signature or scope is a 403 that says why in the store's log only. A write past
an assignment's or a course's quota is a 413 that says which, in words; a write the volume has
no room for is a 507 that says so (docs/runbooks/UserlandStoreVolumeFilling.md).
The token for a private repository arrives with a fetch, is given to git for that fetch, and is
never logged or kept.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import shutil
from collections.abc import Awaitable, Callable

from aiohttp import web

from userland.coursework.store_fetch import CHECKS_AT_ONCE, check, fetch
from userland.coursework.store_files import BadName, QuotaFull, StoreFiles
from userland.coursework.store_grades import (
    grading_copy,
    grading_failures,
    grading_report,
    grading_results,
    grading_tests,
)
from userland.coursework.store_metrics import metrics_text
from userland.coursework.store_requests import (
    CHECKS,
    INTERNAL_OF,
    LOCKS,
    NONCES,
    OPTIONS,
    OUTCOMES,
    STORE,
    SWEEP,
    UPLOADS,
    StoreOptions,
    body_to_file,
    json_body,
    ref_of,
    refuse,
    scoped,
    signed,
)
from userland.coursework.store_retention import put_live, sweep
from userland.coursework.store_web import collected_zip, put_feedback
from userland.coursework.trees import BadArchive, TooLarge
from userland.platform.model import coursework
from userland.platform.model.coursework import NonceBook
from userland.platform.model.objects import rfc3339

log = logging.getLogger("userland.store")
# Uploads written to disk at once (the others wait, unread: TCP holds them back); each holds one
# chunk in memory while it is written. 500 students' copies arriving together at a deadline
# otherwise held 500 chunks: 680 MB (bench/assignment_bench.py, before this bound).
UPLOADS_AT_ONCE = 32


# ----- the operator and the web UI -----

async def state(request: web.Request) -> web.Response:
    await signed(request, "operator", "web")
    version, data = await asyncio.to_thread(request.app[STORE].state, ref_of(request))
    etag = f'"{version}"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})
    return web.json_response({"version": version, **data}, headers={"ETag": etag})


# ----- worker Pods -----

async def source(request: web.Request) -> web.StreamResponse:
    scope = scoped(request, "handout")
    key = request.match_info["key"]
    if key != scope.source:
        raise refuse(request, "another source")
    try:
        path = request.app[STORE].source_tar(ref_of(request), key)
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
    ref = ref_of(request)
    try:
        entries = (await request.json())["results"]
        assert isinstance(entries, list)
    except (ValueError, KeyError, AssertionError):
        raise web.HTTPBadRequest(text="results?\n") from None
    files = request.app[STORE]
    for entry in entries:
        template, login = str(entry.get("template")), str(entry.get("login"))
        if not scope.has(template, login):
            raise refuse(request, "a student outside the job")
        result = {k: v for k, v in entry.items() if k not in ("template", "login")}
        try:
            await asyncio.to_thread(files.put_result, ref, kind, template, login, result,
                                    round_=scope.round if kind == "collect" else "")
        except BadName as err:
            raise web.HTTPBadRequest(text=f"{err}\n") from None
    return web.json_response({"stored": len(entries)})


async def put_copy(request: web.Request) -> web.Response:
    scope = scoped(request, "collect")
    ref = ref_of(request)
    round_, template, login = (request.match_info[k] for k in ("round", "template", "login"))
    if round_ != scope.round or not scope.has(template, login):
        raise refuse(request, "another round or student")
    files, options = request.app[STORE], request.app[OPTIONS]
    taken_at = request.headers.get(coursework.TAKEN_AT_HEADER, "") or rfc3339()
    temp = files.temp()
    try:
        async with request.app[UPLOADS]:
            await body_to_file(request, temp, options.copy_limits.bytes + 64 * 1024 * 1024)
            receipt, kept = await asyncio.to_thread(files.put_copy, ref, round_, template,
                                                    login, temp, taken_at=taken_at)
    except (BadArchive, TooLarge) as err:
        raise web.HTTPBadRequest(text=f"{err}\n") from None
    except QuotaFull as err:
        raise web.HTTPRequestEntityTooLarge(max_size=0, actual_size=0, text=f"{err}\n") from None
    except BadName:
        raise web.HTTPNotFound() from None
    finally:
        temp.unlink(missing_ok=True)
    if not kept:
        log.info("copy already taken", extra={"assignment": f"{ref.namespace}/{ref.name}", "round": round_,
                                              "environment": f"{template}/{login}"})
    return web.json_response(receipt, status=201 if kept else 409)


async def feedback_tar(request: web.Request) -> web.StreamResponse:
    scope = scoped(request, "feedback")
    login = request.match_info["login"]
    if not any(m.login == login for m in scope.members):
        raise refuse(request, "another student")
    try:
        path = request.app[STORE].feedback_tar(ref_of(request), login)
    except BadName:
        raise web.HTTPNotFound() from None
    if not path.exists():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


# ----- the operator's members, and health -----

async def put_members(request: web.Request) -> web.Response:
    """The operator: the assignment's current students' environments."""
    raw = await signed(request, "operator")
    ref = ref_of(request)
    try:
        body = json_body(raw)
        members = [(str(t), str(login)) for t, login in body["members"]]
    except (ValueError, KeyError, TypeError):
        raise web.HTTPBadRequest(text="members?\n") from None
    try:
        await asyncio.to_thread(request.app[STORE].put_members, ref, members)
    except BadName as err:
        raise web.HTTPBadRequest(text=f"{err}\n") from None
    return web.json_response({"members": len(members)})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def metrics(request: web.Request) -> web.Response:
    files = request.app[INTERNAL_OF][STORE]
    counted = request.app[INTERNAL_OF][OUTCOMES]
    text = await asyncio.to_thread(metrics_text, files, dict(counted))
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"Cache-Control": "no-store"})


@web.middleware
async def log_errors(request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            log.exception("store request failed", extra={"path": request.path, "method": request.method})
            return web.json_response({"message": "the store failed; see its log"}, status=500)
        # The volume is full: this write is refused, nothing half-written is kept (uploads go to
        # tmp first), and the writer is told in words (docs/runbooks/UserlandStoreVolumeFilling.md).
        log.error("store volume full", extra={"path": request.path, "method": request.method})
        return web.json_response({"message": (
            "The assignment store's disk is full: nothing was kept. Tell your admin (the store's "
            "volume needs room: docs/runbooks/UserlandStoreVolumeFilling.md).")}, status=507)
    except Exception:
        log.exception("store request failed", extra={"path": request.path, "method": request.method})
        return web.json_response({"message": "the store failed; see its log"}, status=500)


def create_store_app(options: StoreOptions) -> web.Application:
    app = web.Application(middlewares=[log_errors], client_max_size=1024**2,
                          handler_args={"max_field_size": 16 * 1024})
    app[OPTIONS] = options
    app[STORE] = StoreFiles(options.data, copy_limits=options.copy_limits, quotas=options.quotas)
    app[LOCKS] = {}
    app[NONCES] = NonceBook()
    app[UPLOADS] = asyncio.Semaphore(UPLOADS_AT_ONCE)
    app[CHECKS] = asyncio.Semaphore(CHECKS_AT_ONCE)
    app[OUTCOMES] = collections.Counter()
    base = "/v1/a/{ns}/{asg}/{uid}"
    app.router.add_get("/healthz", healthz)
    app.router.add_put("/v1/n/{ns}/live", put_live)
    app.router.add_put(f"{base}/members", put_members)
    app.router.add_post(f"{base}/fetch", fetch)
    app.router.add_post("/v1/a/{ns}/{asg}/check", check)
    app.router.add_get(f"{base}/state", state)
    app.router.add_get(base + "/sources/{key}.tar", source)
    app.router.add_post(f"{base}/results", results)
    app.router.add_put(base + "/copies/{round}/{template}/{login}", put_copy)
    app.router.add_get(base + "/feedback/{login}.tar", feedback_tar)
    app.router.add_put(f"{base}/feedback", put_feedback)
    app.router.add_put(base + "/feedback/{login}", put_feedback)
    app.router.add_get(f"{base}/collected.zip", collected_zip)
    app.router.add_get(f"{base}/grading/copy.tar", grading_copy)
    app.router.add_get(f"{base}/grading/tests.tar", grading_tests)
    app.router.add_post(f"{base}/grading/report", grading_report)
    app.router.add_post(f"{base}/grading/failures", grading_failures)
    app.router.add_get(base + "/grading/{kind:results|checks}/{template}/{login}", grading_results)

    async def start_sweep(app: web.Application) -> None:
        app[SWEEP] = asyncio.create_task(sweep(app))

    async def cleanup(app: web.Application) -> None:
        app[SWEEP].cancel()
        await asyncio.to_thread(shutil.rmtree, options.data / "tmp", True)

    app.on_startup.append(start_sweep)
    app.on_cleanup.append(cleanup)
    return app



def create_internal_app(store: web.Application) -> web.Application:
    """The store's internal listener: /healthz and /metrics (for Prometheus), apart from the API
    worker Pods reach (deploy/networkpolicies.yaml admits it from outside course namespaces)."""
    app = web.Application()
    app[INTERNAL_OF] = store
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app
