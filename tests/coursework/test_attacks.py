"""Attack review of assignments (SECURITY.md, "Assignments and the store"): what one student
(or one file of a source) can do to a worker batch, to their own hand-out record, to the store.

Real: the store over HTTP on loopback, the worker's own code (`coursework.worker.run`, what a
worker Pod runs) on real folders in tmp, real git behind git's http-backend where a source is
needed. Nothing is patched."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from tests.support.coursework import ASG, NS, ROUND, UID, GitServer, job, students, volumes, work
from userland.platform.clients.store_client import StoreClient, StoreError
from userland.platform.model.assignments import MANIFEST_NAME


def undeep(folder: Path) -> None:
    """Remove what `deep` made, bottom up (shutil.rmtree, and so pytest's own clean-up of tmp
    folders, recurses once per level and fails past about 1,000)."""
    subprocess.run(["rm", "-rf", "--", str(folder / "d")], check=True)


def deep(folder: Path, levels: int) -> None:
    """`d/d/d/.../f.txt`, `levels` deep, made with relative steps (no path is too long)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        done = os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(done, b"deep\n")
        os.close(done)
    finally:
        os.close(fd)


@pytest.mark.parametrize("case", ["newline", "not utf-8", "very deep"])
async def test_one_students_odd_file_fails_only_that_student(store: str, operator: StoreClient,
                                                              tmp_path: Path, case: str) -> None:
    """bob leaves a file whose name is odd (a newline, bytes that are not UTF-8) or a folder
    1,200 levels deep; the collection of the batch goes on: alice's copy is taken, bob's is
    either taken without the odd file (said as skipped) or refused with a reason in words."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(alice.mount) / "week1" / "answer.py").write_text("alice\n")
    bob_week = Path(bob.mount) / "week1"
    (bob_week / "answer.py").write_text("bob\n")
    if case == "newline":
        (bob_week / "odd\nname.py").write_text("x\n")
    elif case == "not utf-8":
        os.close(os.open(os.fsencode(str(bob_week)) + b"/caf\xe9.py", os.O_WRONLY | os.O_CREAT, 0o644))
    else:
        deep(bob_week, 1200)
    try:
        assert await work(store, job("collect", members, round=ROUND), tmp_path) == 0
    finally:
        if case == "very deep":
            undeep(bob_week)
    state = await operator.state(NS, ASG, UID)
    copies = state["copies"].get(ROUND, {})
    assert copies["jupyterlab/alice"]["files"] == 1
    bob_result = copies.get("jupyterlab/bob") or state["collectFailed"][ROUND]["jupyterlab/bob"]
    # bob's copy is taken without what cannot be carried (the worker logs it as left out).
    assert bob_result["files"] == 1, bob_result


async def test_odd_names_in_the_source_are_left_out_and_the_rest_handed_out(
        git_server: GitServer, store: str, operator: StoreClient, tmp_path: Path) -> None:
    """A repository with a file named with a newline, one whose name is not UTF-8 and one 80
    folders deep: the fetch says each as left out; every student gets
    the rest."""
    odd = {"a.py": "a\n", "odd\nname.py": "x\n", "caf\udce9.py": "x\n",
           "/".join(["d"] * 80) + "/deep.py": "x\n"}
    commit = git_server.repo("odd", odd)  # type: ignore[arg-type]
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("odd"), ref="main", sub_path="")
    assert fetched["count"] == 1, fetched
    assert len(fetched["skipped"]) == 3
    _alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    assert await work(store, job("handout", members, source=fetched["key"], commit=commit), tmp_path) == 0
    state = await operator.state(NS, ASG, UID)
    assert {k: v["state"] for k, v in state["handout"].items()} == {
        "jupyterlab/alice": "HandedOut", "jupyterlab/bob": "HandedOut"}
    assert sorted(p.name for p in (Path(bob.mount) / "week1").iterdir()) == [".userland-handout.json", "a.py"]


# What a job over two students' small files reads at most: far below one GiB of bob's 100 GiB
# sparse file, which reading (at any speed) would show.
SPARSE_READ_BOUND = 16 * 1024 * 1024


def file_io() -> tuple[int, int]:
    """Bytes this process (the store and the worker run in it) has read and written through files
    since it began (/proc/self/io's rchar, wchar: read(2) and write(2) of every thread, files and
    pipes; a socket's recv and send, what the uploads, the answers and the worker's downloads travel
    by, are not counted)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


def sparse(path: Path, size: int = 100 * 1024**3) -> None:
    """`truncate -s 100G`: a file of 100 GiB that takes no room (and reads as zeros)."""
    with open(path, "wb") as out:
        out.truncate(size)


