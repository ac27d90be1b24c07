"""What staff do to an Assignment in the web UI, each audited (who, what, which students, result):

- POST .../actions: hand out again, collect now, return feedback (or stop), delete (confirmed);
- POST .../students/<login>/extend and .../grade: a student's own deadline; their grade and comment;
- POST .../feedback and .../students/<login>/feedback: feedback files, streamed to the store as they
  arrive (a zip with a folder per login, or one student's file); the form's CSRF token is its first
  field, checked before a byte of the file is read (web/rules/security.py `STREAMED_UPLOADS`);
- GET .../collected.zip and .../students/<login>/collected.zip: students' copies, streamed from
  the store (never held here); GET .../grades.csv.

Every change is to the Assignment object (its spec, or an annotation with the time of the
request); the operator does the work. The store is reached with the web UI's own signature;
which staff may ask is decided here, by course role.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, web

from userland.platform.clients.kube import ASSIGNMENTS, NotFound
from userland.platform.clients.store_client import StoreClient, StoreError, StoreUnavailable
from userland.platform.model import naming
from userland.platform.model.assignments import COMMENT_MAX, GRADE_MAX
from userland.platform.model.coursework import size_words
from userland.platform.model.objects import rfc3339
from userland.web.access import Refused, require_course
from userland.web.context import identity_of, web_context
from userland.web.routes_assignments import STORE, assignment_or_404, templates_of
from userland.web.routes_audit import record_action
from userland.web.routes_course import course_watch
from userland.web.routes_lti_sync import pass_back_soon
from userland.web.rules import assignments as views
from userland.web.rules import security
from userland.web.rules.courses import Course, may

log = logging.getLogger(__name__)
JSON = dict[str, Any]
CHUNK = 256 * 1024
ACTIONS = ("handout", "collect", "return", "stop_return", "delete", "regrade")


def store_client(request: web.Request) -> StoreClient:
    ctx = web_context(request)
    client = ctx.extras.get(STORE)
    if not isinstance(client, StoreClient):
        raise Refused(ctx.error(request, 503, "Assignments are not set up",
                                "The web UI has no assignment store to reach (USERLAND_STORE_SECRET is not "
                                "set). "
                                "Tell your admin."))
    return client


async def _patch(request: web.Request, course: Course, name: str, patch: JSON) -> None:
    ctx = web_context(request)
    assert ctx.kube is not None
    try:
        await ctx.kube.merge_patch(ASSIGNMENTS, course.namespace, name, patch)
    except NotFound:
        raise Refused(ctx.error(request, 404, "No such assignment", "It was deleted meanwhile.")) from None


def _annotate(key: str) -> JSON:
    return {"metadata": {"annotations": {key: rfc3339()}}}


def _back(course: Course, name: str, done: str = "", login: str = "") -> web.HTTPSeeOther:
    path = f"/courses/{course.namespace}/assignments/{name}" + (f"/students/{login}" if login else "")
    return web.HTTPSeeOther(path + (f"?done={done}" if done else ""))


async def action(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "assign", why="act on assignments")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    name = obj["metadata"]["name"]
    form = await request.post()
    chosen = form.get("action")
    if chosen not in ACTIONS:
        return ctx.error(request, 400, "Unknown action", "Use the buttons of the assignment's page.")
    title = str((obj.get("spec") or {}).get("title") or name)
    if chosen == "delete" and form.get("confirmed") != "yes":
        return ctx.page(request, "assignment_delete.html", nav_courses=True, title=f"Delete {title}?",
                        course=course, asg=name, spec=obj.get("spec") or {},
                        students=len((obj.get("status") or {}).get("students") or []))
    await ctx.redis.ping()  # the audit log must be able to record it
    assert ctx.kube is not None
    if chosen == "handout":
        await _patch(request, course, name, _annotate(naming.ANNOTATION_HANDOUT_AT))
        result = "handing out again"
    elif chosen == "collect":
        await _patch(request, course, name, _annotate(naming.ANNOTATION_COLLECT_NOW))
        result = "collecting every student's folder now"
    elif chosen == "return":
        await _patch(request, course, name, {**_annotate(naming.ANNOTATION_FEEDBACK_AT),
                                             "spec": {"returnFeedback": True}})
        pass_back_soon(request, course.namespace, name)
        result = "returning feedback"
    elif chosen == "regrade":
        # Every copy graded again, with the tests fetched again (docs/grading.md).
        await _patch(request, course, name, _annotate(naming.ANNOTATION_REGRADE))
        result = "regrading every copy"
    elif chosen == "stop_return":
        await _patch(request, course, name, {"spec": {"returnFeedback": False}})
        result = "no more feedback returned"
    else:
        try:
            await ctx.kube.delete(ASSIGNMENTS, course.namespace, name)
        except NotFound:
            pass
        await record_action(request, course, role, "assignment_delete", [title], f"deleted {name}")
        raise web.HTTPSeeOther(f"/courses/{course.namespace}/assignments?done=deleted")
    await record_action(request, course, role, f"assignment_{chosen}", [title], result)
    raise _back(course, name, chosen)


async def extend(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "assign", why="give extensions")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    name, login = obj["metadata"]["name"], _student(request, obj)
    form = await request.post()
    if form.get("remove") == "yes":
        value: str | None = None
        result = "extension removed"
    else:
        try:
            value = views.rfc3339_from_input(str(form.get("deadline") or ""), str(form.get("zone") or "UTC"),
                                             "new deadline")
        except views.FormProblem as problem:
            return ctx.error(request, 400, "That deadline cannot be used", str(problem))
        if value is None:
            return ctx.error(request, 400, "No deadline",
                             "Choose the student's new deadline, then press Extend.")
        result = f"deadline {value}"
    await ctx.redis.ping()
    await _patch(request, course, name, {"spec": {"extensions": {login: value}}})
    await record_action(request, course, role, "assignment_extend", [f"{login} ({obj['spec'].get('title')})"],
                        result)
    raise _back(course, name, "extended", login)


async def grade(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "grade", why="grade")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    name, login = obj["metadata"]["name"], _student(request, obj)
    form = await request.post()
    given, comment = str(form.get("grade") or "").strip(), str(form.get("comment") or "").strip()
    if len(given) > GRADE_MAX or len(comment) > COMMENT_MAX:
        return ctx.error(request, 400, "Too long",
                         f"A grade has at most {GRADE_MAX} characters, a comment at "
                                                   f"most {COMMENT_MAX}. Nothing was saved.")
    await ctx.redis.ping()
    value = {"grade": given, "comment": comment} if given or comment else None
    outcome = f"grade {given!r}" if given else "grade cleared" if value is None else "comment saved"
    await _patch(request, course, name, {"spec": {"grades": {login: value}}})
    pass_back_soon(request, course.namespace, name)  # sent only once returned
    await record_action(request, course, role, "assignment_grade", [f"{login} ({obj['spec'].get('title')})"],
                        outcome)
    raise _back(course, name, "graded", login)


def _student(request: web.Request, obj: JSON) -> str:
    login = request.match_info["login"].lower()
    if not naming.is_valid_login(login) or login not in {
            e.get("user") for e in (obj.get("status") or {}).get("students") or []}:
        raise Refused(web_context(request).error(request, 404, "Not in this assignment",
                                                 "That student does not receive this assignment."))
    return login


async def _file_part(request: web.Request) -> BodyPartReader:
    """The form's file, after its CSRF token (the first field) checked out; a page otherwise."""
    ctx = web_context(request)
    who = identity_of(request)
    reader = await request.multipart()
    token_part = await reader.next()
    token = ""
    if isinstance(token_part, BodyPartReader) and token_part.name == security.CSRF_FIELD:
        token = (await token_part.read_chunk(512)).decode(errors="replace")
    if not security.csrf_valid(token, ctx.settings.identity_secret, who.login, who.session):
        log.info("csrf token refused", extra={"path": request.path})
        raise Refused(ctx.error(request, 403, "This form has expired",
                                "Open the page again and repeat what you did; nothing was changed."))
    part = await reader.next()
    if not isinstance(part, BodyPartReader) or part.name != "file" or not part.filename:
        raise Refused(ctx.error(request, 400, "No file chosen",
                                "Choose the file to upload, then press Upload."))
    return part


