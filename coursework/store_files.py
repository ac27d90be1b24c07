"""The assignment store on disk: one folder (a ReadWriteOnce volume in a cluster) holds it all.

    sources/<ns>/<assignment>/<key>.tar|.json          a commit made safe to hand out, and its index
    copies/<ns>/<assignment>/<round>/<template>/<login>.tar|.json   a student's copy and its receipt
    results/<ns>/<assignment>/handout/<template>/<login>.json      the last hand-out's outcome
    results/<ns>/<assignment>/feedback/<template>/<login>.json     the last feedback returned
    results/<ns>/<assignment>/collect/<round>/<template>/<login>.json  a copy that could not be taken
    feedback/<ns>/<assignment>/<login>.tar|.json       the files staff uploaded for a student
    tmp/                                               uploads in progress (same file system)

Copies are written once: the tar is linked into place (`os.link` fails when the name exists), so
of two uploads for one (round, student) the first stays and the second learns its receipt. No
path is ever built from anything unchecked: namespaces, assignments and Templates are DNS
labels, logins GitHub logins, rounds round ids (`_check`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from userland.coursework.trees import Limits, check_copy
from userland.platform import naming
from userland.platform.coursework import env_key, is_round_id
from userland.platform.objects import rfc3339

JSON = dict[str, Any]


class BadName(ValueError):
    """A name that cannot be part of a store path."""


def _check(*, namespace: str = "", assignment: str = "", template: str = "", login: str = "",
           round_: str = "", key: str = "") -> None:
    for label in (namespace, assignment, template):
        if label and not naming.is_valid_dns_label(label):
            raise BadName(f"{label[:70]!r} is not a name")
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


@dataclass(frozen=True)
class CopyEntry:
    template: str
    login: str
    round: str
    tar: Path


class StoreFiles:
    def __init__(self, root: Path, *, copy_limits: Limits) -> None:
        self.root = root
        self.tmp = root / "tmp"
        self.copy_limits = copy_limits
        for folder in ("sources", "copies", "results", "feedback", "tmp"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        # Left by a store that stopped mid-upload: never part of anything.
        for leftover in self.tmp.iterdir():
            with contextlib.suppress(OSError):
                leftover.unlink()
        # ETags of the state: a restarted store never answers 304 to a version it did not make.
        self._epoch = secrets.token_hex(4)
        self._versions: dict[tuple[str, str], int] = {}
        self._states: dict[tuple[str, str], tuple[int, JSON]] = {}

    def temp(self, suffix: str = ".tar") -> Path:
        return self.tmp / f"{secrets.token_hex(8)}{suffix}"

    def _changed(self, namespace: str, assignment: str) -> None:
        self._versions[(namespace, assignment)] = self._versions.get((namespace, assignment), 0) + 1

    def version(self, namespace: str, assignment: str) -> str:
        return f"{self._epoch}-{self._versions.get((namespace, assignment), 0)}"

    # ----- sources -----

    def source_tar(self, namespace: str, assignment: str, key: str) -> Path:
        _check(namespace=namespace, assignment=assignment, key=key)
        return self.root / "sources" / namespace / assignment / f"{key}.tar"

    def source_index(self, namespace: str, assignment: str, key: str) -> JSON | None:
        return _read_json(self.source_tar(namespace, assignment, key).with_suffix(".json"))

    def put_source(self, namespace: str, assignment: str, key: str, tar: Path, index: JSON) -> None:
        final = self.source_tar(namespace, assignment, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tar, final)
        _write_json(final.with_suffix(".json"), index, self.tmp)
        self._changed(namespace, assignment)

    # ----- copies: written once -----

    def copy_tar(self, namespace: str, assignment: str, round_: str, template: str, login: str) -> Path:
        _check(namespace=namespace, assignment=assignment, round_=round_, template=template, login=login)
        return self.root / "copies" / namespace / assignment / round_ / template / f"{login}.tar"

    def put_copy(self, namespace: str, assignment: str, round_: str, template: str, login: str, tar: Path,
                 *, taken_at: str) -> tuple[JSON, bool]:
        """Keep `tar` as this student's copy of this round, unless one is kept already: (the receipt
        of the copy kept, whether it is this one). `tar` is checked first (BadArchive, TooLarge)."""
        final = self.copy_tar(namespace, assignment, round_, template, login)
        checked = check_copy(str(tar), self.copy_limits)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tar, final)
        except FileExistsError:
            tar.unlink(missing_ok=True)
            existing = self.receipt(namespace, assignment, round_, template, login)
            assert existing is not None
            return existing, False
        tar.unlink(missing_ok=True)
        receipt = {"round": round_, "template": template, "user": login, "takenAt": taken_at,
                   "storedAt": rfc3339(), "sha256": checked.sha256, "files": checked.files,
                   "bytes": checked.bytes}
        _write_json(final.with_suffix(".json"), receipt, self.tmp)
        self._changed(namespace, assignment)
        return receipt, True

    def receipt(self, namespace: str, assignment: str, round_: str, template: str, login: str) -> JSON | None:
        tar = self.copy_tar(namespace, assignment, round_, template, login)
        found = _read_json(tar.with_suffix(".json"))
        if found is not None or not tar.exists():
            return found
        # The store stopped between keeping a copy and writing its receipt: the copy tells it.
        checked = check_copy(str(tar), self.copy_limits)
        receipt = {"round": round_, "template": template, "user": login,
                   "takenAt": rfc3339(tar.stat().st_mtime), "storedAt": rfc3339(tar.stat().st_mtime),
                   "sha256": checked.sha256, "files": checked.files, "bytes": checked.bytes}
        _write_json(tar.with_suffix(".json"), receipt, self.tmp)
        return receipt

    def latest_copies(self, namespace: str, assignment: str, login: str | None = None) -> list[CopyEntry]:
        """Each environment's newest copy (the latest round it has one for), by login and Template."""
        _check(namespace=namespace, assignment=assignment, login=login or "")
        base = self.root / "copies" / namespace / assignment
        newest: dict[tuple[str, str], CopyEntry] = {}
        for round_dir in sorted(_dirs(base)):
            if not is_round_id(round_dir.name):
                continue
            for template_dir in _dirs(round_dir):
                for tar in template_dir.glob("*.tar"):
                    if login is None or tar.stem == login:
                        newest[(tar.stem, template_dir.name)] = CopyEntry(template_dir.name, tar.stem,
                                                                          round_dir.name, tar)
        return [newest[k] for k in sorted(newest)]

    # ----- results and feedback -----

    def put_result(self, namespace: str, assignment: str, kind: str, template: str, login: str, result: JSON,
                   *, round_: str = "") -> None:
        _check(namespace=namespace, assignment=assignment, template=template, login=login, round_=round_)
        if kind not in ("handout", "feedback", "collect"):
            raise BadName(f"{kind!r} is not a kind of result")
        folder = self.root / "results" / namespace / assignment / kind
        if kind == "collect":
            folder = folder / round_
        _write_json(folder / template / f"{login}.json", result, self.tmp)
        self._changed(namespace, assignment)

    def feedback_tar(self, namespace: str, assignment: str, login: str) -> Path:
        _check(namespace=namespace, assignment=assignment, login=login)
        return self.root / "feedback" / namespace / assignment / f"{login}.tar"

    def put_feedback(self, namespace: str, assignment: str, login: str, tar: Path, meta: JSON) -> None:
        final = self.feedback_tar(namespace, assignment, login)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tar, final)
        _write_json(final.with_suffix(".json"), meta, self.tmp)
        self._changed(namespace, assignment)

    # ----- the state the operator and the web UI read -----

    def state(self, namespace: str, assignment: str) -> tuple[str, JSON]:
        """(version, everything known of one assignment), rebuilt only after a change."""
        _check(namespace=namespace, assignment=assignment)
        number = self._versions.get((namespace, assignment), 0)
        cached = self._states.get((namespace, assignment))
        if cached is not None and cached[0] == number:
            return self.version(namespace, assignment), cached[1]
        started = time.monotonic()
        state = self._read_state(namespace, assignment)
        state["readSeconds"] = round(time.monotonic() - started, 4)
        self._states[(namespace, assignment)] = (number, state)
        return self.version(namespace, assignment), state

    def _read_state(self, namespace: str, assignment: str) -> JSON:
        results = self.root / "results" / namespace / assignment
        state: JSON = {"handout": {}, "feedbackReturned": {}, "collectFailed": {}, "copies": {},
                       "feedback": {}, "sources": {}}
        for kind, into in (("handout", "handout"), ("feedback", "feedbackReturned")):
            for template, login, data in _entries(results / kind):
                state[into][env_key(template, login)] = data
        for round_dir in _dirs(results / "collect"):
            for template, login, data in _entries(round_dir):
                state["collectFailed"].setdefault(round_dir.name, {})[env_key(template, login)] = data
        for round_dir in _dirs(self.root / "copies" / namespace / assignment):
            if not is_round_id(round_dir.name):
                continue
            for template_dir in _dirs(round_dir):
                for tar in template_dir.glob("*.tar"):
                    receipt = self.receipt(namespace, assignment, round_dir.name, template_dir.name,
                                           tar.stem)
                    if receipt is not None:
                        copies = state["copies"].setdefault(round_dir.name, {})
                        copies[env_key(template_dir.name, tar.stem)] = receipt
        for meta_file in (self.root / "feedback" / namespace / assignment).glob("*.json"):
            if (meta := _read_json(meta_file)) is not None:
                state["feedback"][meta_file.stem] = meta
        for index_file in (self.root / "sources" / namespace / assignment).glob("*.json"):
            if (index := _read_json(index_file)) is not None:
                state["sources"][index_file.stem] = {k: index.get(k) for k in ("commit", "count", "bytes",
                                                                               "sha256", "skipped")}
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
