"""The platform's two steps of a grading Pod (`userland assignment-work fetch|report`; docs/grading.md).

- **fetch** (before the grader): the student's copy into `/autograder/submission`, the tests into
  `/autograder/source`, both from the store with the job's token; extracted with tarfile's `data`
  filter (no links out, no devices, no absolute paths). Then the folders are closed: the tests
  0700 (the grader's harness, the same user as this step, reads them; the student's code, run as
  another user, cannot), the results 0755 (only the harness writes), the submission read-only.
- **report** (after the grader): `/autograder/results/results.json` read without following a
  link, at most 1 MB (platform/model/gradescope.py checks it), and the grader's exit status,
  sent to the store. A missing, invalid or too large file is the copy's failure, in words.

Where the Pod's volumes are is read from the job's `path` (`/autograder` in a cluster); the local
runner rewrites it to its folders, so the same steps run under `make run`.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import stat
import sys
import tarfile
from pathlib import Path

import aiohttp

from userland.coursework.apply import take_copy
from userland.coursework.trees import Limits
from userland.coursework.worker import Refused, StoreForWorker
from userland.platform.model.coursework import Job
from userland.platform.model.gradescope import RESULTS_MAX_BYTES, Results, parse_results

log = logging.getLogger("userland.worker")
JSON = dict[str, object]
CHECK_COPY = "check-copy.tar"  # in the Pod's scratch space (/tmp), from the snapshot step to fetch


def layout(job: Job) -> tuple[Path, Path, Path]:
    """(submission, source, results) folders, from the job's member mount (the submission)."""
    (member,) = job.scope.members
    submission = Path(member.mount)
    root = submission.parent
    return submission, root / "source", root / "results"


