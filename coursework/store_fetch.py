"""The assignment store's repositories: fetching a commit of an assignment's source once (the
operator asks), and the web form's check that a repository and ref can be had (the web UI
asks). Only repositories under USERLAND_STORE_GIT_URLS are fetched or checked."""

from __future__ import annotations

import asyncio
import hashlib
import logging

from aiohttp import web

from userland.coursework import gitfetch
from userland.coursework.store_files import QuotaFull
from userland.coursework.store_requests import (
    CHECKS,
    JSON,
    LOCKS,
    OPTIONS,
    STORE,
    json_body,
    ref_of,
    signed,
)
from userland.coursework.trees import BadArchive, TooLarge
from userland.platform.model import naming
from userland.platform.model.assignments import Source, relative_path, token_may_go_to
from userland.platform.model.models import InvalidSpec
from userland.platform.model.objects import rfc3339

log = logging.getLogger("userland.store")
# The web form's repository checks running at once (each a `git ls-remote`); more wait.
CHECKS_AT_ONCE = 4
# Every "not reachable" answer of a check is sent this long after its time limit (a git killed at
# the limit takes a moment to be reaped: the slack hides it).
CHECK_SLACK = 1.0
CHECK_BUSY = "the platform is checking other repositories just now: try again in a minute"


async def fetch(request: web.Request) -> web.Response:
    raw = await signed(request, "operator")
    asg = ref_of(request)
    files, options = request.app[STORE], request.app[OPTIONS]
    try:
        body = json_body(raw)
        url, ref = str(body["url"]), str(body.get("ref") or "")
        sub_path = relative_path(body.get("subPath") or "", "subPath", allow_empty=True)
        token, secret_name = str(body.get("token") or ""), str(body.get("secret") or "")
    except (ValueError, KeyError, TypeError, AttributeError, InvalidSpec) as err:
        raise web.HTTPBadRequest(text=f"{err}\n") from None
    if (refused := _not_allowed(request, url)) is not None:
        return web.json_response(refused, status=422)
    lock = request.app[LOCKS].setdefault(asg, asyncio.Lock())
    async with lock:  # one fetch per assignment at a time: a retry waits for the first
        out = files.temp()
        try:
            commit, result = await gitfetch.fetch(
                url, ref, sub_path, token=token, secret_name=secret_name, work=files.temp(".git"), out=out,
                limits=options.source_limits, timeout=options.fetch_timeout)
        except gitfetch.FetchProblem as problem:
            out.unlink(missing_ok=True)
            log.info("fetch failed", extra={"assignment": f"{asg.namespace}/{asg.name}",
                                            "reason": problem.reason, "detail": problem.detail})
            return web.json_response({"reason": problem.reason, "message": problem.message}, status=422)
        except (TooLarge, BadArchive) as err:
            out.unlink(missing_ok=True)
            return web.json_response({"reason": "TooLarge" if isinstance(err, TooLarge) else "BadArchive",
                                      "message": str(err)}, status=422)
        key = f"{commit}-{hashlib.sha256(sub_path.encode()).hexdigest()[:8]}"
        index = {"commit": commit, "ref": ref, "subPath": sub_path, "fetchedAt": rfc3339(),
                 **result.to_json()}
        try:
            await asyncio.to_thread(files.put_source, asg, key, out, index)
        except QuotaFull as err:
            return web.json_response({"reason": "QuotaFull", "message": str(err)}, status=422)
        finally:
            out.unlink(missing_ok=True)
    log.info("fetched", extra={"assignment": f"{asg.namespace}/{asg.name}", "commit": commit,
                               "files": result.files, "bytes": result.bytes})
    return web.json_response({"key": key, **{k: v for k, v in index.items() if k != "files"}})


def _not_allowed(request: web.Request, url: str) -> JSON | None:
    """The refusal of a repository outside USERLAND_STORE_GIT_URLS (None: allowed). Checked before
    git runs: the store must not be a way to probe what it can reach."""
    options = request.app[OPTIONS]
    if token_may_go_to(url, ",".join(options.git_urls)):
        return None
    allowed = ", ".join(options.git_urls) or "no address at all"
    return {"reason": "URLNotAllowed", "message": (
        f"the assignment store fetches repositories only under {allowed} (USERLAND_STORE_GIT_URLS), "
        f"and {url} is not one of them: use a repository there, or ask an admin to add its address "
        "to that setting")}


async def check(request: web.Request) -> web.Response:
    """The web form's check of a public repository and ref, before the Assignment is made: ok, or
    a reason and words that never say what answered instead of a git server. The assignment may
    not exist yet: its path has no uid."""
    raw = await signed(request, "web")
    if not (naming.is_valid_dns_label(request.match_info["ns"])
            and naming.is_valid_dns_label(request.match_info["asg"])):
        raise web.HTTPNotFound()
    try:
        body = json_body(raw)
        source = Source.parse({"url": body["url"], "ref": body.get("ref") or ""})
    except (ValueError, KeyError, TypeError, AttributeError, InvalidSpec) as err:
        raise web.HTTPBadRequest(text=f"{err}\n") from None
    if (refused := _not_allowed(request, source.url)) is not None:
        return web.json_response({"ok": False, **refused})
    checks, limit = request.app[CHECKS], request.app[OPTIONS].check_timeout
    if checks.locked():
        # Busy at once rather than a queue: a queue of checks of addresses that never answer
        # outlasted the web UI's wait, and the web UI does not save what it could not check.
        return web.json_response({"ok": False, "reason": "Busy", "message": CHECK_BUSY}, status=429)
    loop = asyncio.get_running_loop()
    async with checks:
        started = loop.time()
        problem = await gitfetch.check(source.url, source.ref, work=request.app[STORE].temp(".check"),
                                       timeout=limit)
    if problem is not None and problem.reason == "Unreachable":
        # Said at the same moment whatever answered: a closed port (at once) and a silent one (at
        # the time limit) are not told apart by the time the answer took (SECURITY.md).
        await asyncio.sleep(max(0.0, started + limit + CHECK_SLACK - loop.time()))
    if problem is None:
        return web.json_response({"ok": True})
    return web.json_response({"ok": False, "reason": problem.reason, "message": problem.message})
