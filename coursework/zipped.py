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
import stat
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

from userland.coursework.safefs import shown
from userland.coursework.trees import SPOOL_BYTES, Limits, TooLarge, members, safe_name
from userland.platform import naming
from userland.platform.assignments import MANIFEST_NAME
from userland.platform.coursework import size_words, tree_digest

CHUNK = 1024 * 1024
# One file of feedback at most (a recording of a review, a marked-up notebook fit; the whole
# upload is bounded by the store's FEEDBACK_LIMITS).
FILE_LIMIT = 256 * 1024 * 1024
# The end of a zip: its end record (22 bytes) after a comment of at most 64 KiB.
END_SIZE = 22
END_TAIL = 65535
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
                info = zipfile.ZipInfo(prefix + portable(name), date_time=_date(member.mtime))
                info.external_attr = ((0o755 if member.mode & 0o111 else 0o644) | stat.S_IFREG) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(info, "w", force_zip64=member.size >= ZIP64_AT) as target:
                    while chunk := data.read(CHUNK):
                        target.write(chunk)
                count += 1
    return count


def portable(name: str) -> str:
    r"""A student's file name as a zip member every extractor keeps below its folder: `\` is a
    folder separator to Windows' zip tools (`..\..\evil.bat` would climb out of the folder the
    teacher extracts into) and `:` names a drive or a stream there, so both are written
    percent-encoded (`%5C`, `%3A`); every other name is kept as it is."""
    return name.replace("\\", "%5C").replace(":", "%3A")


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


def zip_entries(path: Path, most: int) -> int:
    """How many entries a zip's central directory holds, counted by walking its records (their
    headers only) before zipfile builds an object per entry; past `most` the count stops there
    (the declared count is not believed: zipfile itself reads as many as the directory holds).
    BadZipFile when there is no end record or the directory is not where it says."""
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        tail_start = max(0, size - (END_TAIL + END_SIZE))
        handle.seek(tail_start)
        tail = handle.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < END_SIZE:
            raise zipfile.BadZipFile("no end of central directory")
        # The directory ends where the end records begin: the zip64 one (a record of 56 bytes and
        # its 20-byte locator, right before the end record) when there is one.
        end = tail_start + at
        directory_size = int.from_bytes(tail[at + 12:at + 16], "little")
        if end >= 76:
            handle.seek(end - 76)
            record = handle.read(56)
            locator = handle.read(20)
            if locator[:4] == b"PK\x06\x07":
                record_at = end - 76
                if record[:4] != b"PK\x06\x06":  # a record with extensible data: where the locator says
                    record_at = int.from_bytes(locator[8:16], "little")
                    handle.seek(record_at)
                    record = handle.read(56)
                if record[:4] != b"PK\x06\x06" or len(record) < 56:
                    raise zipfile.BadZipFile("a zip64 end record that is not where its locator says")
                directory_size = int.from_bytes(record[40:48], "little")
                end = record_at
        if directory_size > end:
            raise zipfile.BadZipFile("a central directory larger than the file")
        handle.seek(end - directory_size)
        count = 0
        walked = 0
        while walked < directory_size and count <= most:
            header = handle.read(46)
            if len(header) < 46 or header[:4] != b"PK\x01\x02":
                raise zipfile.BadZipFile("the central directory is not where its end record says")
            extra = sum(int.from_bytes(header[i:i + 2], "little") for i in (28, 30, 32))
            handle.seek(extra, 1)
            walked += 46 + extra
            count += 1
        return count


def split_feedback(upload: Path, make_tar: Callable[[], Path], limits: Limits, *,
                   only: str | None = None, file_limit: int = FILE_LIMIT) -> Split:
    """The zip at `upload` as one tar per login folder (`only`: the zip is one student's files,
    at its top level). BadZipFile for what is not a zip; TooLarge past the limits: more entries
    than twice the files allowed (counted before they are read), more files or bytes in all, or
    a file past `file_limit`. Files are streamed through a spool (memory up to 8 MiB, then disk),
    never held whole, and a file that inflates past what it declared is refused as it is read."""
    if zip_entries(upload, 2 * limits.files) > 2 * limits.files:
        raise TooLarge(f"the feedback zip lists more than {2 * limits.files:,} entries (files and folders; "
                       f"at most {limits.files:,} files can be returned at once)")
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
                if rel.split("/")[0] == MANIFEST_NAME:
                    split.ignored.append(f"{login}/{rel} (a name the platform keeps)")
                    continue
                if info.file_size > file_limit:
                    raise TooLarge(f"{shown(info.filename)[:100]} is larger than {size_words(file_limit)}, "
                                   "the most one file of feedback may be")
                total_files += 1
                total_bytes += info.file_size
                limits.check(total_files, total_bytes, "the feedback")
                student = split.students.get(login)
                if student is None:
                    student = split.students[login] = FeedbackFiles(make_tar())
                    writers[login] = tarfile.open(student.tar, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
                digest, spooled = _spool_member(archive, info)
                with spooled:
                    info_tar = tarfile.TarInfo(rel)
                    info_tar.size = info.file_size
                    info_tar.mode = 0o644
                    writers[login].addfile(info_tar, spooled)
                student.files += 1
                student.bytes += info.file_size
                student.digests.append((rel, digest))
        finally:
            for writer in writers.values():
                writer.close()
    return split


def _spool_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[str, IO[bytes]]:
    """A member's digest and bytes (spooled), never more than it declared (zipfile checks the
    rest: CRC, length); TooLarge when it inflates past that."""
    hasher = hashlib.sha256()
    spooled = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (the caller closes it)
    read = 0
    try:
        with archive.open(info) as source:
            while chunk := source.read(min(CHUNK, info.file_size + 1 - read)):
                read += len(chunk)
                if read > info.file_size:
                    raise TooLarge(f"{shown(info.filename)[:100]} is larger than it says")
                hasher.update(chunk)
                spooled.write(chunk)
        if read != info.file_size:
            raise TooLarge(f"{shown(info.filename)[:100]} is shorter than it says")
    except BaseException:
        spooled.close()
        raise
    spooled.seek(0)
    return hasher.hexdigest(), spooled