async def _chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await part.read_chunk(CHUNK):
        yield chunk


async def upload_feedback(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "grade", why="upload feedback")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    name = obj["metadata"]["name"]
    login = _student(request, obj) if "login" in request.match_info else None
    store = store_client(request)
    part = await _file_part(request)
    await ctx.redis.ping()
    try:
        answer = await store.put_feedback(course.namespace, name, str(obj["metadata"].get("uid") or ""),
                                          _chunks(part), login=login,
                                          name=part.filename or "")
    except StoreUnavailable:
        return ctx.error(request, 503, "The assignment store is not answering",
                         "Nothing was uploaded. Try again in a moment; if this lasts, tell your admin.")
    except StoreError as err:
        if err.status in (413, 507):  # a quota or the store's disk is full: said in the store's words
            return ctx.error(request, err.status, "No room for this feedback", err.message)
        return ctx.error(request, 400, "That file cannot be used", f"{err.message} Nothing was uploaded.")
    await _patch(request, course, name, _annotate(naming.ANNOTATION_FEEDBACK_AT))
    students = sorted(answer.get("students") or {})
    receiving = {e.get("user") for e in (obj.get("status") or {}).get("students") or []}
    await record_action(request, course, role, "assignment_feedback", students,
                        f"feedback for {len(students)} student{'' if len(students) == 1 else 's'}")
    if login is not None:
        raise _back(course, name, "feedback", login)
    return ctx.page(request, "assignment_feedback.html", nav_courses=True, title=f"Feedback · {course.title}",
                    course=course, asg=name, spec=obj.get("spec") or {},
                    uploaded=answer.get("students") or {},
                    strangers=[s for s in students if s not in receiving],
                    ignored=answer.get("ignored") or [],
                    returning=bool((obj.get("spec") or {}).get("returnFeedback")), size_words=size_words,
                    may_return=may(role, "assign"))


