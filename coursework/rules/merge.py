"""The never-overwrite rules of a hand-out (pure; docs/assignments.md states them, and each rule
has its golden case in tests/unit/golden/handout_rules.json).

Three views of one folder go in:
- `source`: the files of the commit being handed out (path -> digest, executable bit);
- `manifest`: what this student last received, path -> digest (`.userland-handout.json` in
  their folder; None when there is none: a first hand-out, or they deleted it);
- `current`: what their folder holds now at every path that matters (the source's and the
  manifest's paths and every folder above them): a file with its digest, a folder, a link, or
  something else. Absent paths are absent from the mapping.

`plan_merge` returns what to write, what to remove, the conflicts (what was left as the student
has it, and why) and the manifest to keep. A file is only ever written when the student has
nothing there, or has exactly what they were last given; it is only removed when the source
dropped it and the student never changed it. Everything else is the student's and is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from userland.platform.model.assignments import CONFLICT_WORDS

Kind = Literal["file", "dir", "link", "other"]
ConflictKind = Literal["changed", "deleted", "exists", "blocked", "kept"]



@dataclass(frozen=True)
class SourceFile:
    digest: str
    executable: bool = False


@dataclass(frozen=True)
class Present:
    kind: Kind
    digest: str = ""  # files only


@dataclass(frozen=True)
class Conflict:
    path: str
    kind: ConflictKind

    @property
    def words(self) -> str:
        return CONFLICT_WORDS[self.kind]


@dataclass(frozen=True)
class Plan:
    write: tuple[str, ...]
    delete: tuple[str, ...]
    conflicts: tuple[Conflict, ...]
    manifest: dict[str, str]


def ancestors(path: str) -> list[str]:
    """`a/b/c` -> [`a`, `a/b`]: the folders a file needs."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def relevant_paths(source: Mapping[str, SourceFile], manifest: Mapping[str, str] | None) -> list[str]:
    """Every path `current` must describe: the files and the folders above them."""
    paths = set(source) | set(manifest or {})
    for path in list(paths):
        paths.update(ancestors(path))
    return sorted(paths)


def plan_merge(source: Mapping[str, SourceFile], manifest: Mapping[str, str] | None,
               current: Mapping[str, Present]) -> Plan:
    given = dict(manifest or {})
    write: list[str] = []
    delete: list[str] = []
    conflicts: list[Conflict] = []
    kept: dict[str, str] = {}
    for path in sorted(source):
        new = source[path].digest
        last = given.get(path)
        have = current.get(path)
        if any((a := current.get(folder)) is not None and a.kind != "dir" for folder in ancestors(path)):
            conflicts.append(Conflict(path, "blocked"))
            if last is not None:
                kept[path] = last
        elif have is None:
            if last is None:
                write.append(path)  # new in the source, nothing of the student's there
                kept[path] = new
            elif last == new:
                kept[path] = last  # the student deleted it and the source did not change it: gone
            else:
                conflicts.append(Conflict(path, "deleted"))
                kept[path] = last
        elif have.kind != "file":
            conflicts.append(Conflict(path, "blocked"))
            if last is not None:
                kept[path] = last
        elif have.digest == new:
            kept[path] = new  # already what the source has (given before, or the same edit)
        elif last is None:
            conflicts.append(Conflict(path, "exists"))
        elif have.digest == last:
            write.append(path)  # unchanged since it was handed out: the update goes in
            kept[path] = new
        elif last == new:
            kept[path] = last  # the student's own work on a file the source did not change
        else:
            conflicts.append(Conflict(path, "changed"))
            kept[path] = last  # so the conflict is told again until the student resolves it
    for path in sorted(set(given) - set(source)):
        have = current.get(path)
        if have is None:
            continue
        if have.kind == "file" and have.digest == given[path]:
            delete.append(path)  # the source dropped it and the student never touched it
        else:
            conflicts.append(Conflict(path, "kept"))
    return Plan(write=tuple(write), delete=tuple(delete), conflicts=tuple(conflicts), manifest=kept)