async def test_a_sparse_file_where_the_source_has_one_is_not_read(
        git_server: GitServer, store: str, operator: StoreClient, tmp_path: Path) -> None:
    """bob puts a 100 GiB sparse file where the hand-out has hello.py: deciding whether he changed
    it must not read 100 GiB. It is his (a conflict, kept as he has it); alice gets hers."""
    commit = git_server.repo("sparse", {"hello.py": "print('hi')\n", "b.py": "b\n"})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("sparse"), ref="main", sub_path="")
    _alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    sparse(Path(bob.mount) / "week1" / "hello.py")
    the_job = job("handout", members, source=fetched["key"], commit=commit)
    before = file_io()
    assert await work(store, the_job, tmp_path) == 0
    read = file_io()[0] - before[0]
    # What was read (the worker and the store run in this process) is the hand-out, not bob's file.
    assert read < SPARSE_READ_BOUND, f"{read:,} bytes read to hand out two small files"
    state = (await operator.state(NS, ASG, UID))["handout"]
    assert state["jupyterlab/alice"]["state"] == "HandedOut"
    assert state["jupyterlab/bob"]["state"] == "Conflicts"
    assert state["jupyterlab/bob"]["conflicts"] == [["hello.py", "exists"]]
    assert (Path(bob.mount) / "week1" / "b.py").read_text() == "b\n"
    assert os.stat(Path(bob.mount) / "week1" / "hello.py").st_size == 100 * 1024**3


async def test_a_sparse_file_is_refused_in_words_and_the_others_collected(
        store: str, operator: StoreClient, tmp_path: Path) -> None:
    """bob's folder holds a 100 GiB sparse file: his copy is refused with the limit in words,
    nothing of it is read; alice's copy is taken."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(alice.mount) / "week1" / "answer.py").write_text("alice\n")
    (Path(bob.mount) / "week1" / "answer.py").write_text("bob\n")
    sparse(Path(bob.mount) / "week1" / "data.bin")
    the_job = job("collect", members, round=ROUND)
    before = file_io()
    assert await work(store, the_job, tmp_path) == 0
    read = file_io()[0] - before[0]
    assert read < SPARSE_READ_BOUND, f"{read:,} bytes read to collect two small files"
    state = await operator.state(NS, ASG, UID)
    assert state["copies"][ROUND]["jupyterlab/alice"]["files"] == 1
    assert "jupyterlab/bob" not in state["copies"][ROUND]
    failed = state["collectFailed"][ROUND]["jupyterlab/bob"]
    assert failed["state"] == "Failed" and "larger than" in failed["reason"], failed


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_forged_hand_out_record_is_not_trusted(git_server: GitServer, store: str,
                                                       operator: StoreClient, tmp_path: Path) -> None:
    """The record of what was handed out (`.userland-handout.json`) lives in the student's
    folder. alice rewrites it to claim that her own notes.md and her edited hello.py are what she
    was given: the next hand-out (the source changed hello.py and has no notes.md) would then
    overwrite her hello.py and delete her notes.md. A record the platform did not seal is not
    trusted: both stay hers (conflicts); bob, who forged nothing, gets the update."""
    repo = {"hello.py": "print('hi')\n", "old.txt": "old\n"}
    first = git_server.repo("forged", repo)
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("forged"), ref="main", sub_path="")
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    assert await work(store, job("handout", members, source=fetched["key"], commit=first), tmp_path) == 0
    week = Path(alice.mount) / "week1"
    (week / "hello.py").write_bytes(b"print('my answer')\n")
    (week / "notes.md").write_bytes(b"my notes\n")
    record = json.loads((week / MANIFEST_NAME).read_text())
    record["files"] = {"hello.py": sha256(b"print('my answer')\n"), "notes.md": sha256(b"my notes\n"),
                       "old.txt": sha256(b"old\n")}
    (week / MANIFEST_NAME).write_text(json.dumps(record))
    second = git_server.repo("forged", {"hello.py": "print('hi, fixed')\n", "old.txt": "old\n"})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("forged"), ref="main", sub_path="")
    assert await work(store, job("handout", members, source=fetched["key"], commit=second), tmp_path) == 0
    assert (week / "notes.md").read_bytes() == b"my notes\n"
    assert (week / "hello.py").read_bytes() == b"print('my answer')\n"
    assert (Path(bob.mount) / "week1" / "hello.py").read_text() == "print('hi, fixed')\n"
    state = (await operator.state(NS, ASG, UID))["handout"]
    assert ["hello.py", "exists"] in state["jupyterlab/alice"]["conflicts"]
    assert state["jupyterlab/bob"]["state"] == "HandedOut"
    # bob copies alice's record (sealed for her) into his folder: not trusted for him either.
    (Path(bob.mount) / "week1" / "hello.py").write_text("bob's own\n")
    (Path(bob.mount) / "week1" / MANIFEST_NAME).write_bytes((week / MANIFEST_NAME).read_bytes())
    third = git_server.repo("forged", {"hello.py": "print('hi, fixed again')\n"})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("forged"), ref="main", sub_path="")
    assert await work(store, job("handout", [bob], source=fetched["key"], commit=third), tmp_path) == 0
    assert (Path(bob.mount) / "week1" / "hello.py").read_text() == "bob's own\n"


def zeros_zip(path: Path, entries: dict[str, int]) -> bytes:
    """A zip of files of zeros (deflated: 1,000 to 1 or better), written without ever holding
    one: its bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, size in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=size > 2**31) as target:
                chunk = bytes(1024 * 1024)
                for left in range(size, 0, -len(chunk)):
                    target.write(chunk[:left])
    return path.read_bytes()


