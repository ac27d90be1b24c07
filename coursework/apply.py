"""One student's environment, one piece of work: the file side of a worker Pod (blocking; the
worker runs these in threads, several students at once).

- `hand_out`: the never-overwrite merge (merge.py) of a hand-out tar into `<path>/`, its
  manifest kept in `<path>/.userland-handout.json`; also used to return feedback into
  `<path>/feedback/`.
- `take_copy`: the tar of `<path>/` as it is now, written to a stream (the store keeps it).

Whatever goes wrong for one student is their result, in words (their storage is full, something
of theirs is in the way), never an exception that stops the others.
"""

from __future__ import annotations

import errno
import hmac
import io
import json
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal, cast

from userland.coursework.rules.merge import Conflict, Plan, SourceFile, plan_merge, relevant_paths
from userland.coursework.safefs import Blocked, Changed, Folder
from userland.coursework.trees import CopyResult, IndexEntry, Limits, TooLarge, safe_name, write_copy
from userland.platform.model.assignments import MANIFEST_NAME
from userland.platform.model.coursework import manifest_seal, tree_digest
from userland.platform.model.objects import rfc3339

MANIFEST_LIMIT = 16 * 1024 * 1024
# A hand-out record starts with its seal on a line of its own; the seal covers the bytes after it.
SEAL_HEAD = b'{\n "seal": "'
SEAL_HEX = 64
SEAL_TAIL = b'",\n'
RECORD_CHUNK = 256 * 1024
# The most of a record of the first format (sealed over its parsed files) that is parsed: about
# 2,500 files' worth, a few MiB of Python objects at most.
LEGACY_RECORD_LIMIT = 256 * 1024
HASH_MARGIN = 64 * 1024 * 1024
MAX_CONFLICTS_KEPT = 200
State = Literal["HandedOut", "Conflicts", "Failed"]

FULL = "the student's storage is full: nothing more could be written (free some space, then hand out again)"
NOT_MOUNTED = "the student's storage is not available to the worker"


def words_for(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return FULL
    if err.errno in (errno.EACCES, errno.EPERM):
        return "the worker may not write there: the folder belongs to another user than the Template's"
    if err.errno == errno.EROFS:
        return "the student's storage is read-only"
    return f"the student's storage could not be written ({err.strerror or err})"


@dataclass
class Outcome:
    """One environment's result, as the store keeps it and the operator reports it."""

    state: State
    reason: str = ""
    conflicts: list[Conflict] = field(default_factory=list)
    written: int = 0
    removed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "written": self.written, "removed": self.removed,
                "conflicts": [[c.path, c.kind] for c in self.conflicts[:MAX_CONFLICTS_KEPT]],
                "conflictCount": len(self.conflicts), "at": rfc3339()}


@dataclass(frozen=True)
class Sealer:
    """Who a hand-out record is for, and the key that seals it (platform/model/coursework.py): the
    record lives in the student's folder, which they can write, so only one the platform sealed
    for this environment and folder is believed (SECURITY.md, "A forged hand-out record")."""

    key: str
    env: str
    folder: str

    def seal(self, files: Mapping[str, str]) -> str:
        """The first format's seal (over the parsed files): only to read records written by it."""
        return manifest_seal(self.key, self.env, self.folder, files)

    def record_mac(self) -> hmac.HMAC:
        """The seal of a record's bytes after its seal line, fed as they are read or written. The
        key is the assignment's; the environment and folder are in it, so a record sealed for
        alice, or for another folder, is not believed for bob."""
        whom = json.dumps([self.env, self.folder], separators=(",", ":"))
        return hmac.new(self.key.encode(), f"userland-handout-record-v2\n{whom}\n".encode(), "sha256")


def load_manifest(folder: Folder, sealer: Sealer) -> dict[str, str] | None:
    """The files the student was last given, or None when there is no usable manifest (a first
    hand-out; or one they deleted, mangled or forged: then every file they have is theirs).

    The record is the student's to write, so nothing of it is parsed before its seal is checked
    on its bytes, as they are read (memory: a chunk; nothing written anywhere): a
    forged record of 16 MiB of `{}` cost the worker 420 MiB of Python objects when it was parsed
    first (SECURITY.md, "A forged record the size of the limit")."""
    if not sealer.key:
        return None  # nothing is trusted without a key: not worth reading
    fd = folder.open_regular(MANIFEST_NAME)
    if fd is None:
        return None
    with open(fd, "rb") as handle:
        head = handle.read(len(SEAL_HEAD) + SEAL_HEX + len(SEAL_TAIL))
        if _is_sealed_head(head):
            data = _verified_record(handle, head, sealer)
            if data is None:
                return None
            try:
                files = json.loads(data).get("files")
            except (ValueError, AttributeError, RecursionError):
                return None
            return _usable_files(files)
        # A record of the first format (sealed over its parsed files), written before this one:
        # believed only when it is as small as a record of a few thousand files can be, so that
        # parsing it can never cost the worker more than a few MiB.
        raw = head + handle.read(LEGACY_RECORD_LIMIT + 1 - len(head))
    if len(raw) > LEGACY_RECORD_LIMIT:
        return None
    try:
        record = json.loads(raw)
        files, seal = record.get("files"), record.get("seal")
    except (ValueError, AttributeError, RecursionError):
        return None
    usable = _usable_files(files)
    if usable is None or not isinstance(seal, str):
        return None
    expected = sealer.seal(usable)
    if not expected or not hmac.compare_digest(seal, expected):
        return None
    return usable


