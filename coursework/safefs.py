"""Reading and writing inside a student's folder without ever following a link they made.

A worker Pod mounts several students' volumes side by side and runs as the Template's user, the
same for all of them; a link in alice's folder that points at `/work/s1/...` (bob's volume in
that Pod) or at `/etc` must never be followed, or her hand-out would write into bob's folder and
her copy would carry his files (SECURITY.md, "Assignments and the store"). So every path is walked one
component at a time from the volume's root, each folder opened with O_NOFOLLOW|O_DIRECTORY
relative to the one before (the `*at` system calls); a link or a file where a folder should be
stops the walk (`Blocked`). Files are opened with O_NOFOLLOW|O_NONBLOCK (a pipe a student left
cannot hang the worker) and checked to be regular files before a byte is read. Writes go to a
temporary file in the same folder and are renamed over the target, after checking the target
is still what the hand-out's plan saw, so a student never sees a half-written file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from userland.coursework.rules.merge import Present

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1024 * 1024
TEMP_PREFIX = ".userland-tmp-"
# Exactly the names write_file gives its temporary files: a student's own file that merely
# starts the same way is theirs, and collected.
TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{12}")
# Names and depths past these are never handed out or collected (said, and left as they are):
# a name longer than most file systems allow, or a folder deeper than any assignment needs, is
# a student's (or a source's) oddity, and must not cost the rest of a worker's batch.
MAX_NAME_BYTES = 255
MAX_DEPTH = 64
# Left-out entries named in a copy's result (the rest are counted).
LEFT_OUT_NAMED = 50


def name_problem(name: str) -> str | None:
    """Why one path component cannot be handed out or collected, or None when it can: a control
    character (a newline would break every listing), bytes that are not UTF-8 (os.scandir gives
    them as surrogates, which no JSON, tar header or digest can carry), or past 255 bytes."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a name with a control character (such as a newline): left out; rename it"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "a name that is not UTF-8: left out; rename it"
    if len(encoded) > MAX_NAME_BYTES:
        return f"a name longer than {MAX_NAME_BYTES} bytes: left out; rename it"
    return None


def shown(path: str) -> str:
    """A path as it can be said anywhere (JSON, logs, a page): odd bytes and control characters
    escaped, at most 200 characters."""
    text = path.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c if ord(c) >= 32 and ord(c) != 127 else f"\\x{ord(c):02x}" for c in text)
    return text[:200]


class Blocked(Exception):
    """Something that is not a folder (a link, a file) stands where a folder is needed."""


class TooManyEntries(Exception):
    """A folder lists more entries than the caller allows (never listed whole); `whole`: the
    walk as a whole passed its bound (every folder within it)."""

    def __init__(self, message: str, *, whole: bool = False) -> None:
        super().__init__(message)
        self.whole = whole


@dataclass
class LeftOut:
    """What a walk left out (links, pipes, odd names): how many, and the first LEFT_OUT_NAMED of
    them by name. A student's folder of a million links must not cost the worker a million names."""

    count: int = 0
    names: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.names) < LEFT_OUT_NAMED:
            self.names.append(name)


class Changed(Exception):
    """The target changed between the plan and the write: it is left as it is now."""


def file_digest(fd: int, limit: int = -1) -> str:
    """The sha256 of what `fd` reads (at most `limit` bytes when it is not negative: a file that
    grows while it is read is not followed past what was planned)."""
    hasher = hashlib.sha256()
    left = limit
    while (left < 0 or left > 0) and (chunk := os.read(fd, CHUNK if left < 0 else min(CHUNK, left))):
        hasher.update(chunk)
        if left > 0:
            left -= len(chunk)
    return hasher.hexdigest()


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


@dataclass(frozen=True)
class FoundFile:
    """A regular file met while walking a folder (open: the caller reads and closes it)."""

    path: str
    fd: int
    size: int
    mode: int
    mtime: float


