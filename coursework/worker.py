"""`userland assignment-work`: what an assignment's worker Pod runs (the operator makes the Pods).

The Pod is told its job (USERLAND_JOB: platform/model/coursework.Job, the students and where their
volumes are mounted), the job's token (USERLAND_JOB_TOKEN) and the store (USERLAND_STORE_URL).
It does the work for every student at once (threads: the work is reading and writing files) and
tells the store each student's outcome; one student's trouble is that student's result, never
the others'. It exits 0 when the job is done (whatever the students' outcomes), 1 when the store
refused or could not be reached until the job expired, 2 when the job cannot be read.

- hand out: download the commit's tar once, then merge it into each student's folder (apply.py);
- collect: wait for the round's moment (the Pod is made ahead of it, so scheduling and volume
  attachment are done by then), then stream each student's copy to the store, which keeps the
  first copy of a round for good;
- feedback: each student's uploaded files plus FEEDBACK.md (grade and comment), merged into
  `<path>/feedback/` by the same rules.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import logging
import os
import random
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, cast

import aiohttp

from userland.coursework.apply import Copy, Outcome, Sealer, hand_out, take_copy
from userland.coursework.pipes import produce
from userland.coursework.safefs import shown
from userland.coursework.trees import CopyResult, IndexEntry, Limits, read_index
from userland.platform.clients.logs import setup_logging
from userland.platform.model import coursework
from userland.platform.model.assignments import FEEDBACK_FOLDER
from userland.platform.model.coursework import Job, Member, ScopeRefused
from userland.platform.model.models import parse_time
from userland.platform.model.objects import rfc3339
from userland.platform.model.settings import JobSettings, Settings, SettingsError

log = logging.getLogger("userland.worker")
JSON = dict[str, Any]
FEEDBACK_FILE = "FEEDBACK.md"
# Copies a worker Pod uploads at once (each one taken at the moment already, in its scratch space).
UPLOADS_PER_POD = 4


class Refused(Exception):
    """The store refused the job (its token, its scope): retrying cannot help."""


class StoreForWorker:
    """The store as a worker Pod sees it: every request carries the job's scope and token;
    connection trouble and 5xx are retried with backoff until the job expires."""

    def __init__(self, url: str, job: Job, token: str, session: aiohttp.ClientSession) -> None:
        scope = job.scope
        self.base = f"{url.rstrip('/')}/v1/a/{scope.namespace}/{scope.assignment}/{scope.uid}"
        self.headers = {coursework.SCOPE_HEADER: scope.header(), coursework.TOKEN_HEADER: token}
        self.expires = scope.expires
        self.session = session

    async def _retry(self, what: str, attempt: Callable[[], Any]) -> Any:
        delay = 0.5
        while True:
            try:
                return await attempt()
            except (aiohttp.ClientError, OSError, TimeoutError) as err:
                if time.time() + delay > self.expires:
                    raise
                log.warning("store unreachable, retrying", extra={"what": what, "error": str(err)[:200],
                                                                  "retry_in": round(delay, 1)})
            await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
            delay = min(delay * 2, 15.0)

    def _check(self, response: aiohttp.ClientResponse, allowed: tuple[int, ...] = ()) -> None:
        if response.status == 403:
            raise Refused(f"the store refused the job ({response.status})")
        if response.status >= 500:
            raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
        if response.status >= 400 and response.status not in allowed:
            raise Refused(f"the store answered {response.status}")

    async def download(self, path: str, target: Path) -> bool:
        """GET `path` into `target`; False on 404."""
        async def attempt() -> bool:
            async with self.session.get(self.base + path, headers=self.headers) as response:
                if response.status == 404:
                    return False
                self._check(response)
                with open(target, "wb") as out:  # noqa: ASYNC230 (scratch space, small writes)
                    async for chunk in response.content.iter_chunked(1024 * 1024):
                        out.write(chunk)
                return True
        return bool(await self._retry(f"GET {path}", attempt))

    async def post_results(self, kind: str, results: list[JSON]) -> None:
        async def attempt() -> None:
            async with self.session.post(f"{self.base}/results", params={"kind": kind},
                                         json={"results": results}, headers=self.headers) as response:
                self._check(response)
        await self._retry("POST results", attempt)

    async def put_copy(self, member: Member, round_: str, body: AsyncIterator[bytes],
                       taken_at: str) -> tuple[int, JSON]:
        headers = {**self.headers, coursework.TAKEN_AT_HEADER: taken_at,
                   "Content-Type": "application/x-tar"}
        url = f"{self.base}/copies/{round_}/{member.template}/{member.login}"
        async with self.session.put(url, data=body, headers=headers) as response:
            if response.status in (400, 413, 507):
                # The store refused this copy (its content, a full quota or a full disk): this
                # student's failure, in the store's words, not the job's.
                raise CopyRefused("the store refused the copy: " + shown((await response.text()).strip()))
            self._check(response, allowed=(409,))
            return response.status, await response.json()


def members_pool(job: Job) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, min(16, len(job.scope.members))),
                              thread_name_prefix="student")


async def run_handout(job: Job, store: StoreForWorker, scratch: Path) -> list[JSON]:
    tar = scratch / "source.tar"
    if not await store.download(f"/sources/{job.scope.source}.tar", tar):
        raise Refused(f"the store has no source {job.scope.source}")
    index = await asyncio.to_thread(read_index, str(tar))
    label = f"{job.scope.namespace}/{job.scope.assignment}"

    def one(member: Member) -> JSON:
        try:
            with tarfile.open(tar) as archive:
                outcome = hand_out(member.mount, job.path, index, lambda p: _member(archive, p),
                                   assignment=label, commit=job.commit,
                                   sealer=Sealer(job.manifest_key, member.key, job.path))
        except Exception as err:  # one student's trouble is theirs, never the batch's
            outcome = unexpected(member, "handing out", err)
        return {"template": member.template, "login": member.login, "commit": job.commit, **outcome.to_json()}

    loop = asyncio.get_running_loop()
    with members_pool(job) as pool:
        results = await asyncio.gather(*(loop.run_in_executor(pool, one, m) for m in job.scope.members))
    return list(results)


def unexpected(member: Member, what: str, err: BaseException) -> Outcome:
    """Something no rule foresaw went wrong for one student: that student fails, in words, the
    others go on (a batch is 20 students: one odd folder must not cost 19 hand-outs)."""
    log.exception("unexpected trouble with one student", extra={"environment": member.key, "what": what})
    return Outcome("Failed", f"{what} failed for this student's folder ({type(err).__name__}: "
                             f"{shown(str(err))[:150]}); the others were not affected")


def _member(archive: tarfile.TarFile, path: str) -> BinaryIO:
    data = archive.extractfile(path)
    if data is None:
        raise OSError(f"{path} is not a file in the source")
    return cast(BinaryIO, data)


class CopyRefused(Exception):
    """A copy that could not be taken (its reason is the student's result)."""


async def wait_until(moment: float, clock: Callable[[], float] = time.time) -> None:
    """Sleep until `moment` (unix time) by that clock, in steps (a clock that jumps is followed)."""
    while (left := moment - clock()) > 0:  # noqa: ASYNC110 (waiting for a time, not an event)
        await asyncio.sleep(min(left, 5.0))


async def run_collect(job: Job, store: StoreForWorker, scratch: Path) -> list[JSON]:
    """At the moment, every student's folder is copied at once into the Pod's scratch space (a
    local disk: a second or so for a folder of 10 MB), then uploaded at the pace the store takes
    them. What the store receives is the folder as it was at the moment, however long the
    uploads take, and a retried upload sends the very same copy. A copy that does not fit the
    scratch space is streamed from the folder instead (then reading follows the upload)."""
    moment = parse_time(job.at)
    if moment is not None:
        # Made ahead of the deadline: wait for it here, so the copy is the folder at that moment.
        await wait_until(moment.timestamp())
    limits = Limits(job.max_files, job.max_bytes)
    failures: list[JSON] = []
    loop = asyncio.get_running_loop()

    def snapshot(member: Member) -> tuple[Path | None, Copy]:
        target = scratch / f"{member.template}-{member.login}.tar"
        try:
            with open(target, "wb") as out:
                copy = take_copy(member.mount, job.path, out, limits)
        except OSError as err:  # OutputError from writing it, or the scratch file's own close
            target.unlink(missing_ok=True)
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            return None, Copy(rfc3339())  # no room here: stream it instead
        return target, copy

    async def streamed(member: Member, pool: ThreadPoolExecutor) -> tuple[int, JSON] | str:
        taken_at = rfc3339()

        def write(out: Any) -> CopyResult:
            copy = take_copy(member.mount, job.path, out, limits)
            if copy.result is None:
                raise CopyRefused(copy.reason)
            return copy.result

        pipe, done = await produce(write, executor=pool)
        try:
            answer = await store.put_copy(member, job.scope.round, pipe.chunks(), taken_at)
            await done
        except CopyRefused as err:
            pipe.cancelled = True
            return str(err)
        except BaseException:
            pipe.cancelled = True
            raise
        return answer

    async def one(member: Member, pool: ThreadPoolExecutor) -> None:
        try:
            await collect_one(member, pool)
        except (aiohttp.ClientError, OSError, TimeoutError, Refused):
            raise  # the store's or the Pod's trouble: the job's
        except Exception as err:  # one student's trouble is theirs, never the batch's
            failures.append({"template": member.template, "login": member.login, "state": "Failed",
                             "reason": unexpected(member, "taking the copy", err).reason, "at": rfc3339()})

    async def collect_one(member: Member, pool: ThreadPoolExecutor) -> None:
        path, copy = await loop.run_in_executor(pool, snapshot, member)
        if copy.result is not None and copy.result.skipped_count:
            log.info("left out of the copy", extra={"environment": member.key,
                                                    "skipped": copy.result.skipped,
                                                    "skipped_count": copy.result.skipped_count})
        if path is not None and copy.result is None:
            path.unlink(missing_ok=True)
            failures.append({"template": member.template, "login": member.login, "state": "Failed",
                             "reason": copy.reason, "at": copy.taken_at})
            return
        while True:
            try:
                if path is not None:
                    # Taken already: it waits its turn, so a Pod holds few connections to the store.
                    async with uploads:
                        try:
                            answer: tuple[int, JSON] | str = await store.put_copy(
                                member, job.scope.round, _file_chunks(path), copy.taken_at)
                        except CopyRefused as err:
                            answer = str(err)
                else:
                    answer = await streamed(member, pool)
                break
            except (aiohttp.ClientError, OSError) as err:
                if time.time() + 2 > store.expires:
                    raise
                log.warning("copy upload failed, sending it again", extra={
                    "environment": member.key, "error": str(err)[:200]})
                await asyncio.sleep(2 + random.random())
        if path is not None:
            path.unlink(missing_ok=True)
        if isinstance(answer, str):
            failures.append({"template": member.template, "login": member.login, "state": "Failed",
                             "reason": answer, "at": copy.taken_at})
            return
        status, receipt = answer
        log.info("copy taken" if status == 201 else "copy was already taken", extra={
            "environment": member.key, "round": job.scope.round, "files": receipt.get("files"),
            "bytes": receipt.get("bytes"), "read_seconds": round(copy.seconds, 3)})

    uploads = asyncio.Semaphore(UPLOADS_PER_POD)
    # A thread per student: every folder is read at the moment, none waits for another's.
    with ThreadPoolExecutor(max_workers=max(1, len(job.scope.members)), thread_name_prefix="copy") as pool:
        await asyncio.gather(*(one(m, pool) for m in job.scope.members))
    return failures


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    handle = await asyncio.to_thread(open, path, "rb")
    try:
        while chunk := await asyncio.to_thread(handle.read, 256 * 1024):
            yield chunk
    finally:
        await asyncio.to_thread(handle.close)


def feedback_text(title: str, grade: str, comment: str) -> bytes:
    lines = ["# Feedback", ""]
    if grade:
        lines += [f"**Grade:** {grade}", ""]
    if comment:
        lines += [comment, ""]
    return "\n".join(lines).encode()


async def run_feedback(job: Job, store: StoreForWorker, scratch: Path) -> list[JSON]:
    label = f"{job.scope.namespace}/{job.scope.assignment}"
    tars: dict[str, Path | None] = {}
    for login in sorted({m.login for m in job.scope.members}):
        target = scratch / f"{login}.tar"
        tars[login] = target if await store.download(f"/feedback/{login}.tar", target) else None

    def one(member: Member) -> JSON:
        digest = job.feedback.get(member.login, ("", "", ""))[2]
        try:
            outcome = return_one(member)
        except Exception as err:  # one student's trouble is theirs, never the batch's
            outcome = unexpected(member, "returning feedback", err)
        return {"template": member.template, "login": member.login, "digest": digest, **outcome.to_json()}

    def return_one(member: Member) -> Outcome:
        grade, comment, digest = job.feedback.get(member.login, ("", "", ""))
        generated = feedback_text(job.scope.assignment, grade, comment) if grade or comment else b""
        tar = tars.get(member.login)
        archive = tarfile.open(tar) if tar is not None else None  # noqa: SIM115 (closed below)
        # Looked up once per file below: a set, so thousands of files cost no more than a list's scan.
        in_archive = frozenset(archive.getnames()) if archive is not None else frozenset()
        try:
            index = dict(read_index(str(tar))) if tar is not None else {}
            if generated and FEEDBACK_FILE not in index:
                digest_of_text = hashlib.sha256(generated).hexdigest()
                index[FEEDBACK_FILE] = IndexEntry(digest_of_text, False, len(generated))

            def open_member(path: str) -> BinaryIO:
                if archive is not None and path in in_archive:
                    return _member(archive, path)
                return io.BytesIO(generated)

            into = f"{job.path}/{FEEDBACK_FOLDER}"
            return hand_out(member.mount, into, index, open_member, assignment=label, commit=digest,
                            sealer=Sealer(job.manifest_key, member.key, into))
        finally:
            if archive is not None:
                archive.close()

    loop = asyncio.get_running_loop()
    with members_pool(job) as pool:
        results = await asyncio.gather(*(loop.run_in_executor(pool, one, m) for m in job.scope.members))
    return list(results)


async def run(job: Job, token: str, store_url: str, scratch: Path) -> int:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        store = StoreForWorker(store_url, job, token, session)
        kind = job.scope.kind
        label = f"{job.scope.namespace}/{job.scope.assignment}"
        log.info("work starts", extra={"kind": kind, "assignment": label,
                                       "students": len(job.scope.members)})
        try:
            if kind == "handout":
                results = await run_handout(job, store, scratch)
            elif kind == "collect":
                results = await run_collect(job, store, scratch)
            else:
                results = await run_feedback(job, store, scratch)
            if results:
                await store.post_results(kind, results)
        except Refused as err:
            log.error("the store refused the work", extra={"why": str(err)})
            return 1
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            log.error("the store could not be reached before the job expired",
                      extra={"error": str(err)[:300]})
            return 1
        states = [r.get("state", "") for r in results]
        log.info("work done", extra={"kind": kind, "students": len(job.scope.members),
                                     "failed": states.count("Failed"),
                                     "conflicts": states.count("Conflicts")})
    return 0


def main(step: str = "") -> int:
    try:
        told = JobSettings.from_env(os.environ)
        setup_logging(told.log_level)
        job = Job.from_json(told.job)
        store_url = Settings.from_env(os.environ).store_url
    except (SettingsError, ScopeRefused) as err:
        print(f"userland assignment-work: {err}", file=sys.stderr)
        return 2
    if job.scope.kind in ("grade", "check"):
        if step not in ("fetch", "report"):
            print("userland assignment-work: a grading job runs as its fetch or report step", file=sys.stderr)
            return 2
        from userland.coursework.grading_work import run_grade_step

        return asyncio.run(run_grade_step(step, job, told.job_token, store_url))
    scratch = Path(os.environ.get("TMPDIR") or "/tmp")
    return asyncio.run(run(job, told.job_token, store_url, scratch))