def _extract(tar: Path, into: Path) -> int:
    """The regular files of `tar` (the store's own: a copy or the tests) into the empty folder
    `into`, with their executable bit; anything else (links, devices, names that climb out) is left
    out. Written with O_EXCL and O_NOFOLLOW: nothing in the folder is followed or replaced."""
    into.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(tar) as archive:
        for member in archive:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if not parts or ".." in parts or member.name.startswith("/") or not member.isfile():
                continue
            folder = into
            for part in parts[:-1]:
                folder = folder / part
                folder.mkdir(exist_ok=True)
                if folder.is_symlink() or not folder.is_dir():
                    raise tarfile.TarError(f"{member.name}: not a folder")
            source = archive.extractfile(member)
            if source is None:
                continue
            mode = 0o755 if member.mode & 0o100 else 0o644
            fd = os.open(folder / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as out, source:
                while chunk := source.read(1024 * 1024):
                    out.write(chunk)
            count += 1
    return count


def _close(submission: Path, source: Path, results: Path) -> None:
    for folder, modes in ((submission, (0o555, 0o444)), (source, None)):
        if modes is None:
            continue
        for here, dirs, files in os.walk(folder):
            for name in files:
                path = os.path.join(here, name)
                executable = os.stat(path, follow_symlinks=False).st_mode & 0o100
                os.chmod(path, 0o555 if executable else modes[1], follow_symlinks=False)
            for name in dirs:
                os.chmod(os.path.join(here, name), modes[0], follow_symlinks=False)
    for folder, mode in ((source, 0o700), (results, 0o755), (submission, 0o555)):
        try:
            os.chmod(folder, mode)
        except PermissionError:
            # Not the folder's owner (the local runner's folders): what it cannot close it says.
            log.warning("folder not closed", extra={"folder": folder.name})


def run_snapshot(volume: str, path: str, out: str, max_bytes: str) -> int:
    """A check's first step (Check my work), as the student's own user with their volume mounted
    read-only: the tar of their folder as it is now, into the Pod's scratch space, for the fetch
    step. It holds no token and talks to nothing (the student's folder is all it reads)."""
    if not (volume and path and out):
        print("userland assignment-work snapshot: --volume, --path and --out are needed", file=sys.stderr)
        return 2
    limits = Limits(20_000, int(max_bytes) if max_bytes.isdigit() else 500 * 1024 * 1024)
    with open(out, "wb") as handle:
        copy = take_copy(volume, path, handle, limits)
    if copy.result is None:
        log.error("the folder could not be copied", extra={"why": copy.reason})
        Path(out).unlink(missing_ok=True)
        return 1
    os.chmod(out, 0o644)  # the fetch step (another user) reads it
    log.info("snapshot taken", extra={"files": copy.result.files, "bytes": copy.result.bytes})
    return 0


async def run_fetch(job: Job, store: StoreForWorker, scratch: Path) -> int:
    submission, source, results = layout(job)
    copy, tests = scratch / "copy.tar", scratch / "tests.tar"
    if job.scope.kind == "check":
        copy = scratch / CHECK_COPY  # the snapshot step's
        if not copy.exists():
            raise Refused("the snapshot of the folder is missing")
    elif not await store.download("/grading/copy.tar", copy):
        raise Refused("the store has no such copy")
    if not await store.download("/grading/tests.tar", tests):
        raise Refused("the store has no such tests")
    files = await asyncio.to_thread(_extract, copy, submission)
    tests_count = await asyncio.to_thread(_extract, tests, source)
    copy.unlink(missing_ok=True)
    tests.unlink(missing_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(_close, submission, source, results)
    log.info("fetched for grading", extra={"files": files, "tests": tests_count})
    return 0


def read_results(results: Path) -> bytes | None:
    """results.json's bytes (at most the limit and one more), None when there is none. A link,
    a folder or a device in its place is none: the student's code may have put it there."""
    try:
        fd = os.open(results / "results.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EACCES):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(RESULTS_MAX_BYTES + 1)


def exit_status(results: Path) -> int | None:
    try:
        with open(results / ".exit-status", "rb") as handle:
            return int(handle.read(16).decode().strip())
    except (OSError, ValueError):
        return None


def oom_killed(results: Path) -> bool:
    """Whether the grade step's wrapper saw the node kill a process at the memory limit
    (operator/rules/grading/pods.py WRAPPER; only the grade step's root can write there)."""
    return (results / ".oom-killed").is_file() and not (results / ".oom-killed").is_symlink()


def report_of(results: Path) -> dict[str, object]:
    found = parse_results(read_results(results))
    status = exit_status(results)
    if isinstance(found, Results):
        # The harness outlived what was killed (a student's process, say): its results stand.
        return {"state": "Graded", "results": found.to_json(), "exitStatus": status}
    if found.reason == "NoResults" and oom_killed(results):
        return {"state": "Failed", "reason": "OutOfMemory", "exitStatus": status,
                "message": "ran out of memory (the grade step was killed at its memory limit)"}
    message = found.message
    if status is not None and status != 0 and found.reason == "NoResults":
        message += f" (run_autograder exited with {status}" + (
            ": killed, perhaps for using more memory than its limit)" if status in (137, 9) else ")")
    return {"state": "Failed", "reason": found.reason, "message": message, "exitStatus": status}


async def run_report(job: Job, store: StoreForWorker) -> int:
    _, _, results = layout(job)
    report = await asyncio.to_thread(report_of, results)

    async def attempt() -> None:
        headers = {**store.headers, "Content-Type": "application/json"}
        async with store.session.post(f"{store.base}/grading/report", data=json.dumps(report),
                                      headers=headers) as answer:
            store._check(answer)
    await store._retry("POST report", attempt)
    log.info("reported", extra={"state": report["state"], "reason": report.get("reason", "")})
    return 0


async def run_grade_step(step: str, job: Job, token: str, store_url: str, scratch: Path | None = None) -> int:
    """One step; `scratch` (default TMPDIR) holds the downloads until they are extracted."""
    scratch = scratch or Path(os.environ.get("TMPDIR") or "/tmp")
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        store = StoreForWorker(store_url, job, token, session)
        try:
            return await (run_fetch(job, store, scratch) if step == "fetch" else run_report(job, store))
        except Refused as err:
            log.error("the store refused the grading", extra={"why": str(err)})
            return 1
        except (aiohttp.ClientError, OSError, TimeoutError, tarfile.TarError) as err:
            log.error("grading step failed", extra={"step": step, "error": str(err)[:300]})
            return 1
