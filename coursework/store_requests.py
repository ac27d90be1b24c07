"""What every handler of the assignment store shares (coursework/store_app.py serves them): the
app's keys and options, who is asking (a request the operator or the web UI signed; a worker
Pod's job scope) and reading a body to a file within its limit."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from userland.coursework.store_files import Quotas, Ref, StoreFiles, is_uid
from userland.coursework.trees import Limits
from userland.platform.model import coursework, naming
from userland.platform.model.coursework import JobScope, NonceBook, ScopeRefused, SignedRequest, WorkKind

log = logging.getLogger("userland.store")
JSON = dict[str, Any]
CHUNK = 256 * 1024


@dataclass(frozen=True)
class StoreOptions:
    data: Path
    secret: str
    source_limits: Limits
    copy_limits: Limits
    fetch_timeout: float = 600.0
    quotas: Quotas = field(default_factory=Quotas)
    # How long a deleted assignment's folder is kept (seconds; 0: removed at the next sweep).
    retention: float = 0.0
    # Repositories are fetched only under these prefixes (USERLAND_STORE_GIT_URLS).
    git_urls: tuple[str, ...] = ()
    # The form's repository check: git's time limit, and the moment every "not reachable" is said.
    check_timeout: float = 15.0


STORE = web.AppKey("userland_store", StoreFiles)
OPTIONS = web.AppKey("userland_store_options", StoreOptions)
LOCKS = web.AppKey("userland_store_locks", dict)
UPLOADS = web.AppKey("userland_store_uploads", asyncio.Semaphore)
SWEEP = web.AppKey("userland_store_sweep", asyncio.Task)
INTERNAL_OF = web.AppKey("userland_store_internal_of", web.Application)
NONCES = web.AppKey("userland_store_nonces", NonceBook)
CHECKS = web.AppKey("userland_store_checks", asyncio.Semaphore)
# Gradings recorded, by (course, kind: grade or check, outcome: graded or the reason it failed),
# for userland_grading_results_total (coursework/store_metrics.py).
OUTCOMES: web.AppKey[Counter[tuple[str, str, str]]] = web.AppKey("userland_store_outcomes", Counter)


def ref_of(request: web.Request) -> Ref:
    ref = Ref(request.match_info["ns"], request.match_info["asg"], request.match_info["uid"])
    if not (naming.is_valid_dns_label(ref.namespace) and naming.is_valid_dns_label(ref.name)
            and is_uid(ref.uid)):
        raise web.HTTPNotFound()
    return ref


def refuse(request: web.Request, why: str) -> web.HTTPForbidden:
    log.warning("request refused", extra={"path": request.path, "method": request.method, "why": why})
    return web.HTTPForbidden(text="refused\n")


def signature_of(request: web.Request, *allowed: str) -> SignedRequest:
    """A request the operator or the web UI signed, seen for the first time (403 otherwise)."""
    options = request.app[OPTIONS]
    try:
        signature = coursework.verify_request(
            options.secret, request.headers.get(coursework.SIGNATURE_HEADER, ""), request.method,
            request.path_qs)
    except ScopeRefused as err:
        raise refuse(request, str(err)) from None
    if signature.purpose not in allowed:
        raise refuse(request, f"not for the {signature.purpose}")
    if not request.app[NONCES].first_use(signature.nonce, signature.expires):
        raise refuse(request, "a signature used before (a replay)")
    return signature


async def signed(request: web.Request, *allowed: str) -> bytes:
    """The body of a request the operator or the web UI signed, whole (at most the app's
    client_max_size), checked against the sha256 its signature covers (403 otherwise)."""
    signature = signature_of(request, *allowed)
    body = await request.read()
    if signature.body != hashlib.sha256(body).hexdigest():
        raise refuse(request, "the body is not the one signed")
    return body


def signed_stream(request: web.Request, *allowed: str) -> SignedRequest:
    """A signed request whose body is streamed: its MAC follows it (`body_to_file` checks it)."""
    signature = signature_of(request, *allowed)
    if signature.body != coursework.STREAMED:
        raise refuse(request, "a streamed body without its trailer")
    return signature


def json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise web.HTTPBadRequest(text="not JSON\n") from None


def scoped(request: web.Request, kind: WorkKind, *also: WorkKind) -> JobScope:
    """The job scope a worker Pod presents, for this assignment and kind of work (or one of `also`;
    403 otherwise)."""
    ref = ref_of(request)
    try:
        scope = coursework.verify_job(request.app[OPTIONS].secret,
                                      request.headers.get(coursework.SCOPE_HEADER, ""),
                                      request.headers.get(coursework.TOKEN_HEADER, ""))
    except ScopeRefused as err:
        raise refuse(request, str(err)) from None
    if scope.kind not in (kind, *also) or \
            (scope.namespace, scope.assignment, scope.uid) != (ref.namespace, ref.name, ref.uid):
        raise refuse(request, "the job is for other work")
    if request.app[STORE].retired(ref):
        # A job of a deleted assignment (its Pod outlived it): nothing of it is taken any more.
        log.info("job of a deleted assignment", extra={"assignment": f"{ref.namespace}/{ref.name}",
                                                       "uid": ref.uid})
        raise web.HTTPGone(text="this assignment was deleted\n")
    return scope


async def body_to_file(request: web.Request, target: Path, limit: int,
                        signature: SignedRequest | None = None) -> int:
    """The body into `target` (413 past `limit`). With a streamed signature, its last bytes are
    the MAC of the rest (coursework.body_trailer): held back, checked, never written (403 when it
    does not match: a captured header with another body)."""
    size = 0
    held = b""
    hasher = hashlib.sha256()
    keep = coursework.TRAILER_BYTES if signature is not None else 0
    out = await asyncio.to_thread(open, target, "wb")
    try:
        async for chunk in request.content.iter_chunked(CHUNK):
            size += len(chunk)
            if size > limit + keep:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
            held += chunk
            if len(held) > keep:
                data, held = held[:len(held) - keep], held[len(held) - keep:]
                hasher.update(data)
                await asyncio.to_thread(out.write, data)
    finally:
        await asyncio.to_thread(out.close)
    if signature is not None:
        expected = coursework.body_trailer(request.app[OPTIONS].secret, signature.nonce, hasher.hexdigest())
        if not hmac.compare_digest(held, expected):
            raise refuse(request, "the body is not the one signed")
    return size - keep
