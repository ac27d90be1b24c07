"""What the web UI asks of the assignment store for staff: feedback uploaded as a zip (or one
student's single file), split into each student's folder; and the collected copies as one
streamed zip."""

from __future__ import annotations

import asyncio
import hashlib
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

from aiohttp import web

from userland.coursework import zipped
from userland.coursework.pipes import produce
from userland.coursework.store_files import BadName, QuotaFull
from userland.coursework.store_requests import STORE, body_to_file, ref_of, signed, signed_stream
from userland.coursework.trees import Limits, TooLarge
from userland.platform.model import naming
from userland.platform.model.models import InvalidSpec
from userland.platform.model.objects import rfc3339

FEEDBACK_LIMITS = Limits(files=20_000, bytes=1024**3)


async def put_feedback(request: web.Request) -> web.Response:
    """A zip of feedback from staff: one folder per login, or (`/feedback/<login>`) one student's
    files; a single file that is not a zip is that student's one file (`?name=`)."""
    signature = signed_stream(request, "web")
    ref = ref_of(request)
    only = request.match_info.get("login")
    if only is not None and (not naming.is_valid_login(only) or only != only.lower()):
        raise web.HTTPNotFound()
    files = request.app[STORE]
    # Only the assignment's current students' folders are kept: a folder of anyone else would be
    # kept for nobody (and could fill the volume every course shares).
    if not await asyncio.to_thread(files.known, ref):
        return web.json_response({"message": "The assignment store does not know this assignment's "
                                             "students yet: try again in a moment."}, status=409)
    students = {login for _, login in await asyncio.to_thread(files.members, ref)}
    if only is not None and only not in students:
        return web.json_response({"message": f"{only} is not a student of this assignment."}, status=400)
    upload = files.temp(".zip")
    made: list[Path] = []

    def make_tar() -> Path:
        made.append(files.temp())
        return made[-1]

    try:
        await body_to_file(request, upload, FEEDBACK_LIMITS.bytes, signature)
        name = request.query.get("name", "")
        if only is not None and name and not zipfile.is_zipfile(upload):
            single = zipped.single_file_name(name)
            split = await asyncio.to_thread(_one_file, upload, only, single, make_tar)
        else:
            split = await asyncio.to_thread(zipped.split_feedback, upload, make_tar, FEEDBACK_LIMITS,
                                            only=only, students=students)
        await asyncio.to_thread(files.make_room_for_feedback, ref,
                                {login: student.tar for login, student in split.students.items()})
        uploaded_at = rfc3339()
        for login, student in split.students.items():
            meta = {"files": student.files, "bytes": student.bytes, "sha256": student.sha256,
                    "uploadedAt": uploaded_at}
            await asyncio.to_thread(files.put_feedback, ref, login, student.tar, meta)
    except zipfile.BadZipFile:
        return web.json_response({"message": "That file is not a zip."}, status=400)
    except (TooLarge, InvalidSpec, zipped.Ambiguous) as err:
        return web.json_response({"message": str(err)}, status=400)
    except QuotaFull as err:
        return web.json_response({"message": f"{err} Nothing was kept."}, status=413)
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
    await signed(request, "web")
    login = request.query.get("login") or None
    try:
        copies = await asyncio.to_thread(request.app[STORE].latest_copies, ref_of(request), login)
    except BadName:
        raise web.HTTPNotFound() from None
    entries = [zipped.ZipEntry(c.login, c.template, c.tar) for c in copies]
    # Copies of several Templates (the assignment's Templates changed, or it lists several) are
    # nested by Template: never two `bob/README.md` in one zip.
    nested = request.query.get("nested") == "1" or len({e.template for e in entries}) > 1
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
