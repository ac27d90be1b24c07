"""Zip files in and out of the store (blocking; run in threads).

- `write_collected`: every student's copy as one zip, `<login>/...` (or `<login>/<template>/...`
  when the assignment lists several Templates), written to a stream as it is read from the
  copies' tars: nothing is held in memory but one file's buffer.
- `split_feedback`: a zip staff upload, one folder per login, into one tar per login (the files
  each student gets back), refusing what could escape or explode (names with `..`, links, more
  files or bytes than the limits, a declared size that lies).
"""

from __future__ import annotations

import hashlib
import io
import stat
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from userland.coursework.trees import Limits, TooLarge, members, safe_name
from userland.platform import naming
from userland.platform.coursework import tree_digest

CHUNK = 1024 * 1024
ZIP64_AT = 2**31  # a member this large is written as zip64 up front (its header cannot grow later)
# What operating systems add to zips on their own: never a student's folder or a file.
IGNORED_TOP = ("__MACOSX",)


@dataclass(frozen=True)
class ZipEntry:
    login: str
    template: str
    tar: Path


def write_collected(entries: Iterable[ZipEntry], out: BinaryIO, *, nested: bool) -> int:
    """Write the zip of `entries` to `out`; the number of files written."""
    count = 0
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1,
                         allowZip64=True) as archive:
        for entry in entries:
            prefix = f"{entry.login}/{entry.template}/" if nested else f"{entry.login}/"
            for name, member, data in members(str(entry.tar)):
                info = zipfile.ZipInfo(prefix + name, date_time=_date(member.mtime))
                info.external_attr = ((0o755 if member.mode & 0o111 else 0o644) | stat.S_IFREG) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(info, "w", force_zip64=member.size >= ZIP64_AT) as target:
                    while chunk := data.read(CHUNK):
                        target.write(chunk)
                count += 1
    return count


def _date(mtime: float) -> tuple[int, int, int, int, int, int]:
    moment = time.gmtime(max(mtime, 315532800))  # zip cannot say anything before 1980
    return (moment.tm_year, moment.tm_mon, moment.tm_mday, moment.tm_hour, moment.tm_min, moment.tm_sec)


@dataclass
class FeedbackFiles:
    """One student's returned files, as a tar, with what the page reports of them."""

    tar: Path
    files: int = 0
    bytes: int = 0
    digests: list[tuple[str, str]] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return tree_digest(self.digests)


@dataclass
class Split:
    students: dict[str, FeedbackFiles] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)  # top-level names that are not a login


def split_feedback(upload: Path, make_tar: Callable[[], Path], limits: Limits, *,
                   only: str | None = None) -> Split:
    """The zip at `upload` as one tar per login folder (`only`: the zip is one student's files,
    at its top level). BadZipFile for what is not a zip; TooLarge past the limits."""
    split = Split()
    total_files = total_bytes = 0
    with zipfile.ZipFile(upload) as archive:
        writers: dict[str, tarfile.TarFile] = {}
        try:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                name = safe_name(info.filename.replace("\\", "/"))
                if name is None:
                    split.ignored.append(info.filename[:100])
                    continue
                if only is not None:
                    login, rel = only, name
                else:
                    login, _, rel = name.partition("/")
                    if login in IGNORED_TOP or login.startswith("."):
                        continue
                    if not rel or not naming.is_valid_login(login):
                        if login not in split.ignored:
                            split.ignored.append(login[:100])
                        continue
                    login = login.lower()
                if stat.S_ISLNK(info.external_attr >> 16):
                    split.ignored.append(f"{login}/{rel} (a link)")
                    continue
                total_files += 1
                total_bytes += info.file_size
                limits.check(total_files, total_bytes, "the feedback")
                student = split.students.get(login)
                if student is None:
                    student = split.students[login] = FeedbackFiles(make_tar())
                    writers[login] = tarfile.open(student.tar, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
                data = _read_member(archive, info)
                info_tar = tarfile.TarInfo(rel)
                info_tar.size = len(data)
                info_tar.mode = 0o644
                writers[login].addfile(info_tar, io.BytesIO(data))
                student.files += 1
                student.bytes += len(data)
                student.digests.append((rel, hashlib.sha256(data).hexdigest()))
        finally:
            for writer in writers.values():
                writer.close()
    return split


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, never more than it declared (zipfile checks the rest: CRC, length)."""
    with archive.open(info) as source:
        data = source.read(info.file_size + 1)
    if len(data) > info.file_size:
        raise TooLarge(f"{info.filename[:100]} is larger than it says")
    return data
