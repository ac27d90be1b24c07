"""A worker's file work on real folders (coursework/apply.py, safefs.py, trees.py): hand-outs
that never overwrite, copies that hold exactly the student's files, and the attacks a student
can mount from their own folder (links to another student's volume, pipes, a full volume).

Real: the file system (tmp folders; a small tmpfs for the full volume, mounted as root).
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.support.mounts import small_volume
from userland.coursework.apply import FULL, Sealer, hand_out, load_manifest, take_copy
from userland.coursework.safefs import Folder
from userland.coursework.trees import IndexEntry, Limits, check_copy, read_index
from userland.platform.model.assignments import MANIFEST_NAME
from userland.platform.model.coursework import manifest_key, tree_digest

LIMITS = Limits(files=1000, bytes=50 * 1024 * 1024)


class Source:
    """A hand-out tar made from {path: bytes} (executable when the path ends in .sh)."""

    def __init__(self, tmp: Path, files: dict[str, bytes], name: str = "source.tar") -> None:
        self.path = tmp / name
        with tarfile.open(self.path, "w", format=tarfile.PAX_FORMAT) as archive:
            for path, data in files.items():
                info = tarfile.TarInfo(path)
                info.size = len(data)
                info.mode = 0o755 if path.endswith(".sh") else 0o644
                archive.addfile(info, io.BytesIO(data))
        self.index: dict[str, IndexEntry] = read_index(str(self.path))
        self.archive = tarfile.open(self.path)  # noqa: SIM115 (open for the test's length)

    def open(self, path: str) -> BinaryIO:
        member = self.archive.extractfile(path)
        assert member is not None
        return member  # type: ignore[return-value]


def give(volume: Path, source: Source, path: str = "week1", commit: str = "c1") -> object:
    return hand_out(str(volume), path, source.index, source.open, assignment="course/week1", commit=commit,
                    sealer=sealer(path))


def sealer(path: str = "week1") -> Sealer:
    return Sealer(manifest_key("s" * 40, "course", "week1"), "jupyterlab/alice", path)


@pytest.fixture
def volumes(tmp_path: Path) -> tuple[Path, Path]:
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    alice.mkdir()
    bob.mkdir()
    (bob / "week1").mkdir()
    (bob / "week1" / "secret.py").write_text("bob's answer\n")
    return alice, bob


def test_a_hand_out_and_an_update_keep_the_students_work(tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, _ = volumes
    first = Source(tmp_path, {"hello.py": b"print('hi')\n", "run.sh": b"#!/bin/sh\n", "data/a.csv": b"1\n",
                              "old.txt": b"old\n"}, "one.tar")
    outcome = give(alice, first)
    assert outcome.state == "HandedOut" and outcome.written == 4  # type: ignore[attr-defined]
    assert (alice / "week1" / "hello.py").read_text() == "print('hi')\n"
    assert os.stat(alice / "week1" / "run.sh").st_mode & 0o777 == 0o755
    assert os.stat(alice / "week1" / "hello.py").st_mode & 0o777 == 0o644
    with Folder.open(str(alice), "week1") as folder:
        assert load_manifest(folder, sealer()) == {p: e.digest for p, e in first.index.items()}
    # alice works on hello.py and adds her own notes.
    (alice / "week1" / "hello.py").write_text("print('my answer')\n")
    (alice / "week1" / "notes.md").write_text("mine\n")
    second = Source(tmp_path, {"hello.py": b"print('hi, fixed')\n", "run.sh": b"#!/bin/sh\n",
                               "data/a.csv": b"2\n", "new.py": b"new\n"}, "two.tar")
    outcome = give(alice, second, commit="c2")
    assert outcome.state == "Conflicts"  # type: ignore[attr-defined]
    assert [(c.path, c.kind) for c in outcome.conflicts] == [("hello.py", "changed")]  # type: ignore[attr-defined]
    assert (alice / "week1" / "hello.py").read_text() == "print('my answer')\n"
    assert (alice / "week1" / "data" / "a.csv").read_text() == "2\n"
    assert (alice / "week1" / "new.py").read_text() == "new\n"
    assert not (alice / "week1" / "old.txt").exists()
    assert (alice / "week1" / "notes.md").read_text() == "mine\n"
    # The same hand-out again: the conflict is told again, nothing is written.
    again = give(alice, second, commit="c2")
    assert [(c.path, c.kind) for c in again.conflicts] == [("hello.py", "changed")]  # type: ignore[attr-defined]
    assert again.written == 0  # type: ignore[attr-defined]
    assert not [p for p in (alice / "week1").rglob("*") if p.name.startswith(".userland-tmp-")]


def test_a_folder_that_is_a_link_to_another_students_volume_is_never_written(
        tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, bob = volumes
    os.symlink(bob / "week1", alice / "week1")
    outcome = give(alice, Source(tmp_path, {"secret.py": b"overwritten\n"}))
    assert outcome.state == "Failed" and "a file or a link" in outcome.reason  # type: ignore[attr-defined]
    assert (bob / "week1" / "secret.py").read_text() == "bob's answer\n"
    assert not (bob / "week1" / MANIFEST_NAME).exists()


def test_a_link_inside_the_folder_is_never_followed(tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, bob = volumes
    (alice / "week1").mkdir()
    os.symlink(bob / "week1", alice / "week1" / "lib")
    os.symlink(bob / "week1" / "secret.py", alice / "week1" / "answer.py")
    outcome = give(alice, Source(tmp_path, {"lib/secret.py": b"x\n", "lib/new.py": b"x\n",
                                            "answer.py": b"x\n", "ok.py": b"ok\n"}))
    assert sorted((c.path, c.kind) for c in outcome.conflicts) == [  # type: ignore[attr-defined]
        ("answer.py", "blocked"), ("lib/new.py", "blocked"), ("lib/secret.py", "blocked")]
    assert sorted(p.name for p in (bob / "week1").iterdir()) == ["secret.py"]
    assert (bob / "week1" / "secret.py").read_text() == "bob's answer\n"
    assert (alice / "week1" / "ok.py").read_text() == "ok\n"


def test_a_manifest_that_is_a_link_is_neither_read_nor_written_through(
        tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, bob = volumes
    (bob / "week1" / MANIFEST_NAME).write_text('{"files": {}}')
    (alice / "week1").mkdir()
    os.symlink(bob / "week1" / MANIFEST_NAME, alice / "week1" / MANIFEST_NAME)
    give(alice, Source(tmp_path, {"a.py": b"a\n"}))
    assert (bob / "week1" / MANIFEST_NAME).read_text() == '{"files": {}}'
    assert not (alice / "week1" / MANIFEST_NAME).is_symlink()


def test_a_pipe_where_a_file_goes_does_not_hang_the_worker(tmp_path: Path,
                                                           volumes: tuple[Path, Path]) -> None:
    alice, _ = volumes
    (alice / "week1").mkdir()
    os.mkfifo(alice / "week1" / "hello.py")
    outcome = give(alice, Source(tmp_path, {"hello.py": b"x\n"}))
    assert [(c.path, c.kind) for c in outcome.conflicts] == [("hello.py", "blocked")]  # type: ignore[attr-defined]


def test_a_full_volume_is_said_and_the_manifest_holds_what_was_written(tmp_path: Path) -> None:
    with small_volume(tmp_path / "full") as volume:
        outcome = give(volume, Source(tmp_path, {f"f{i}.bin": bytes(40_000) for i in range(5)}))
        assert outcome.state == "Failed" and outcome.reason == FULL  # type: ignore[attr-defined]
        written = sorted(p.name for p in (volume / "week1").iterdir() if p.name.endswith(".bin"))
        assert written and len(written) < 5
        with Folder.open(str(volume), "week1") as folder:
            manifest = load_manifest(folder, sealer())
        assert manifest is None or sorted(manifest) == written  # never a file it did not write
        assert not [p for p in (volume / "week1").iterdir() if p.name.startswith(".userland-tmp-")]


def test_a_copy_holds_exactly_the_students_files(tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, bob = volumes
    work = alice / "week1"
    (work / "src").mkdir(parents=True)
    (work / "src" / "main.py").write_text("print(42)\n")
    (work / "answer.md").write_text("42\n")
    (work / MANIFEST_NAME).write_text("{}")
    (work / "feedback").mkdir()
    (work / "feedback" / "FEEDBACK.md").write_text("good\n")
    (work / "src" / "__pycache__").mkdir()
    (work / "src" / "__pycache__" / "main.pyc").write_bytes(b"\0")
    os.symlink(bob / "week1" / "secret.py", work / "stolen.py")
    os.symlink(bob / "week1", work / "bobs")
    os.mkfifo(work / "pipe")
    out = tmp_path / "copy.tar"
    with open(out, "wb") as stream:
        copy = take_copy(str(alice), "week1", stream, LIMITS)
    assert copy.result is not None, copy.reason
    assert sorted(copy.result.skipped) == ["bobs", "pipe", "stolen.py"]
    with tarfile.open(out) as archive:
        assert sorted(archive.getnames()) == ["answer.md", "src/main.py"]
    checked = check_copy(str(out), LIMITS)
    assert (checked.files, checked.bytes) == (2, len("print(42)\n") + len("42\n"))
    assert checked.sha256 == copy.result.sha256
    # The same content elsewhere, copied another way, has the same digest.
    import hashlib
    assert checked.sha256 == tree_digest([("answer.md", hashlib.sha256(b"42\n").hexdigest()),
                                          ("src/main.py", hashlib.sha256(b"print(42)\n").hexdigest())])


def test_a_copy_of_a_deleted_folder_is_empty_and_of_a_linked_one_refused(
        tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, bob = volumes
    with open(tmp_path / "empty.tar", "wb") as stream:
        copy = take_copy(str(alice), "week1", stream, LIMITS)
    assert copy.result is not None and copy.result.files == 0
    assert check_copy(str(tmp_path / "empty.tar"), LIMITS).files == 0
    os.symlink(bob / "week1", alice / "week1")
    with open(tmp_path / "linked.tar", "wb") as stream:
        copy = take_copy(str(alice), "week1", stream, LIMITS)
    assert copy.result is None and "is a link or a file" in copy.reason


def test_a_folder_past_the_limits_is_refused_in_words(tmp_path: Path, volumes: tuple[Path, Path]) -> None:
    alice, _ = volumes
    (alice / "week1").mkdir()
    for i in range(5):
        (alice / "week1" / f"{i}.txt").write_text("x" * 1000)
    with open(tmp_path / "a.tar", "wb") as stream:
        copy = take_copy(str(alice), "week1", stream, Limits(files=3, bytes=10**6))
    assert copy.result is None and "more than 3 files" in copy.reason
    with open(tmp_path / "b.tar", "wb") as stream:
        copy = take_copy(str(alice), "week1", stream, Limits(files=100, bytes=2500))
    assert copy.result is None and "larger than 2.5 KB" in copy.reason


def test_a_source_archive_naming_paths_outside_is_refused_member_by_member(tmp_path: Path) -> None:
    """What a hostile git server (or a crafted tree) could put in an archive: absolute names,
    `..`, a hard link, a device; none is handed out, each is said, the good file survives."""
    from userland.coursework.trees import normalize_source

    crafted = io.BytesIO()
    with tarfile.open(fileobj=crafted, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, kind in (("ok.py", tarfile.REGTYPE), ("/etc/cron.d/evil", tarfile.REGTYPE),
                           ("../../evil.py", tarfile.REGTYPE), ("a/../../evil.py", tarfile.REGTYPE),
                           ("hard", tarfile.LNKTYPE), ("dev", tarfile.CHRTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            data = b"x\n" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            if kind == tarfile.LNKTYPE:
                info.linkname = "ok.py"
            archive.addfile(info, io.BytesIO(data))
    crafted.seek(0)
    out = io.BytesIO()
    result = normalize_source(crafted, out, LIMITS)
    assert sorted(result.index) == ["ok.py"]
    said = dict(result.skipped)
    assert set(said) == {"/etc/cron.d/evil", "../../evil.py", "a/../../evil.py", "hard", "dev"}
    out.seek(0)
    with tarfile.open(fileobj=out) as archive:
        assert archive.getnames() == ["ok.py"]


def test_a_zips_entries_are_counted_from_its_directory(tmp_path: Path) -> None:
    """The count that guards feedback uploads (zipped.zip_entries) matches what zipfile reads,
    for a plain zip, a zip64 one (over 65,535 entries) and one with a script prepended."""
    from userland.coursework.zipped import zip_entries
    for count in (3, 70_000):
        path = tmp_path / f"{count}.zip"
        with zipfile.ZipFile(path, "w") as archive:
            for i in range(count):
                archive.writestr(f"alice/{i}", b"")
        assert zip_entries(path, 10**6) == count
        assert zip_entries(path, 2) == 3  # stops past the most asked
        prepended = tmp_path / f"{count}-sfx.zip"
        prepended.write_bytes(b"#!/bin/sh\nexit 0\n" * 50 + path.read_bytes())
        assert zip_entries(prepended, 10**6) == count