def many_entries_zip(count: int, *, zip64: bool = False) -> bytes:
    """A zip whose central directory lists `count` entries, all the same 1-byte file: 47 bytes
    an entry, so a million are a 47 MB upload that zipfile turns into a million objects
    (`zip64`: with the zip64 end record and locator, as zips of over 65,535 entries have)."""
    name = b"alice/a"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(b"x"), 1, 1, len(name), 0)
    local += name + b"x"
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, zlib.crc32(b"x"), 1, 1,
                          len(name), 0, 0, 0, 0, 0, 0) + name
    directory = central * count
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                      len(directory), len(local), 0)
    if not zip64:
        return local + directory + end
    record_at = len(local) + len(directory)
    record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(directory),
                         len(local))
    locator = struct.pack("<IIQI", 0x07064B50, 0, record_at, 1)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return local + directory + record + locator + end


async def test_a_feedback_zip_bomb_is_refused_in_words_and_loses_nothing(
        store: str, web: StoreClient, operator: StoreClient, tmp_path: Path) -> None:
    """Staff upload a zip of 300 MB of zeros in one file (a few hundred KB deflated), then one
    whose directory lists a million entries (plain, and zip64): each is refused in words,
    without the store holding it in memory, and the feedback uploaded before is still there."""
    await students(operator, "alice", "bob")
    await web.put_feedback(NS, ASG, UID, zeros_zip(tmp_path / "good.zip", {"alice/notes.md": 5}))
    before = (await operator.state(NS, ASG, UID))["feedback"]
    assert set(before) == {"alice"}
    bomb = zeros_zip(tmp_path / "bomb.zip", {"bob/zeros.bin": 300 * 1024 * 1024})
    assert len(bomb) < 2 * 1024 * 1024
    many = many_entries_zip(1_000_000)
    many64 = many_entries_zip(1_000_000, zip64=True)
    for upload, words in ((bomb, "larger than"), (many, "entries"), (many64, "entries")):
        tracemalloc.start()
        try:
            io_before = file_io()
            with pytest.raises(StoreError) as refused:
                await web.put_feedback(NS, ASG, UID, upload)
            read, written = (after - first for after, first in zip(file_io(), io_before, strict=True))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert refused.value.status == 400 and words in refused.value.message, refused.value.message
        assert peak < 64 * 1024 * 1024 + len(upload), f"the store held {peak:,} bytes for {words}"
        # The work is bounded, in bytes: the store wrote the upload to its disk once and nothing
        # more (the bomb was not inflated, to the spool or anywhere), and read no more than the
        # zip's end to refuse it (not the million entries' directory, not the bomb's deflated data).
        assert written <= len(upload) + 1024 * 1024, f"the store wrote {written:,} bytes for {words}"
        assert read <= 1024 * 1024, f"the store read {read:,} bytes of files for {words}"
    assert (await operator.state(NS, ASG, UID))["feedback"] == before