def _is_sealed_head(head: bytes) -> bool:
    hex_part = head[len(SEAL_HEAD):len(SEAL_HEAD) + SEAL_HEX]
    return (len(head) == len(SEAL_HEAD) + SEAL_HEX + len(SEAL_TAIL) and head.startswith(SEAL_HEAD)
            and head.endswith(SEAL_TAIL) and all(c in b"0123456789abcdef" for c in hex_part))


def _verified_record(handle: BinaryIO, head: bytes, sealer: Sealer) -> bytes | None:
    """The whole record's bytes when the seal in `head` is the one of the bytes after it (read
    from `handle`, at most MANIFEST_LIMIT); None otherwise. Read twice: first only into the seal
    (a chunk held, nothing written anywhere: a forged record of 16 MiB, in 16 students' folders
    at once, once filled a hand-out Pod's scratch space through a spool), then, the seal being
    the platform's, kept whole and checked again on exactly the bytes kept (the student may have
    changed the file between the two readings)."""
    if not _seal_matches(handle, head, sealer, None):
        return None
    handle.seek(len(head))
    kept: list[bytes] = []
    if not _seal_matches(handle, head, sealer, kept):
        return None
    return head + b"".join(kept)  # the platform's own record: as large as what it handed out


def _seal_matches(handle: BinaryIO, head: bytes, sealer: Sealer, kept: list[bytes] | None) -> bool:
    mac = sealer.record_mac()
    size = len(head)
    while chunk := handle.read(RECORD_CHUNK):
        size += len(chunk)
        if size > MANIFEST_LIMIT:
            return False
        mac.update(chunk)
        if kept is not None:
            kept.append(chunk)
    return hmac.compare_digest(head[len(SEAL_HEAD):len(SEAL_HEAD) + SEAL_HEX].decode(), mac.hexdigest())


def _usable_files(files: object) -> dict[str, str] | None:
    if not isinstance(files, dict):
        return None
    if not all(isinstance(path, str) and isinstance(digest, str) and safe_name(path) == path
               for path, digest in files.items()):
        return None
    return dict(files)


def manifest_bytes(files: Mapping[str, str], sealer: Sealer, *, assignment: str, commit: str) -> bytes:
    """The record, sealed on its bytes: `{"seal": "<hmac of what follows its line>", ...}`."""
    body = json.dumps({
        "about": "Written by Userland when this assignment is handed out: what you were given, so a later "
                 "update never overwrites your changes. It is sealed: an edited copy is ignored (every file "
                 "is then yours and kept), as is a deleted one.",
        "assignment": assignment, "commit": commit, "files": dict(sorted(files.items())),
    }, indent=1).encode()
    rest = body[2:]  # after "{\n": the seal's line takes its place
    mac = sealer.record_mac()
    mac.update(rest)
    return SEAL_HEAD + mac.hexdigest().encode() + SEAL_TAIL + rest


Opener = Callable[[str], BinaryIO]


def hand_out(volume: str, path: str, index: Mapping[str, IndexEntry], open_member: Opener, *,
             assignment: str, commit: str, sealer: Sealer) -> Outcome:
    """Merge the source (`index`, its files read with `open_member`) into `<volume>/<path>`."""
    try:
        folder = Folder.open(volume, path, create=True)
    except Blocked as err:
        return Outcome("Failed", f"something of the student's ({err}) is where the folder {path} should be: "
                                 "a file or a link; nothing was handed out")
    except FileNotFoundError:
        return Outcome("Failed", NOT_MOUNTED)
    except OSError as err:
        return Outcome("Failed", words_for(err))
    with folder:
        # Reading the student's files to tell whether they changed them is bounded: twice the
        # source and a margin (past it a file counts as changed, so it is kept as it is).
        folder.hash_budget = 2 * sum(e.size for e in index.values()) + HASH_MARGIN
        return _merge(folder, index, open_member, assignment=assignment, commit=commit, sealer=sealer)


