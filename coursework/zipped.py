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
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from userland.coursework.rules.zipnames import EntryNames
from userland.coursework.safefs import shown
from userland.coursework.trees import SPOOL_BYTES, Limits, TooLarge, members, safe_name
from userland.platform.model import naming
from userland.platform.model.assignments import MANIFEST_NAME, relative_path
from userland.platform.model.coursework import size_words, tree_digest
from userland.platform.model.models import InvalidSpec

CHUNK = 1024 * 1024
# One file of feedback at most (a recording of a review, a marked-up notebook fit; the whole
# upload is bounded by the store's FEEDBACK_LIMITS).
FILE_LIMIT = 256 * 1024 * 1024
# The end of a zip: its end record (22 bytes) after a comment of at most 64 KiB.
END_SIZE = 22
END_TAIL = 65535
ZIP64_AT = 2**31  # a member this large is written as zip64 up front (its header cannot grow later)
# A zip's directory (read whole by zipfile, every name kept) per entry allowed, on average: a
# record of 46 bytes, a name, extra fields (zip64, times). 60,000-byte names in a 1 GiB upload
# would have the store (every course's) hold the upload's size over again.
DIRECTORY_BYTES_PER_ENTRY = 512
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
            # Portable, one file for one entry on the teacher's computer too; one copy's names at
            # a time (prefixes are logins and Templates, lowercase: two copies never collide).
            names = EntryNames()
            for name, member, data in members(str(entry.tar)):
                info = zipfile.ZipInfo(names.name(prefix, name), date_time=_date(member.mtime))
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


def zip_entries(path: Path, most: int, *, most_bytes: int | None = None) -> int:
    """How many entries a zip's central directory holds, counted by walking its records (their
    headers only) before zipfile builds an object per entry; past `most` the count stops there
    (the declared count is not believed: zipfile itself reads as many as the directory holds).
    BadZipFile when there is no end record or the directory is not where it says; TooLarge when
    the directory is larger than `most_bytes` (zipfile reads it whole, then keeps every name)."""
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
        if most_bytes is not None and directory_size > most_bytes:
            raise TooLarge(f"the feedback zip's names come to more than {size_words(most_bytes)} in all "
                           f"(its list of entries; at most {DIRECTORY_BYTES_PER_ENTRY} bytes an entry on "
                           "average): shorten the names")
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
                   only: str | None = None, file_limit: int = FILE_LIMIT,
                   students: Collection[str] | None = None) -> Split:
    """The zip at `upload` as one tar per login folder (`only`: the zip is one student's files,
    at its top level). BadZipFile for what is not a zip; TooLarge past the limits: more entries
    than twice the files allowed (counted before they are read), more files or bytes in all, or
    a file past `file_limit`; Ambiguous when two names mean the same student (`Alice/`, `alice/`)
    or the same file of one. A folder of a login not in `students` (when given) is left out, said
    in `ignored`, and never written. Files are streamed through a spool (memory up to 8 MiB, then disk),
    never held whole, and a file that inflates past what it declared is refused as it is read."""
    most_bytes = 2 * limits.files * DIRECTORY_BYTES_PER_ENTRY
    if zip_entries(upload, 2 * limits.files, most_bytes=most_bytes) > 2 * limits.files:
        raise TooLarge(f"the feedback zip lists more than {2 * limits.files:,} entries (files and folders; "
                       f"at most {limits.files:,} files can be returned at once)")
    split = Split()
    total_files = total_bytes = 0
    names = _OneNameEach()
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
                    login = names.folder(login)
                    if students is not None and login not in students:
                        # Kept for nobody: never written (a folder per made-up login filled the volume).
                        if f"{login} (not a student of this assignment)" not in split.ignored[-1:]:
                            split.ignored.append(f"{login} (not a student of this assignment)")
                        continue
                if stat.S_ISLNK(info.external_attr >> 16):
                    split.ignored.append(f"{login}/{rel} (a link)")
                    continue
                if rel.split("/")[0] == MANIFEST_NAME:
                    split.ignored.append(f"{login}/{rel} (a name the platform keeps)")
                    continue
                names.file(login, rel, info.filename)
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


def single_file_name(name: str) -> str:
    """The name a single file of feedback is given (its last part), refused in words when it is
    the platform's own: the zip path leaves `.userland-handout.json` out, and so does this one."""
    single = relative_path(name.rsplit("/", 1)[-1] or "feedback", "name")
    if single == MANIFEST_NAME:
        raise InvalidSpec(f"A file named {MANIFEST_NAME} cannot be returned: the platform keeps that name "
                          "for its own record in every student's folder. Rename the file and upload again.")
    return single


class Ambiguous(Exception):
    """Two names of a feedback zip mean the same student, or the same file of one: str() names
    the pair, in words staff can act on."""


class _OneNameEach:
    """Each student's folder, and each file in it, under one name only: logins are the same
    whatever their case (`Alice/` and `alice/` are both alice's), and a backslash is a folder
    separator in zips made on Windows (`a\\b.md` is `a/b.md`). Taking both would have one file
    silently replace the other; which one staff meant cannot be known, so the zip is refused."""

    def __init__(self) -> None:
        self.spelled: dict[str, str] = {}  # login -> the folder's name as the zip spells it
        # Each login's paths as a tree of their parts: a folder is a dict, a file the entry's name
        # (parts, not every folder's whole path: what it holds grows as the zip's names, no more).
        self.trees: dict[str, dict[str, Any]] = {}

    def folder(self, spelled: str) -> str:
        login = spelled.lower()
        first = self.spelled.setdefault(login, spelled)
        if first != spelled:
            raise Ambiguous(f"The zip has both {shown(first)}/ and {shown(spelled)}/: logins are the same "
                            f"whatever their case, so both folders would be {login}'s, one file replacing "
                            "the other. Put the files in one folder and upload again.")
        return login

    def file(self, login: str, rel: str, entry: str) -> None:
        node = self.trees.setdefault(login, {})
        *folders, name = rel.split("/")
        for part in folders:
            below = node.setdefault(part, {})
            if isinstance(below, str):  # `notes` and `notes/week1.md`: one would never reach them
                raise Ambiguous(self._clash(below, entry, login))
            node = below
        first = node.get(name)
        if isinstance(first, str):  # each entry of the zip comes once: this is another of the same file
            raise Ambiguous(f"The zip has both {shown(first)} and {shown(entry)}, which are the same file "
                            f"({shown(rel)}) for {login}: one would replace the other. Keep one and upload "
                            "again.")
        if first is not None:
            while isinstance(first, dict):  # an entry in that folder, to name it
                first = next(iter(first.values()))
            raise Ambiguous(self._clash(entry, first, login))
        node[name] = entry

    @staticmethod
    def _clash(file: str, inside: str, login: str) -> str:
        return (f"The zip has both {shown(file)} and {shown(inside)}: the first is a file where the other "
                f"needs a folder of the same name, and {login}'s folder cannot hold both. Rename one and "
                "upload again.")


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