async def test_a_large_feedback_file_within_the_limits_is_streamed(
        store: str, web: StoreClient, operator: StoreClient, tmp_path: Path) -> None:
    """A 100 MB file of feedback (within the limits) is taken, but never held in memory whole."""
    upload = zeros_zip(tmp_path / "big.zip", {"alice/recording.bin": 100 * 1024 * 1024})
    await students(operator, "alice")
    tracemalloc.start()
    try:
        answer = await web.put_feedback(NS, ASG, UID, upload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer["students"] == {"alice": {"files": 1, "bytes": 100 * 1024 * 1024}}
    assert peak < 48 * 1024 * 1024, f"the store held {peak:,} bytes"


@pytest.mark.parametrize("link", ["relative", "absolute", "parent"])
async def test_a_feedback_folder_that_is_a_link_never_writes_elsewhere(
        store: str, web: StoreClient, operator: StoreClient, tmp_path: Path, link: str) -> None:
    """alice replaces her `feedback/` with a link to bob's folder (relative, absolute, or `..`
    up to the volumes), hoping her feedback lands in his folder and overwrites his work: her
    return fails in words, bob's folder is untouched, bob gets his own."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    bob_week = Path(bob.mount) / "week1"
    (bob_week / "notes.md").write_text("bob's own notes\n")
    target = {"relative": "../../bob/week1", "absolute": str(bob_week), "parent": "../.."}[link]
    os.symlink(target, Path(alice.mount) / "week1" / "feedback")
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        archive.writestr("alice/notes.md", "overwritten?\n")
        archive.writestr("bob/review.md", "for bob\n")
    await students(operator, "alice", "bob")
    await web.put_feedback(NS, ASG, UID, upload.getvalue())
    feedback = {"alice": ("", "", "d1"), "bob": ("", "", "d2")}
    assert await work(store, job("feedback", members, feedback=feedback), tmp_path) == 0
    assert (bob_week / "notes.md").read_text() == "bob's own notes\n"
    assert sorted(p.name for p in bob_week.iterdir()) == ["feedback", "notes.md"]
    assert (bob_week / "feedback" / "review.md").read_text() == "for bob\n"
    assert not (tmp_path / "volumes" / "notes.md").exists()
    alice_back = (await operator.state(NS, ASG, UID))["feedbackReturned"]["jupyterlab/alice"]
    assert alice_back["state"] == "Failed" and "a link" in alice_back["reason"]


async def test_a_students_file_named_like_the_workers_temporary_files_is_collected(
        store: str, operator: StoreClient, tmp_path: Path) -> None:
    """The worker's temporary files are left out of copies by their name: a student's own file
    that merely starts the same way (`.userland-tmp-notes.md`) is their work, and is collected."""
    (alice,) = volumes(tmp_path, "alice", folder="week1")
    (Path(alice.mount) / "week1" / ".userland-tmp-notes.md").write_text("mine\n")
    (Path(alice.mount) / "week1" / "answer.py").write_text("42\n")
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    assert (await operator.state(NS, ASG, UID))["copies"][ROUND]["jupyterlab/alice"]["files"] == 2


LIMIT = 2_000


async def test_a_folder_of_ten_times_the_file_limit_is_refused_without_listing_it_whole(
        store: str, operator: StoreClient, tmp_path: Path) -> None:
    """bob fills one folder with ten times the file limit in empty files (his storage's inodes
    are his to use; at the default limit of 20,000 that is 200,000). A worker Pod has 512 MiB for
    20 students: listing his folder whole before checking the limit would take far more than his
    share (51 MB at 200,000), and a few like him would have the Pod killed, the batch with it.
    His copy is refused in words, reading no more than the limit. The limit is 2,000 here so the
    test makes 20,000 files, not 200,000 (which took CI 30-160 s): the ratio is what matters."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(alice.mount) / "week1" / "answer.py").write_text("alice\n")
    many = Path(bob.mount) / "week1" / "many"
    many.mkdir()
    fd = os.open(many, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(10 * LIMIT):
            os.close(os.open(f"f{i:06d}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    tracemalloc.start()
    try:
        assert await work(store, job("collect", members, round=ROUND, max_files=LIMIT), tmp_path) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    state = await operator.state(NS, ASG, UID)
    assert state["copies"][ROUND]["jupyterlab/alice"]["files"] == 1
    failed = state["collectFailed"][ROUND]["jupyterlab/bob"]
    assert "more than 2,000 files" in failed["reason"], failed
    # With the limit honoured while listing: 1.2 MB here; listing all 20,000 names first held
    # over 5 MB (51 MB for 200,000).
    assert peak < 3 * 1024 * 1024, f"the worker held {peak:,} bytes"


async def test_the_collected_zip_cannot_climb_out_on_a_teachers_windows(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    """A backslash is an ordinary character in a Linux file name and a folder separator for
    Windows' zip tools: alice names a file `..\\..\\Startup\\evil.bat`, hoping the teacher's
    extraction of the course's zip writes it outside the folder they extract into. Every name in
    the zip stays below its login, with no backslash; the file itself is still in her copy."""
    (alice,) = volumes(tmp_path, "alice", folder="week1")
    (Path(alice.mount) / "week1" / "..\\..\\Startup\\evil.bat").write_text("echo owned\n")
    (Path(alice.mount) / "week1" / "C:\\evil.bat").write_text("echo owned\n")
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    assert (await operator.state(NS, ASG, UID))["copies"][ROUND]["jupyterlab/alice"]["files"] == 2
    await students(operator, "alice")
    response = await web.open_zip(NS, ASG, UID)
    try:
        data = await response.read()
    finally:
        response.release()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
    assert len(names) == 2
    for name in names:
        assert "\\" not in name and ":" not in name and name.startswith("alice/"), names
        assert ".." not in name.split("/"), names
