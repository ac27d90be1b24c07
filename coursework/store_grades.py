"""The assignment store's part in grading (docs/grading.md): a grading Pod fetches the copy it
grades and reports its results; the operator records gradings that ended without a report.

Each student's grading is kept as two files: a summary in `results/grade/<template>/<login>.json`
(the state the operator reads: the version graded, Graded or Failed, the score or the reason)
and the whole results in `grades/<template>/<login>.json` (what staff and, within the visibility
rules, the student see). The version is computed here, from the copy's own receipt and the tests'
key in the signed job, never taken from the Pod: a grading Pod cannot claim another copy's grade.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from userland.coursework.store_files import BadName, Ref, StoreFiles, _write_json
from userland.coursework.store_requests import (
    JSON,
    OUTCOMES,
    STORE,
    json_body,
    ref_of,
    refuse,
    scoped,
    signed,
)
from userland.platform.model import naming
from userland.platform.model.checks import check_summary
from userland.platform.model.gradescope import RESULTS_MAX_BYTES, Results, parse_results, published_summary
from userland.platform.model.grading import grade_version
from userland.platform.model.objects import rfc3339

log = logging.getLogger("userland.store")
REPORT_MAX_BYTES = 2 * RESULTS_MAX_BYTES + 64 * 1024
MESSAGE_MAX = 2000
STATES = ("Graded", "Failed")
FAILURE_REASONS = ("TimedOut", "OutOfMemory", "NoResults", "ResultsTooLarge", "ResultsInvalid",
                   "GraderFailed", "AfterDeadline")


def full_results_path(files: StoreFiles, ref: Ref, template: str, login: str, *, check: bool = False) -> Path:
    # A check's results are kept apart from the grade's: nothing reads one as the other.
    return files.folder(ref) / ("checks" if check else "grades") / template / f"{login}.json"


def keep_grading(files: StoreFiles, ref: Ref, template: str, login: str, summary: JSON,
                 full: JSON | None, *, check: bool = False) -> None:
    path = full_results_path(files, ref, template, login, check=check)
    if full is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, full, files.tmp)
    else:
        path.unlink(missing_ok=True)
    files.put_result(ref, "check" if check else "grade", template, login, summary)


def _check_summary(asked: str, report: JSON, results: JSON | None) -> JSON:
    """What the status says of a check: when it was asked, its state, how many visible tests
    passed (never a score: it would tell the hidden tests' part)."""
    summary: JSON = {"asked": asked, "at": rfc3339(),
                     "state": "Checked" if report.get("state") == "Graded" else "Failed"}
    parsed = parse_results(json.dumps(results).encode()) if results is not None else None
    if isinstance(parsed, Results):
        summary.update(check_summary(parsed))
    elif summary["state"] == "Checked":
        summary["state"] = "Failed"
    if summary["state"] == "Failed":
        summary["reason"] = str(report.get("reason") or "ResultsInvalid")[:60]
    return summary


def _summary(version: str, round_: str, state: str, *, reason: str = "", message: str = "",
             score: Any = None, exit_status: Any = None) -> JSON:
    summary: JSON = {"version": version, "round": round_, "state": state, "at": rfc3339()}
    if reason:
        summary["reason"] = reason[:60]
    if message:
        summary["message"] = message[:MESSAGE_MAX]
    if isinstance(score, int | float) and not isinstance(score, bool):
        summary["score"] = float(score)
    if isinstance(exit_status, int) and not isinstance(exit_status, bool):
        summary["exitStatus"] = exit_status
    return summary


def _outcome(summary: JSON) -> str:
    """graded, or the reason a grading failed (a bounded set: the label of a metric)."""
    if summary.get("state") in ("Graded", "Checked"):
        return "graded"
    reason = str(summary.get("reason") or "GraderFailed")
    return reason if reason in FAILURE_REASONS else "GraderFailed"


async def grading_copy(request: web.Request) -> web.StreamResponse:
    """The copy a grading Pod grades: its one student's, of its round."""
    scope = scoped(request, "grade")
    (member,) = scope.members
    try:
        path = request.app[STORE].copy_tar(ref_of(request), scope.round, member.template, member.login)
    except BadName:
        raise web.HTTPNotFound() from None
    if not path.exists():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


async def grading_tests(request: web.Request) -> web.StreamResponse:
    """The tests a grading Pod (or a check's) runs: the source its job names."""
    scope = scoped(request, "grade", "check")
    try:
        path = request.app[STORE].source_tar(ref_of(request), scope.source)
    except BadName:
        raise web.HTTPNotFound() from None
    if not path.exists():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


async def grading_report(request: web.Request) -> web.Response:
    """A grading Pod's report: the results it read (already checked by the platform's report step)
    or why there are none, and the grader's exit status. A check's (Check my work) is kept as
    the student's last check, never as a grade."""
    scope = scoped(request, "grade", "check")
    ref = ref_of(request)
    (member,) = scope.members
    body = await request.content.read(REPORT_MAX_BYTES + 1)
    if len(body) > REPORT_MAX_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=REPORT_MAX_BYTES, actual_size=len(body))
    report = json_body(body)
    if not isinstance(report, dict) or report.get("state") not in STATES:
        raise web.HTTPBadRequest(text="state?\n")
    files = request.app[STORE]
    if scope.kind == "check":
        full = report.get("results") if isinstance(report.get("results"), dict) else None
        checked = _check_summary(scope.round, report, full)
        try:
            await asyncio.to_thread(keep_grading, files, ref, member.template, member.login, checked, full,
                                    check=True)
        except BadName as err:
            raise web.HTTPBadRequest(text=f"{err}\n") from None
        request.app[OUTCOMES][(ref.namespace, "check", _outcome(checked))] += 1
        log.info("checked", extra={"assignment": f"{ref.namespace}/{ref.name}", "environment": member.key,
                                   "state": checked["state"]})
        return web.json_response({"stored": 1})
    receipt = await asyncio.to_thread(files.receipt, ref, scope.round, member.template, member.login)
    if receipt is None:
        raise web.HTTPNotFound(text="no such copy\n")
    version = grade_version(str(receipt.get("sha256") or ""), scope.source)
    results = report.get("results") if report["state"] == "Graded" else None
    if report["state"] == "Graded" and not isinstance(results, dict):
        raise web.HTTPBadRequest(text="results?\n")
    summary = _summary(version, scope.round, report["state"], reason=str(report.get("reason") or ""),
                       message=str(report.get("message") or ""),
                       score=(results or {}).get("score"), exit_status=report.get("exitStatus"))
    if results is not None:
        summary["tests"] = len(results.get("tests") or [])
        parsed = parse_results(json.dumps(results).encode())
        if isinstance(parsed, Results):  # what the gradebook's comment may say (never a hidden test)
            summary.update(published_summary(parsed))
    await asyncio.to_thread(keep_grading, files, ref, member.template, member.login, summary, results)
    request.app[OUTCOMES][(ref.namespace, "grade", _outcome(summary))] += 1
    log.info("graded", extra={"assignment": f"{ref.namespace}/{ref.name}", "environment": member.key,
                              "state": summary["state"], "reason": summary.get("reason", "")})
    return web.json_response({"stored": 1, "version": version})