async def download(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "download",
                                        why="download students' work")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    name = obj["metadata"]["name"]
    login = _student(request, obj) if "login" in request.match_info else None
    collected = [e for e in (obj.get("status") or {}).get("students") or []
                 if e.get("collected") and (login is None or e.get("user") == login)]
    if not collected:
        return ctx.error(request, 404, "Nothing collected yet",
                         "No copy has been taken of this work yet: they are taken at the due time, or "
                         "with Collect now.")
    store = store_client(request)
    await ctx.redis.ping()
    several = len((obj.get("spec") or {}).get("templates") or []) > 1
    try:
        upstream = await store.open_zip(course.namespace, name, str(obj["metadata"].get("uid") or ""),
                                        login=login, nested=several)
    except StoreUnavailable:
        return ctx.error(request, 503, "The assignment store is not answering",
                         "Try again in a moment; if this lasts, tell your admin.")
    filename = f"{name}-{login}-collected.zip" if login else f"{name}-collected.zip"
    response = web.StreamResponse(headers={
        **security.SECURITY_HEADERS, "Content-Type": "application/zip", "Cache-Control": "no-store",
        "Content-Disposition": f'attachment; filename="{filename}"'})
    try:
        await response.prepare(request)
        async for chunk in upstream.content.iter_chunked(CHUNK):
            await response.write(chunk)
        await response.write_eof()
    finally:
        upstream.release()
    await record_action(request, course, role, "assignment_download", [login or "every student"],
                        f"{len(collected)} cop{'y' if len(collected) == 1 else 'ies'} of {name}")
    return response


async def grades_csv(request: web.Request) -> web.StreamResponse:
    course, role = await require_course(request, request.match_info["ns"], "download", why="export grades")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    text = io.StringIO()
    writer = csv.writer(text)
    for row in views.csv_rows(obj, templates_of(watch)):
        writer.writerow([views.csv_safe(cell) for cell in row])
    name = obj["metadata"]["name"]
    await record_action(request, course, role, "assignment_export", [str(obj["spec"].get("title"))],
                        f"grades of {name} exported")
    stamp = datetime.now(UTC).strftime("%Y%m%d")
    # A byte-order mark, so spreadsheets read the UTF-8 (names with accents) as such.
    return web.Response(body=("\ufeff" + text.getvalue()).encode(), headers={
        "Content-Type": "text/csv; charset=utf-8", "Cache-Control": "no-store",
        "Content-Disposition": f'attachment; filename="{name}-grades-{stamp}.csv"'})


def setup_assignment_action_routes(app: web.Application) -> None:
    base = "/courses/{ns}/assignments/{name}"
    app.router.add_post(f"{base}/actions", action)
    app.router.add_post(base + "/students/{login}/extend", extend)
    app.router.add_post(base + "/students/{login}/grade", grade)
    app.router.add_post(f"{base}/feedback", upload_feedback)
    app.router.add_post(base + "/students/{login}/feedback", upload_feedback)
    app.router.add_get(f"{base}/collected.zip", download)
    app.router.add_get(base + "/students/{login}/collected.zip", download)
    app.router.add_get(f"{base}/grades.csv", grades_csv)
