"""Grading in the web UI (docs/grading.md): staff open a student's whole results and ask for a
regrade; a student opens their own results on /me, as far as the visibility rules allow.

- GET /courses/<ns>/assignments/<name>/students/<login>/results: every test, hidden ones too
  (marked), with its output (as text, never rendered);
- POST /courses/<ns>/assignments/<name>/students/<login>/regrade: that student's copy graded again
  (audited);
- GET /me/results/<ns>/<name>/<template>: the signed-in student's own results, filtered by
  web/rules/grading.py (no hidden test, no total while a test is held back);
- POST /me/check/<ns>/<name>/<template>: Check my work: the signed-in student asks for their
  folder as it is now to be run through the visible tests (before their deadline, once per
  USERLAND_CHECK_INTERVAL_SECONDS per course, audited); GET the same address: that check's
  visible tests. Only the signed-in login's own environment is reachable: the address has no
  login in it.

The results come from the store with the web UI's signature; which staff may see them is decided
here by course role, and a student sees only their own entry.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

import redis.exceptions
from aiohttp import web

from userland.platform.clients.kube import ASSIGNMENTS, NotFound
from userland.platform.clients.store_client import StoreClient, StoreError, StoreUnavailable
from userland.platform.model import keyspace, naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.checks import check_annotation, check_words
from userland.platform.model.gradescope import Results, parse_results
from userland.platform.model.models import parse_time
from userland.platform.model.objects import rfc3339
from userland.web.access import Refused, require_course
from userland.web.audit import AuditEntry
from userland.web.context import identity_of, web_context
from userland.web.routes_assignment_actions import _back, _patch, _student, store_client
from userland.web.routes_assignments import assignment_or_404
from userland.web.routes_audit import audit_log, record_action
from userland.web.routes_course import class_state, course_watch
from userland.web.rules.grading import CHECK_TOO_SOON, check_results, grading_row, student_results

JSON = dict[str, Any]
log = logging.getLogger(__name__)


async def _stored(request: web.Request, client: StoreClient, obj: JSON, template: str,
                  login: str) -> JSON | None:
    meta = obj.get("metadata") or {}
    try:
        return await client.grading_results(str(meta.get("namespace")), str(meta.get("name")),
                                            str(meta.get("uid")), template, login)
    except (StoreUnavailable, StoreError):
        raise Refused(web_context(request).error(
            request, 503, "The results cannot be read just now",
            "The assignment store does not answer. Try again in a minute.")) from None


def _max_score(obj: JSON) -> float | None:
    most = ((obj.get("status") or {}).get("grading") or {}).get("maxScore")
    return float(most) if isinstance(most, int | float) and not isinstance(most, bool) else None


async def staff_results(request: web.Request) -> web.Response:
    ctx = web_context(request)
    course, _ = await require_course(request, request.match_info["ns"], "view")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    login = _student(request, obj)
    entries = [e for e in (obj.get("status") or {}).get("students") or [] if e.get("user") == login]
    shown = []
    for entry in entries:
        stored = await _stored(request, store_client(request), obj, str(entry.get("template")), login)
        results = parse_results(json.dumps(stored.get("results")).encode()) if stored else None
        shown.append((entry, grading_row(entry.get("grading"), _max_score(obj)),
                      results if isinstance(results, Results) else None))
    spec = obj.get("spec") or {}
    return ctx.page(request, "grading_results.html", nav_courses=True,
                    title=f"{login} · results · {spec.get('title')}", course=course,
                    asg=obj["metadata"]["name"], spec=spec, login=login, shown=shown, staff=True)


async def regrade_student(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "assign", why="ask for a regrade")
    watch = await course_watch(request, course)
    obj = await assignment_or_404(request, watch, course)
    login = _student(request, obj)
    name = obj["metadata"]["name"]
    await ctx.redis.ping()  # the audit log must be able to record it
    await _patch(request, course, name, {"metadata": {"annotations": {
        naming.ANNOTATION_REGRADE: f"{rfc3339()} {login}"}}})
    await record_action(request, course, role, "assignment_regrade",
                        [f"{login} ({(obj.get('spec') or {}).get('title')})"], f"regrading {login}")
    raise _back(course, name, "regrade", login)


async def my_results(request: web.Request) -> web.Response:
    ctx = web_context(request)
    who = identity_of(request)
    namespace, name, template = (request.match_info[k] for k in ("ns", "name", "template"))
    watch = class_state(request).watch(namespace)
    obj = watch.assignment(name) if watch is not None else None
    entry = next((e for e in ((obj or {}).get("status") or {}).get("students") or []
                  if e.get("user") == who.login and e.get("template") == template), None)
    if obj is None or entry is None or not isinstance(entry.get("grading"), dict):
        return ctx.error(request, 404, "No results here", "There are no results of yours at this address. "
                         "Go back to My environments.")
    stored = None
    if entry["grading"].get("state") == "Graded":
        stored = await _stored(request, store_client(request), obj, template, who.login)
    spec = obj.get("spec") or {}
    deadline = parse_time(entry.get("deadline"))
    passed = deadline is not None and deadline.timestamp() <= time.time()
    shown = student_results(entry["grading"], stored, max_score=_max_score(obj), deadline_passed=passed,
                            published=bool(spec.get("returnFeedback")))
    return ctx.page(request, "my_results.html", title=f"Results · {spec.get('title')}", spec=spec,
                    shown=shown, path=str(spec.get("path") or ""))


def _my_entry(request: web.Request, login: str) -> tuple[JSON | None, JSON | None]:
    namespace, name, template = (request.match_info[k] for k in ("ns", "name", "template"))
    watch = class_state(request).watch(namespace)
    obj = watch.assignment(name) if watch is not None else None
    entry = next((e for e in ((obj or {}).get("status") or {}).get("students") or []
                  if e.get("user") == login and e.get("template") == template), None)
    return obj, entry


async def check_work(request: web.Request) -> web.StreamResponse:
    """Check my work: the ask, for the signed-in student's own environment only."""
    ctx = web_context(request)
    who = identity_of(request)
    namespace, template = request.match_info["ns"], request.match_info["template"]
    obj, entry = _my_entry(request, who.login)
    if obj is None or entry is None or not isinstance((obj.get("spec") or {}).get("grader"), dict):
        return ctx.error(request, 404, "Nothing to check here",
                         "There is no assignment of yours with tests at this address. Go back to "
                         "My environments.")
    deadline = Assignment.from_object(obj).spec.deadline_of(who.login)
    now = datetime.now(UTC)
    if deadline is not None and now >= deadline:
        return ctx.error(request, 403, "The deadline has passed",
                         "Your work can be checked only before your deadline. Your collected copy is "
                         "graded as it is.")
    interval = ctx.settings.check_interval_seconds
    key = keyspace.check_rate_key(namespace, who.login)
    try:
        fresh = await ctx.redis.set(key, rfc3339(now), nx=True, px=max(1, int(interval * 1000)))
        left = 0 if fresh else await ctx.redis.pttl(key)
    except (redis.exceptions.RedisError, OSError):
        return ctx.error(request, 503, "Your work cannot be checked just now", "Try again in a minute.")
    if not fresh:
        seconds = max(1, -(-int(left) // 1000))
        response = ctx.error(request, 429, "Too many checks", CHECK_TOO_SOON.format(seconds=seconds))
        response.headers["Retry-After"] = str(seconds)
        return response
    name = str(obj["metadata"]["name"])
    annotation, value = check_annotation(who.login, template, now)
    assert ctx.kube is not None
    try:
        await ctx.kube.merge_patch(ASSIGNMENTS, namespace, name,
                                   {"metadata": {"annotations": {annotation: value}}})
    except NotFound:
        return ctx.error(request, 404, "No such assignment", "It was deleted meanwhile.")
    title = str((obj.get("spec") or {}).get("title") or name)
    try:
        await audit_log(request).record(AuditEntry(time=now.timestamp(), actor=who.login, role="student",
                                                   action="check_work", course=namespace,
                                                   targets=(f"{who.login} ({title})",), result="check asked"))
    except (redis.exceptions.RedisError, OSError) as err:
        log.error("audit record lost", extra={"course": namespace, "actor": who.login, "action": "check_work",
                                              "error": type(err).__name__})
    raise web.HTTPSeeOther("/me#assignments")


async def my_check(request: web.Request) -> web.Response:
    """The signed-in student's last check: its visible tests only."""
    ctx = web_context(request)
    who = identity_of(request)
    obj, entry = _my_entry(request, who.login)
    check = (entry or {}).get("check")
    if obj is None or entry is None or not isinstance(check, dict):
        return ctx.error(request, 404, "No check here", "You have not checked this work yet. Go back to "
                         "My environments.")
    stored = None
    if check.get("state") == "Checked":
        meta = obj.get("metadata") or {}
        try:
            stored = await store_client(request).grading_results(
                str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")),
                request.match_info["template"], who.login, check=True)
        except (StoreUnavailable, StoreError):
            return ctx.error(request, 503, "The results cannot be read just now",
                             "The assignment store does not answer. Try again in a minute.")
    spec = obj.get("spec") or {}
    return ctx.page(request, "my_check.html", title=f"Check · {spec.get('title')}", spec=spec,
                    words=check_words(check), tests=check_results(stored),
                    asked=str(check.get("asked") or ""))


def setup_grading_routes(app: web.Application) -> None:
    base = "/courses/{ns}/assignments/{name}/students/{login}"
    app.router.add_get(f"{base}/results", staff_results)
    app.router.add_post(f"{base}/regrade", regrade_student)
    app.router.add_get("/me/results/{ns}/{name}/{template}", my_results)
    app.router.add_post("/me/check/{ns}/{name}/{template}", check_work)
    app.router.add_get("/me/check/{ns}/{name}/{template}", my_check)