async def grading_failures(request: web.Request) -> web.Response:
    """The operator's record of gradings that ended without a report (timed out, out of memory,
    an image that cannot be pulled): failed for that version of the copy and tests."""
    raw = await signed(request, "operator")
    ref = ref_of(request)
    entries = json_body(raw).get("failures") if raw else None
    if not isinstance(entries, list):
        raise web.HTTPBadRequest(text="failures?\n")
    files = request.app[STORE]
    for entry in entries:
        if not isinstance(entry, dict):
            raise web.HTTPBadRequest(text="failure?\n")
        template, login = str(entry.get("template")), str(entry.get("login"))
        if (template, login) not in files.members(ref):
            raise refuse(request, "a student outside the assignment")
        check = isinstance(entry.get("check"), str)
        if check:  # a check that ended without a report: its round is the ask's time
            summary = {"asked": entry["check"], "at": rfc3339(), "state": "Failed",
                       "reason": str(entry.get("reason") or "GraderFailed")[:60],
                       "message": str(entry.get("message") or "")[:MESSAGE_MAX]}
        else:
            summary = _summary(str(entry.get("version") or ""), str(entry.get("round") or ""), "Failed",
                               reason=str(entry.get("reason") or "GraderFailed"),
                               message=str(entry.get("message") or ""))
        try:
            await asyncio.to_thread(keep_grading, files, ref, template, login, summary, None, check=check)
            request.app[OUTCOMES][(ref.namespace, "check" if check else "grade", _outcome(summary))] += 1
        except BadName as err:
            raise web.HTTPBadRequest(text=f"{err}\n") from None
    return web.json_response({"stored": len(entries)})


async def grading_results(request: web.Request) -> web.Response:
    """One student's whole results (staff, and the student within the visibility rules: the web UI
    decides), with its summary; at .../checks/... their last check's."""
    await signed(request, "operator", "web")
    ref = ref_of(request)
    template, login = request.match_info["template"], request.match_info["login"]
    if not (naming.is_valid_dns_label(template) and naming.is_valid_login(login)):
        raise web.HTTPNotFound()
    files = request.app[STORE]
    check = request.match_info.get("kind") == "checks"
    path = full_results_path(files, ref, template, login, check=check)
    _, state = await asyncio.to_thread(files.state, ref)
    summary = (state.get("checks" if check else "graded") or {}).get(f"{template}/{login}")
    if summary is None:
        raise web.HTTPNotFound()
    try:
        results = json.loads(await asyncio.to_thread(path.read_text))
    except (OSError, ValueError):
        results = None
    return web.json_response({"summary": summary, "results": results})