def _merge(folder: Folder, index: Mapping[str, IndexEntry], open_member: Opener, *, assignment: str,
           commit: str, sealer: Sealer) -> Outcome:
    source = {p: SourceFile(e.digest, e.executable) for p, e in index.items()}
    manifest = load_manifest(folder, sealer)
    current = {p: found for p in relevant_paths(source, manifest)
               if (found := folder.describe(p)) is not None}
    plan: Plan = plan_merge(source, manifest, current)
    conflicts = list(plan.conflicts)
    kept = dict(plan.manifest)
    outcome = Outcome("HandedOut")
    failure = ""
    for path in plan.write:
        entry = index[path]
        try:
            with open_member(path) as data:
                folder.write_file(path, data, executable=entry.executable, expect=current.get(path),
                                  size=entry.size)
            outcome.written += 1
        except Blocked:
            conflicts.append(Conflict(path, "blocked"))
            _keep_previous(kept, manifest, path)
        except Changed:
            # The student was quicker than the hand-out: what they have now stays theirs.
            conflicts.append(Conflict(path, "changed" if path in current else "exists"))
            _keep_previous(kept, manifest, path)
        except OSError as err:
            failure = words_for(err)
            _keep_previous(kept, manifest, path)
            for rest in plan.write[plan.write.index(path) + 1:]:
                _keep_previous(kept, manifest, rest)
            break
    if not failure:
        for path in plan.delete:
            try:
                folder.remove_file(path, expect=current[path])
                outcome.removed += 1
            except Changed:
                conflicts.append(Conflict(path, "kept"))
            except OSError as err:
                failure = words_for(err)
                break
    try:
        written = manifest_bytes(kept, sealer, assignment=assignment, commit=commit)
        folder.write_file(MANIFEST_NAME, io.BytesIO(written), expect=folder.describe(MANIFEST_NAME))
    except (Blocked, Changed):
        pass  # a link or folder of the student's at the manifest's name: the next hand-out has none
    except OSError as err:
        failure = failure or words_for(err)
    outcome.conflicts = conflicts
    if failure:
        outcome.state, outcome.reason = "Failed", failure
    elif conflicts:
        outcome.state = "Conflicts"
    return outcome


def _keep_previous(kept: dict[str, str], manifest: Mapping[str, str] | None, path: str) -> None:
    """Not written after all: the manifest says what the student had been given before (if any)."""
    previous = (manifest or {}).get(path)
    if previous is None:
        kept.pop(path, None)
    else:
        kept[path] = previous


@dataclass
class Copy:
    """A copy taken (`result`), or why none could be (`reason`); `taken_at` is when reading began."""

    taken_at: str
    result: CopyResult | None = None
    reason: str = ""
    seconds: float = 0.0


class OutputError(OSError):
    """Writing the copy out failed (the Pod's scratch space is full, the upload went away): not
    the student's doing, unlike an error reading their folder."""


class _Output(io.RawIOBase):
    def __init__(self, out: BinaryIO) -> None:
        super().__init__()
        self.out = out

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            return self.out.write(data)
        except OSError as err:
            raise OutputError(err.errno, err.strerror) from err


def take_copy(volume: str, path: str, out: BinaryIO, limits: Limits) -> Copy:
    """Write the tar of `<volume>/<path>` to `out`. A folder the student deleted is an empty copy
    (that is what there was); one that a link replaced is refused (never followed). An error
    writing `out` is raised (OutputError); one reading the folder is the copy's reason."""
    out = cast(BinaryIO, _Output(out))
    started = time.monotonic()
    taken_at = rfc3339()
    try:
        folder = Folder.open(volume, path)
    except FileNotFoundError:
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT):
            pass
        return Copy(taken_at, CopyResult(sha256=tree_digest([]), files=0, bytes=0, skipped=[]),
                    seconds=time.monotonic() - started)
    except Blocked:
        return Copy(taken_at, reason=f"the folder {path} is a link or a file in the student's storage, not a "
                                     "folder: nothing was collected")
    except OSError as err:
        return Copy(taken_at, reason=f"the student's storage could not be read ({err.strerror or err})")
    with folder:
        try:
            result = write_copy(folder, out, limits)
        except TooLarge as err:
            return Copy(taken_at, reason=f"{err}: nothing was collected; an instructor can raise the limit")
        except OutputError:
            raise
        except OSError as err:
            return Copy(taken_at, reason=f"the student's storage could not be read ({err.strerror or err})")
    return Copy(taken_at, result, seconds=time.monotonic() - started)

