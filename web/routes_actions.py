"""Pages that change a course: add students (one, pasted, CSV) and act on environments.

- GET/POST /courses/{ns}/add: the form, then per-row results (web/rules/roster.py parses,
  web/actions.py writes). Instructors and admins only.
- POST /courses/{ns}/actions: start, restart, suspend, resume, remove, for named Userlands
  or the whole course (the dashboard's search and Status filter: exactly the environments it
  lists, web/rules/selection.py). Every course-wide run, remove, suspending more than one, and
  starting a suspended one first show a confirmation page (what happens to each, and to the
  files); removing a whole course needs its name typed; resuming what staff suspended is a
  box the instructor ticks there. Named environments of more than one student need the
  course-wide permission (assistants help one student at a time). The results page is the
  POST's own response (no-store), so a reload
  asks the browser before posting again instead of silently repeating an action.

Every write is preceded by a Redis ping: the audit log must be able to record it, so a dead
Redis is a 503 page with nothing changed rather than an unaudited change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from userland.platform.clients.kube import TEMPLATES, USERLANDS
from userland.web import actions
from userland.web.access import require_course
from userland.web.context import WebContext, identity_of, web_context
from userland.web.routes_audit import record_action
from userland.web.routes_course import course_watch
from userland.web.rules import dashboard, roster, row_status, selection
from userland.web.rules.courses import Course, CourseRole, may

log = logging.getLogger(__name__)

JSON = dict[str, Any]
_TEXT_LIMIT = roster.MAX_ROSTER_BYTES  # the pasted list has the same cap as an upload


async def _templates(ctx: WebContext, namespace: str) -> dict[str, JSON]:
    """The course's Templates by name (one API call; the API server's own list is the truth)."""
    assert ctx.kube is not None
    items = (await ctx.kube.list(TEMPLATES, namespace))["items"]
    return {str(t["metadata"]["name"]): t for t in sorted(items, key=lambda t: t["metadata"]["name"])}


def _template_choices(templates: Mapping[str, JSON], chosen: Sequence[str]) -> list[JSON]:
    choices = []
    for name, obj in templates.items():
        spec = obj.get("spec") or {}
        choices.append({"name": name, "title": str(spec.get("displayName") or name),
                        "description": str(spec.get("description") or ""),
                        # One Template: nothing to choose, so it is ticked from the start.
                        "checked": name in chosen or (not chosen and len(templates) == 1)})
    return choices


def _text(form: MultiDictProxy[Any], key: str, limit: int = 200) -> str:
    value = form.get(key, "")
    return value[:limit] if isinstance(value, str) else ""


async def add_form(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    course, role = await require_course(request, request.match_info["ns"], "add")
    templates = await _templates(ctx, course.namespace)
    return _render_form(request, course, role, templates, status=200)


def _render_form(request: web.Request, course: Course, role: CourseRole, templates: Mapping[str, JSON], *,
                 status: int, error: str = "", login: str = "", pasted: str = "",
                 chosen: Sequence[str] = ()) -> web.Response:
    ctx = web_context(request)
    return ctx.page(request, "add.html", nav_courses=True, status=status,
                    title=f"Add students · {course.title}", course=course, role=role,
                    templates=_template_choices(templates, chosen), error=error, login=login,
                    pasted=pasted, max_rows=roster.MAX_ROSTER_ROWS)


class _FormProblem(Exception):
    """The add form cannot be used as sent; str() says what to change."""


def _rows_from_form(form: MultiDictProxy[Any]) -> list[roster.RosterRow]:
    """The roster rows from whichever of the three inputs was filled in (exactly one)."""
    login = _text(form, "login", 200).strip()
    pasted = _text(form, "roster", _TEXT_LIMIT + 1)
    upload = form.get("file")
    data = b""
    if isinstance(upload, web.FileField):
        data = upload.file.read(roster.MAX_ROSTER_BYTES + 1)
    elif isinstance(upload, bytes | bytearray):
        # A browser sends an empty file part (no filename) when no file was chosen; aiohttp
        # hands such a part over as bytes, not as a FileField.
        data = bytes(upload[: roster.MAX_ROSTER_BYTES + 1])
    filled = [name for name, present in (("one login", login), ("a pasted list", pasted.strip()),
                                         ("a CSV file", data)) if present]
    if not filled:
        raise _FormProblem("Type a GitHub login, paste a list of logins, or choose a CSV file.")
    if len(filled) > 1:
        raise _FormProblem(f"You filled in {' and '.join(filled)}: use one of them at a time, so it is "
                           "clear who should be added.")
    if data:
        return roster.parse_csv(data)
    if len(pasted.encode()) > _TEXT_LIMIT:
        raise roster.RosterError("That list is too long (over 1 MiB). Split it and add the parts one by one.")
    rows = roster.parse_logins(pasted or login)
    if len(rows) > roster.MAX_ROSTER_ROWS:
        raise roster.RosterError(f"That list has {len(rows)} logins; at most {roster.MAX_ROSTER_ROWS} can be "
                                 "added at once. Split it and add the parts one by one.")
    return rows


async def add_submit(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    course, role = await require_course(request, request.match_info["ns"], "add")
    form = await request.post()
    templates = await _templates(ctx, course.namespace)
    chosen = [t for t in form.getall("template", []) if isinstance(t, str)][:50]
    login = _text(form, "login", 200)
    pasted = _text(form, "roster", _TEXT_LIMIT)
    try:
        rows = _rows_from_form(form)
        if not chosen:
            raise _FormProblem("Choose at least one environment to add the students to.")
        unknown = [t for t in chosen if t not in templates]
        if unknown:
            raise _FormProblem(f"This course has no environment called {unknown[0][:63]!r}; reload the page "
                               "and choose from the list.")
    except (roster.RosterError, _FormProblem) as problem:
        return _render_form(request, course, role, templates, status=400, error=str(problem), login=login,
                            pasted=pasted if len(pasted) < 100_000 else "", chosen=chosen)
    await ctx.redis.ping()  # the audit log must be able to record what follows (else 503, nothing done)
    assert ctx.kube is not None
    results = await actions.add_students(ctx.kube, course.namespace, chosen, rows, actor=who.login)
    ctx.metrics.actions_done(course.namespace, "add", (r.outcome for r in results))
    summary = actions.summarize(results)
    added = sorted({_environment_words(r, templates) for r in results if r.outcome == "created"})
    audited = await record_action(request, course, role, "add", added, summary)
    log.info("students added", extra={"course": course.namespace, "actor": who.login,
                                      "rows": len(rows), "summary": summary})
    return ctx.page(request, "add_results.html", nav_courses=True,
                    title=f"Students added · {course.title}", course=course,
                    results=_result_rows(results, templates), summary=summary, audited=audited,
                    counts=_counts(results))


def _result_rows(results: Sequence[actions.RowResult], templates: Mapping[str, JSON]) -> list[JSON]:
    rows = []
    for r in results:
        spec = (templates.get(r.template) or {}).get("spec") or {}
        rows.append({"login": r.login, "line": r.line, "template": str(spec.get("displayName") or r.template),
                     "outcome": r.outcome, "words": selection.OUTCOME_WORDS.get(r.outcome, r.outcome),
                     "detail": r.detail, "ok": r.ok})
    return rows


def _counts(results: Sequence[actions.RowResult]) -> dict[str, int]:
    return {"ok": sum(1 for r in results if r.ok), "failed": sum(1 for r in results if not r.ok)}


async def _course_userlands(ctx: WebContext, namespace: str) -> list[JSON]:
    assert ctx.kube is not None
    return list((await ctx.kube.list(USERLANDS, namespace))["items"])


async def course_action(request: web.Request) -> web.StreamResponse:
    ctx = web_context(request)
    who = identity_of(request)
    namespace = request.match_info["ns"]
    form = await request.post()
    action = selection.parse_action(_text(form, "action", 20))
    whole_course = _text(form, "scope", 10) == "all"
    # The gate before anything else: a student learns nothing about the course (404).
    course, role = await require_course(request, namespace, "view")
    if action is None:
        return ctx.error(request, 400, "Unknown action",
                         "Choose start, restart, suspend, resume or remove, from the course page.")
    course, role = await require_course(request, namespace, selection.permission_for(action, whole_course))
    names = [n for n in form.getall("names", []) if isinstance(n, str)]
    if len(names) > selection.MAX_TARGETS:
        return ctx.error(request, 400, "Too many environments", "Choose fewer environments at once.")
    q, phase = _text(form, "q", 200).strip()[:dashboard.MAX_QUERY], _text(form, "phase", 40)
    try:
        row_status.filter_phase(phase)
    except row_status.UnknownFilter:
        # Never "no filter": that once suspended a whole class filtered to one student.
        return ctx.error(request, 400, "Unknown status filter",
                         "This page asked for a status the course page does not offer, so nothing was done. "
                         "Open the course page again, choose the status there, and retry.")
    if not whole_course and not names:
        return ctx.error(request, 400, "Nothing chosen",
                         "Tick at least one environment on the course page, then choose the action.")
    confirmed = _text(form, "confirmed", 5) == "yes"
    may_resume = may(role, "resume")
    resume_suspended = may_resume and _text(form, "resume_suspended", 5) == "yes"
    if whole_course and not confirmed:
        # What the dashboard lists under this search and filter, on every page: the same rows
        # (the watch cache) and the same matching; the confirmation then posts these names back.
        watch = await course_watch(request, course)
        chosen = selection.from_rows(dashboard.matching(
            watch.rows(), dashboard.Query(q=q, phase=phase)))
    else:
        # Named environments (a confirmed course-wide run names what its confirmation listed),
        # looked up among the course's own Userlands, fresh.
        chosen = selection.select(await _course_userlands(ctx, course.namespace), names)
        if not whole_course and selection.is_course_wide(chosen.targets):
            course, role = await require_course(request, namespace, selection.permission_for(action, True),
                                                why="act on more than one student at a time")
    context: dict[str, Any] = {"course": course, "action": action, "verb": selection.ACTION_WORDS[action][0],
                               "whole_course": whole_course, "q": q, "phase": phase, "names": names,
                               "filter_words": selection.filter_words(q, phase), "may_resume": may_resume}
    if not confirmed and selection.needs_confirmation(action, chosen.targets, whole_course=whole_course,
                                                      may_resume=may_resume):
        return await _confirm(request, chosen, context, status=200)
    if action == "remove" and whole_course and not selection.typed_name_matches(
            _text(form, "confirm_name", 300), course):
        return await _confirm(request, chosen, context, status=400,
                              error=f"Type the course name, {course.namespace}, to remove every student.")
    await ctx.redis.ping()  # see the module docstring: no unaudited change
    results = await _run(ctx, action, course.namespace, [t.name for t in chosen.targets], who.login,
                         resume_suspended=resume_suspended, may_resume=may_resume)
    results = _named(results, chosen.targets)
    results += [actions.RowResult(login=name, template="", outcome="missing",
                                  detail="no such environment in this course") for name in chosen.missing]
    ctx.metrics.actions_done(course.namespace, action, (r.outcome for r in results))
    summary = actions.summarize(results) if results else "nothing to do"
    # The Templates' display names, as the dashboard and the add results show them (one list).
    templates = await _templates(ctx, course.namespace) if results else {}
    touched = [_environment_words(r, templates) for r in results
               if r.outcome in actions.CHANGED_OUTCOMES]
    audited = await record_action(request, course, role, action + ("_all" if whole_course else ""), touched,
                                  summary, filter_words=context["filter_words"] if whole_course else "")
    log.info("course action", extra={"course": course.namespace, "actor": who.login, "action": action,
                                     "whole_course": whole_course, "filter": context["filter_words"],
                                     "summary": summary})
    return ctx.page(request, "action_results.html", nav_courses=True,
                    title=f"{context['verb']} · {course.title}",
                    results=_result_rows(results, templates), summary=summary, audited=audited,
                    counts=_counts(results), **context)


def _environment_words(result: actions.RowResult, templates: Mapping[str, JSON]) -> str:
    """"bob (VS Code)": which environment an audit entry touched, as the dashboard names it."""
    spec = (templates.get(result.template) or {}).get("spec") or {}
    return f"{result.login} ({spec.get('displayName') or result.template or result.name})"


def _named(results: list[actions.RowResult], targets: Sequence[selection.Target]) -> list[actions.RowResult]:
    """Rows that came back with only the Userland's name (a removed object) get the student's."""
    by_name = {t.name: t for t in targets}
    return [replace(r, login=by_name[r.login].login, template=by_name[r.login].template)
            if not r.template and r.login in by_name else r for r in results]


async def _confirm(request: web.Request, chosen: selection.Selection, context: dict[str, Any], *,
                   status: int, error: str = "") -> web.Response:
    ctx = web_context(request)
    course: Course = context["course"]
    templates = await _templates(ctx, course.namespace)
    action = context["action"]
    titled = tuple(replace(t, title=t.title or dashboard.template_title(templates.get(t.template),
                                                                           t.template))
                   for t in chosen.targets)
    groups = (selection.start_groups(titled) if action == "start"
              else selection.storage_groups(titled, templates, action))
    suspended = sum(1 for t in chosen.targets if t.phase == "Suspended")
    students = len({t.login for t in chosen.targets})
    return ctx.page(request, "confirm.html", nav_courses=True, status=status,
                    title=f"{context['verb']}? · {course.title}", groups=groups, missing=chosen.missing,
                    skipped=chosen.skipped, count=len(chosen.targets), students=students,
                    suspended=suspended, error=error, target_names=[t.name for t in chosen.targets],
                    start_summary=selection.start_summary(groups) if action == "start" else "", **context)


async def _run(ctx: WebContext, action: selection.CourseAction, namespace: str, names: list[str],
               actor: str, *, resume_suspended: bool, may_resume: bool) -> list[actions.RowResult]:
    assert ctx.kube is not None
    if not names:
        return []
    if action == "remove":
        return await actions.remove_students(ctx.kube, namespace, names, actor=actor)
    if action == "restart":
        return await actions.restart(ctx.kube, namespace, names, actor=actor)
    if action == "start":
        return await actions.start(ctx.kube, namespace, names, actor=actor, resume_suspended=resume_suspended,
                                   may_resume=may_resume)
    return await actions.set_suspended(ctx.kube, namespace, names, action == "suspend", actor=actor)


def setup_action_routes(app: web.Application) -> None:
    app.router.add_get("/courses/{ns}/add", add_form)
    app.router.add_post("/courses/{ns}/add", add_submit)
    app.router.add_post("/courses/{ns}/actions", course_action)
