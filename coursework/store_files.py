"""The assignment store on disk: one folder (a ReadWriteOnce volume in a cluster) holds it all.

    assignments/<ns>/<assignment>/<uid>/               one Assignment object (its uid: a name reused
                                                       later is another assignment, with nothing of this one)
        sources/<key>.tar|.json                        a commit made safe to hand out, and its index
        copies/<round>/<template>/<login>.tar|.json    a student's copy and its receipt
        results/handout/<template>/<login>.json        the last hand-out's outcome
        results/feedback/<template>/<login>.json       the last feedback returned
        results/collect/<round>/<template>/<login>.json  a copy that could not be taken
        feedback/<login>.tar|.json                     the files staff uploaded for a student
        members.json                                   its current students (the operator says)
        retired                                        when the operator said it no longer exists
    tmp/                                               uploads in progress (same file system)

Copies are written once: the tar is linked into place (`os.link` fails when the name exists), so
of two uploads for one (round, student) the first stays and the second learns its receipt. No
path is ever built from anything unchecked: namespaces, assignments and Templates are DNS
labels, uids Kubernetes uids, logins GitHub logins, rounds round ids (`_check`).

Every byte under an assignment's folder counts toward its quota and its course's (`Usage`,
kept here as files are written and removed: the store is the only writer); a retired
assignment's folder counts until it is removed, after the retention (store_retention.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from userland.coursework.trees import Limits, check_copy
from userland.platform.model import naming
from userland.platform.model.coursework import env_key, is_round_id, size_words
from userland.platform.model.objects import rfc3339

JSON = dict[str, Any]
_UID = re.compile(r"^[0-9a-f][0-9a-f-]{0,62}$")


class BadName(ValueError):
    """A name that cannot be part of a store path."""


class QuotaFull(Exception):
    """A write that would take an assignment or its course past its quota; str() says so in
    words for staff (which quota, how full, what to do)."""


def is_uid(text: str) -> bool:
    """A Kubernetes uid (a UUID, lower case)."""
    return bool(_UID.match(text))


@dataclass(frozen=True)
class Ref:
    """One Assignment object: its namespace, name and uid."""

    namespace: str
    name: str
    uid: str

    def check(self) -> None:
        if not (naming.is_valid_dns_label(self.namespace) and naming.is_valid_dns_label(self.name)):
            raise BadName(f"{self.namespace[:70]!r}/{self.name[:70]!r} is not an assignment")
        if not is_uid(self.uid):
            raise BadName(f"{self.uid[:70]!r} is not a uid")


def _check(*, template: str = "", login: str = "", round_: str = "", key: str = "") -> None:
    if template and not naming.is_valid_dns_label(template):
        raise BadName(f"{template[:70]!r} is not a name")
    if login and (not naming.is_valid_login(login) or login != login.lower()):
        raise BadName(f"{login[:50]!r} is not a login")
    if round_ and not is_round_id(round_):
        raise BadName(f"{round_[:50]!r} is not a round")
    if key and (len(key) > 100 or not all(c in "0123456789abcdef-" for c in key)):
        raise BadName(f"{key[:50]!r} is not a source key")


def _write_json(path: Path, data: JSON, tmp: Path) -> None:
    temp = tmp / f"{secrets.token_hex(8)}.json"
    temp.write_text(json.dumps(data, separators=(",", ":")))
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(temp, path)


def _read_json(path: Path) -> JSON | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def folder_bytes(folder: Path) -> int:
    """The bytes of the files below `folder` (what a quota counts)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@dataclass(frozen=True)
class CopyEntry:
    template: str
    login: str
    round: str
    tar: Path


@dataclass(frozen=True)
class Quotas:
    """Bytes an assignment and a course (a namespace) may keep in the store; 0: no limit."""

    assignment: int = 0
    course: int = 0