class Folder:
    """A folder inside a volume, opened safely; paths below it are relative ("a/b.py")."""

    def __init__(self, fd: int) -> None:
        self._dirs: dict[str, int] = {"": fd}
        # Bytes `describe` may still read to hash the student's files (None: no bound). A file
        # past it is described by its size alone, never read: a sparse file of 100 GiB (a
        # second's `truncate`) where the source has a file must not stall a worker's batch.
        self.hash_budget: int | None = None

    @classmethod
    def open(cls, volume: str, path: str, *, create: bool = False) -> Folder:
        """`volume` is the mount point (ours, trusted); `path` is walked component by component."""
        root = os.open(volume, O_DIR)
        folder = cls(root)
        try:
            fd = folder.dir_fd(path, create=create)
        except BaseException:
            folder.close()
            raise
        inner = cls(os.dup(fd))
        folder.close()
        return inner

    def close(self) -> None:
        for fd in self._dirs.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._dirs.clear()

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def dir_fd(self, rel: str, *, create: bool = False) -> int:
        """The folder at `rel`, opened without following links; FileNotFoundError when it (or a
        folder above it) is missing and `create` is false; Blocked when something else is there."""
        if rel in self._dirs:
            return self._dirs[rel]
        parent, _, name = rel.rpartition("/")
        parent_fd = self.dir_fd(parent, create=create)
        try:
            fd = os.open(name, O_DIR, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent_fd)
            fd = self._open_dir(name, parent_fd, rel)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Blocked(rel) from None
            raise
        self._dirs[rel] = fd
        return fd

    @staticmethod
    def _open_dir(name: str, parent_fd: int, rel: str) -> int:
        try:
            return os.open(name, O_DIR, dir_fd=parent_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Blocked(rel) from None
            raise

    def _parent(self, path: str) -> tuple[int, str] | None:
        parent, _, name = path.rpartition("/")
        try:
            return self.dir_fd(parent), name
        except (FileNotFoundError, Blocked):
            return None

    def describe(self, path: str) -> Present | None:
        """What is at `path` (None: nothing, or a folder above it is missing or not a folder)."""
        found = self._parent(path)
        if found is None:
            return None
        return self._describe_in(*found)

    def _describe_in(self, parent_fd: int, name: str) -> Present | None:
        try:
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        kind = _kind(info.st_mode)
        if kind != "file":
            return Present(kind)  # type: ignore[arg-type]
        try:
            fd = os.open(name, O_READ, dir_fd=parent_fd)
        except OSError:
            return Present("other")  # unreadable (raced into a link, or no permission)
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                return Present("other")
            if self.hash_budget is not None:
                if opened.st_size > self.hash_budget:
                    # Not read: a digest no source or manifest has, so the file is the student's.
                    return Present("file", f"unread:{opened.st_size}:{opened.st_ino}:{opened.st_mtime_ns}")
                self.hash_budget -= opened.st_size
            bound = opened.st_size + 1 if self.hash_budget is not None else -1
            return Present("file", file_digest(fd, bound))
        finally:
            os.close(fd)

    def read_bytes(self, path: str, limit: int) -> bytes | None:
        """A regular file's bytes (at most `limit`; None if it is not one or is larger)."""
        fd = self.open_regular(path)
        if fd is None:
            return None
        try:
            if os.fstat(fd).st_size > limit:
                return None
            return os.read(fd, limit + 1)[:limit]
        finally:
            os.close(fd)

    def open_regular(self, path: str) -> int | None:
        """The regular file at `path`, open for reading (the caller closes it); None when there
        is none (a link, a pipe, a folder, nothing) or it cannot be opened."""
        found = self._parent(path)
        if found is None:
            return None
        try:
            fd = os.open(found[1], O_READ, dir_fd=found[0])
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def write_file(self, path: str, source: BinaryIO, *, executable: bool = False,
                   expect: Present | None = None, size: int = -1) -> None:
        """Put `source`'s bytes at `path` (its folders made), replacing what is there only if it is
        still `expect` (None: nothing may be there). Raises Blocked, Changed, or OSError (a full
        volume: ENOSPC), leaving no temporary file behind."""
        parent, _, name = path.rpartition("/")
        parent_fd = self.dir_fd(parent, create=True)
        temp = TEMP_PREFIX + secrets.token_hex(6)
        fd = os.open(temp, O_NEW, 0o600, dir_fd=parent_fd)
        try:
            try:
                written = 0
                while chunk := source.read(CHUNK):
                    view = memoryview(chunk)
                    while view:
                        done = os.write(fd, view)
                        view = view[done:]
                        written += done
                if size >= 0 and written != size:
                    raise OSError(errno.EIO, f"wrote {written} of {size} bytes")
                os.fchmod(fd, 0o755 if executable else 0o644)
            finally:
                os.close(fd)
            if self._describe_in(parent_fd, name) != expect:
                raise Changed(path)
            os.rename(temp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent_fd)
            raise

    def remove_file(self, path: str, *, expect: Present) -> None:
        """Remove the file at `path` if it is still `expect` (else Changed)."""
        found = self._parent(path)
        if found is None:
            return
        parent_fd, name = found
        if self._describe_in(parent_fd, name) != expect:
            raise Changed(path)
        os.unlink(name, dir_fd=parent_fd)

    def files(self, *, skip_top: frozenset[str] = frozenset(), skip_names: frozenset[str] = frozenset(),
              skipped: LeftOut | None = None, max_entries: int | None = None,
              max_total: int | None = None) -> Iterator[FoundFile]:
        """Every regular file below, depth first in name order, each open (the caller closes it).
        Links, pipes and other special files are never opened; they go to `skipped`, and so do
        names that cannot be carried (`name_problem`) and folders deeper than MAX_DEPTH, with
        the reason (`shown`: printable). A folder that lists more than `max_entries` is not read
        past that, nor is the walk once it has listed more than `max_total` entries in all
        (folders, links and hard links count as much as files): TooManyEntries. A student's
        folder of a million empty files, or of a million folders, must not cost the worker a
        million listing entries in memory."""
        count = _Count(max_total)
        yield from self._walk(self.dir_fd(""), "", skip_top, skip_names, skipped, 1, max_entries, count)

    def _walk(self, fd: int, prefix: str, skip_top: frozenset[str], skip_names: frozenset[str],
              skipped: LeftOut | None, depth: int, max_entries: int | None,
              count: _Count) -> Iterator[FoundFile]:
        listed = []
        with os.scandir(fd) as listing:
            for entry in listing:
                listed.append(entry)
                count.add(1)
                if max_entries is not None and len(listed) > max_entries:
                    where = shown(prefix) or "the folder"
                    raise TooManyEntries(f"{where} lists more than {max_entries:,} entries")
        entries = sorted(listed, key=lambda e: e.name)
        del listed
        left_out = skipped if skipped is not None else LeftOut()
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            if (not prefix and entry.name in skip_top) or entry.name in skip_names \
                    or TEMP_NAME.fullmatch(entry.name):
                continue
            problem = name_problem(entry.name)
            if problem is not None:
                left_out.add(f"{shown(rel)} ({problem})")
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if depth >= MAX_DEPTH:
                    left_out.add(f"{shown(rel)}/ (folders deeper than {MAX_DEPTH} levels: left out)")
                    continue
                try:
                    child = os.open(entry.name, O_DIR, dir_fd=fd)
                except OSError:
                    left_out.add(shown(rel) + "/")
                    continue
                try:
                    yield from self._walk(child, rel + "/", skip_top, skip_names, skipped, depth + 1,
                                         max_entries, count)
                finally:
                    os.close(child)
            elif stat.S_ISREG(info.st_mode):
                try:
                    file_fd = os.open(entry.name, O_READ, dir_fd=fd)
                except OSError:
                    left_out.add(shown(rel))
                    continue
                opened = os.fstat(file_fd)
                if not stat.S_ISREG(opened.st_mode):
                    os.close(file_fd)
                    left_out.add(shown(rel))
                    continue
                yield FoundFile(rel, file_fd, opened.st_size, opened.st_mode, opened.st_mtime)
            else:
                left_out.add(shown(rel))


class _Count:
    """Entries listed so far in one walk, against its bound (None: no bound)."""

    def __init__(self, most: int | None) -> None:
        self.most = most
        self.seen = 0

    def add(self, n: int) -> None:
        self.seen += n
        if self.most is not None and self.seen > self.most:
            raise TooManyEntries(f"more than {self.most:,} entries in all", whole=True)