class StoreFiles:
    def __init__(self, root: Path, *, copy_limits: Limits, quotas: Quotas | None = None) -> None:
        self.root = root
        self.tmp = root / "tmp"
        self.copy_limits = copy_limits
        self.quotas = quotas or Quotas()
        for folder in ("assignments", "tmp"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        # Left by a store that stopped mid-upload: never part of anything.
        for leftover in self.tmp.iterdir():
            with contextlib.suppress(OSError):
                leftover.unlink()
        # ETags of the state: a restarted store never answers 304 to a version it did not make.
        self._epoch = secrets.token_hex(4)
        self._versions: dict[Ref, int] = {}
        self._states: dict[Ref, tuple[int, JSON]] = {}
        # Bytes per assignment folder, counted once (a walk) and then kept up to date here.
        self._usage: dict[Ref, int] = {}

    def temp(self, suffix: str = ".tar") -> Path:
        return self.tmp / f"{secrets.token_hex(8)}{suffix}"

    def folder(self, ref: Ref) -> Path:
        ref.check()
        return self.root / "assignments" / ref.namespace / ref.name / ref.uid

    def _changed(self, ref: Ref) -> None:
        self._versions[ref] = self._versions.get(ref, 0) + 1

    def version(self, ref: Ref) -> str:
        return f"{self._epoch}-{self._versions.get(ref, 0)}"

    # ----- usage and quotas -----

    def refs(self, namespace: str | None = None) -> Iterator[Ref]:
        """Every assignment folder (of one namespace), retired ones included."""
        base = self.root / "assignments"
        for ns_dir in _dirs(base) if namespace is None else [base / namespace]:
            for name_dir in _dirs(ns_dir):
                for uid_dir in _dirs(name_dir):
                    if is_uid(uid_dir.name):
                        yield Ref(ns_dir.name, name_dir.name, uid_dir.name)

    def usage(self, ref: Ref) -> int:
        if ref not in self._usage:
            self._usage[ref] = folder_bytes(self.folder(ref))
        return self._usage[ref]

    def course_usage(self, namespace: str) -> int:
        return sum(self.usage(ref) for ref in self.refs(namespace))

    def _grew(self, ref: Ref, delta: int) -> None:
        if ref in self._usage:
            self._usage[ref] = max(0, self._usage[ref] + delta)
        self._changed(ref)

    def room(self, ref: Ref) -> int | None:
        """Bytes this assignment may still take (None: no quota applies)."""
        rooms = []
        if self.quotas.assignment:
            rooms.append(self.quotas.assignment - self.usage(ref))
        if self.quotas.course:
            rooms.append(self.quotas.course - self.course_usage(ref.namespace))
        return max(0, min(rooms)) if rooms else None

    def make_room(self, ref: Ref, size: int, what: str) -> None:
        """QuotaFull, in words, when `size` more bytes (`what`) would pass a quota."""
        if self.quotas.assignment and self.usage(ref) + size > self.quotas.assignment:
            raise QuotaFull(
                f"{what} ({size_words(size)}) does not fit: the assignment {ref.name} keeps "
                f"{size_words(self.usage(ref))} of its {size_words(self.quotas.assignment)} quota in the "
                "assignment store (USERLAND_STORE_ASSIGNMENT_QUOTA_MB). An admin can raise it.")
        if self.quotas.course:
            used = self.course_usage(ref.namespace)
            if used + size > self.quotas.course:
                raise QuotaFull(
                    f"{what} ({size_words(size)}) does not fit: the course {ref.namespace} keeps "
                    f"{size_words(used)} of its {size_words(self.quotas.course)} quota in the assignment "
                    "store (USERLAND_STORE_COURSE_QUOTA_MB), deleted assignments included until they are "
                    "removed. Delete assignments no longer needed, or ask an admin to raise it.")

    def make_room_for_feedback(self, ref: Ref, tars: dict[str, Path]) -> None:
        """QuotaFull when these students' new feedback (replacing what they had) does not fit."""
        growth = sum(_size(tar) - _size(self.feedback_tar(ref, login)) for login, tar in tars.items())
        if growth > 0:
            self.make_room(ref, growth, "this feedback")

    def usage_json(self, ref: Ref) -> JSON:
        return {"bytes": self.usage(ref), "quotaBytes": self.quotas.assignment,
                "courseBytes": self.course_usage(ref.namespace), "courseQuotaBytes": self.quotas.course}

    # ----- members and retirement -----

    def put_members(self, ref: Ref, members: Iterable[tuple[str, str]]) -> None:
        """The assignment's current students' environments, (template, login), as the operator
        sees them: the only folders of feedback kept, the only copies zipped."""
        checked = sorted({(t, login) for t, login in members})
        for template, login in checked:
            _check(template=template, login=login)
        path = self.folder(ref) / "members.json"
        before = _size(path)
        _write_json(path, {"members": [list(m) for m in checked]}, self.tmp)
        self._grew(ref, _size(path) - before)

    def members(self, ref: Ref) -> set[tuple[str, str]]:
        data = _read_json(self.folder(ref) / "members.json") or {}
        return {(str(m[0]), str(m[1])) for m in data.get("members") or []
                if isinstance(m, list) and len(m) == 2}

    def retired(self, ref: Ref) -> bool:
        """Whether the operator said this assignment no longer exists (its folder keeps the
        marker after its files are removed, so a late job of it cannot write there again)."""
        return (self.folder(ref) / "retired").exists()

    def known(self, ref: Ref) -> bool:
        """Whether the operator has told of this assignment (and it is not retired)."""
        folder = self.folder(ref)
        return (folder / "members.json").exists() and not (folder / "retired").exists()

    def retire_others(self, namespace: str, live: dict[str, str], now: float | None = None) -> list[Ref]:
        """The operator lists the assignments of `namespace` that exist (name: uid): every other
        folder of it is marked retired (from `now`); one listed again is not. The ones newly
        retired."""
        if not naming.is_valid_dns_label(namespace):
            raise BadName(f"{namespace[:70]!r} is not a namespace")
        retired = []
        for ref in list(self.refs(namespace)):
            marker = self.folder(ref) / "retired"
            if live.get(ref.name) == ref.uid:
                with contextlib.suppress(OSError):
                    marker.unlink()
                continue
            if not marker.exists():
                marker.write_text(rfc3339(time.time() if now is None else now))
                retired.append(ref)
                self._changed(ref)
        return retired

    def remove_retired(self, older_than: float, now: float | None = None) -> list[Ref]:
        """Remove the files of every assignment retired more than `older_than` seconds ago (its
        folder stays, with only the marker: a tombstone of a few bytes). The ones removed."""
        current = time.time() if now is None else now
        removed = []
        for ref in list(self.refs()):
            folder = self.folder(ref)
            try:
                since = (folder / "retired").stat().st_mtime
            except OSError:
                continue
            rest = [p for p in folder.iterdir() if p.name != "retired"]
            if not rest or current - since < older_than:
                continue
            for path in rest:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            self._usage.pop(ref, None)
            self._changed(ref)
            removed.append(ref)
        return removed

    # ----- sources -----

    def source_tar(self, ref: Ref, key: str) -> Path:
        _check(key=key)
        return self.folder(ref) / "sources" / f"{key}.tar"

    def put_source(self, ref: Ref, key: str, tar: Path, index: JSON) -> None:
        final = self.source_tar(ref, key)
        before = _size(final) + _size(final.with_suffix(".json"))
        self.make_room(ref, _size(tar) - before, "the assignment's source")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tar, final)
        _write_json(final.with_suffix(".json"), index, self.tmp)
        self._grew(ref, _size(final) + _size(final.with_suffix(".json")) - before)

    # ----- copies: written once -----

    def copy_tar(self, ref: Ref, round_: str, template: str, login: str) -> Path:
        _check(round_=round_, template=template, login=login)
        return self.folder(ref) / "copies" / round_ / template / f"{login}.tar"

    def put_copy(self, ref: Ref, round_: str, template: str, login: str, tar: Path,
                 *, taken_at: str) -> tuple[JSON, bool]:
        """Keep `tar` as this student's copy of this round, unless one is kept already: (the receipt
        of the copy kept, whether it is this one). `tar` is checked first (BadArchive, TooLarge),
        then the quotas (QuotaFull)."""
        final = self.copy_tar(ref, round_, template, login)
        checked = check_copy(str(tar), self.copy_limits)
        if not final.exists():
            self.make_room(ref, _size(tar), f"{login}'s copy")
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tar, final)
        except FileExistsError:
            tar.unlink(missing_ok=True)
            existing = self.receipt(ref, round_, template, login)
            assert existing is not None
            return existing, False
        tar.unlink(missing_ok=True)
        receipt = {"round": round_, "template": template, "user": login, "takenAt": taken_at,
                   "storedAt": rfc3339(), "sha256": checked.sha256, "files": checked.files,
                   "bytes": checked.bytes}
        _write_json(final.with_suffix(".json"), receipt, self.tmp)
        self._grew(ref, _size(final) + _size(final.with_suffix(".json")))
        return receipt, True

    def receipt(self, ref: Ref, round_: str, template: str, login: str) -> JSON | None:
        tar = self.copy_tar(ref, round_, template, login)
        found = _read_json(tar.with_suffix(".json"))
        if found is not None or not tar.exists():
            return found
        # The store stopped between keeping a copy and writing its receipt: the copy tells it.
        checked = check_copy(str(tar), self.copy_limits)
        receipt = {"round": round_, "template": template, "user": login,
                   "takenAt": rfc3339(tar.stat().st_mtime), "storedAt": rfc3339(tar.stat().st_mtime),
                   "sha256": checked.sha256, "files": checked.files, "bytes": checked.bytes}
        _write_json(tar.with_suffix(".json"), receipt, self.tmp)
        self._usage.pop(ref, None)  # counted again when next asked
        return receipt

    def latest_copies(self, ref: Ref, login: str | None = None) -> list[CopyEntry]:
        """Each current student's newest copy (the latest round it has one for), by login and
        Template: an environment no longer in the assignment's members is left out."""
        _check(login=login or "")
        members = self.members(ref)
        base = self.folder(ref) / "copies"
        newest: dict[tuple[str, str], CopyEntry] = {}
        for round_dir in sorted(_dirs(base)):
            if not is_round_id(round_dir.name):
                continue
            for template_dir in _dirs(round_dir):
                for tar in template_dir.glob("*.tar"):
                    if (template_dir.name, tar.stem) not in members:
                        continue
                    if login is None or tar.stem == login:
                        newest[(tar.stem, template_dir.name)] = CopyEntry(template_dir.name, tar.stem,
                                                                          round_dir.name, tar)
        return [newest[k] for k in sorted(newest)]

    # ----- results and feedback -----

    def put_result(self, ref: Ref, kind: str, template: str, login: str, result: JSON,
                   *, round_: str = "") -> None:
        _check(template=template, login=login, round_=round_)
        if kind not in ("handout", "feedback", "collect", "grade", "check"):
            raise BadName(f"{kind!r} is not a kind of result")
        folder = self.folder(ref) / "results" / kind
        if kind == "collect":
            folder = folder / round_
        path = folder / template / f"{login}.json"
        before = _size(path)
        _write_json(path, result, self.tmp)
        self._grew(ref, _size(path) - before)

    def feedback_tar(self, ref: Ref, login: str) -> Path:
        _check(login=login)
        return self.folder(ref) / "feedback" / f"{login}.tar"

    def put_feedback(self, ref: Ref, login: str, tar: Path, meta: JSON) -> None:
        final = self.feedback_tar(ref, login)
        before = _size(final) + _size(final.with_suffix(".json"))
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tar, final)
        _write_json(final.with_suffix(".json"), meta, self.tmp)
        self._grew(ref, _size(final) + _size(final.with_suffix(".json")) - before)

    # ----- the state the operator and the web UI read -----

    def state(self, ref: Ref) -> tuple[str, JSON]:
        """(version, everything known of one assignment), rebuilt only after a change."""
        ref.check()
        number = self._versions.get(ref, 0)
        cached = self._states.get(ref)
        if cached is not None and cached[0] == number:
            return self.version(ref), cached[1]
        started = time.monotonic()
        state = self._read_state(ref)
        state["readSeconds"] = round(time.monotonic() - started, 4)
        self._states[ref] = (number, state)
        return self.version(ref), state

    def _read_state(self, ref: Ref) -> JSON:
        folder = self.folder(ref)
        results = folder / "results"
        state: JSON = {"handout": {}, "feedbackReturned": {}, "collectFailed": {}, "copies": {},
                       "feedback": {}, "sources": {}, "graded": {}, "checks": {}}
        for kind, into in (("handout", "handout"), ("feedback", "feedbackReturned"), ("grade", "graded"),
                           ("check", "checks")):
            for template, login, data in _entries(results / kind):
                state[into][env_key(template, login)] = data
        for round_dir in _dirs(results / "collect"):
            for template, login, data in _entries(round_dir):
                state["collectFailed"].setdefault(round_dir.name, {})[env_key(template, login)] = data
        for round_dir in _dirs(folder / "copies"):
            if not is_round_id(round_dir.name):
                continue
            for template_dir in _dirs(round_dir):
                for tar in template_dir.glob("*.tar"):
                    receipt = self.receipt(ref, round_dir.name, template_dir.name, tar.stem)
                    if receipt is not None:
                        copies = state["copies"].setdefault(round_dir.name, {})
                        copies[env_key(template_dir.name, tar.stem)] = receipt
        for meta_file in (folder / "feedback").glob("*.json"):
            if (meta := _read_json(meta_file)) is not None:
                state["feedback"][meta_file.stem] = meta
        for index_file in (folder / "sources").glob("*.json"):
            if (index := _read_json(index_file)) is not None:
                state["sources"][index_file.stem] = {k: index.get(k) for k in ("commit", "count", "bytes",
                                                                               "sha256", "skipped")}
        state["usage"] = self.usage_json(ref)
        return state


def _dirs(folder: Path) -> Iterator[Path]:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        yield from (p for p in folder.iterdir() if p.is_dir())


def _entries(folder: Path) -> Iterator[tuple[str, str, JSON]]:
    """(template, login, data) of `<folder>/<template>/<login>.json`."""
    for template_dir in _dirs(folder):
        for path in template_dir.glob("*.json"):
            if (data := _read_json(path)) is not None:
                yield template_dir.name, path.stem, data
