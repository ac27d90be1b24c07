"""Attack review of issue 25's fixes (SECURITY.md, "The names, records and walks attacked again"): what a
student or an assistant tries against the sealed hand-out record, the bounded worker and the
escaped names of the class zip, once those fixes were in.

Real: the store over HTTP on loopback, the worker's own code (`coursework.worker.run`) on real
folders in tmp, the class zip extracted with Python's zipfile onto the real file system, as a
teacher's unzip would. Nothing is patched."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import tarfile
import threading
import time
import tracemalloc
import unicodedata
import zipfile
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.coursework import ASG, NS, ROUND, UID, job, students, volumes, work
from userland.coursework.apply import Sealer, load_manifest, manifest_bytes, take_copy
from userland.coursework.rules.zipnames import EntryNames
from userland.coursework.safefs import Folder
from userland.coursework.trees import Limits, TooLarge, check_copy
from userland.coursework.zipped import Ambiguous, split_feedback
from userland.platform.clients.store_client import StoreClient, StoreError
from userland.platform.model.assignments import MANIFEST_NAME
from userland.platform.model.coursework import manifest_key

SECRET = "s" * 40


async def class_zip(web: StoreClient, operator: StoreClient) -> bytes:
    await students(operator, "alice")  # the zip holds the assignment's current students' copies
    response = await web.open_zip(NS, ASG, UID)
    try:
        return await response.read()
    finally:
        response.release()


def folded(path: str) -> str:
    """A path as a case-insensitive, normalization-insensitive file system (a teacher's macOS or
    Windows) tells names apart: canonical caseless matching, and Windows' dropping of a trailing
    dot or space in each part."""
    parts = [unicodedata.normalize("NFD", unicodedata.normalize("NFD", part).casefold()).rstrip(". ")
             for part in path.split("/")]
    return "/".join(parts)


async def test_a_name_that_escaping_makes_too_long_still_extracts(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    """alice names a file with 255 `%` (255 bytes: a name her file system allows), and a folder
    of 85 right-to-left overrides (255 bytes). Escaped, they became 765 and 2,295 bytes: no file
    system takes such a name, so extracting the class zip stopped at her entry ("File name too
    long") and the teacher had nobody's work after hers. Every part of every entry fits in 255
    bytes, each file stays an entry of its own, and the zip extracts whole."""
    (alice,) = volumes(tmp_path, "alice", folder="week1")
    week = Path(alice.mount) / "week1"
    names = ["%" * 255, "%" * 254 + "x", "\u202e" * 85 + "/inside.txt", "plain.txt"]
    for name in names:
        (week / name).parent.mkdir(parents=True, exist_ok=True)
        (week / name).write_text(name)
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    data = await class_zip(web, operator)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = [info.filename for info in archive.infolist()]
        assert len(entries) == len(set(entries)) == len(names), entries
        for entry in entries:
            too_long = [part for part in entry.split("/") if len(part.encode()) > 255]
            assert not too_long, (entry[:80], [len(p.encode()) for p in too_long])
        target = tmp_path / "extracted"
        archive.extractall(target)
    found = sorted(p.read_text() for p in target.rglob("*") if p.is_file())
    assert found == sorted(names)


async def test_names_one_on_a_case_insensitive_disk_stay_apart_in_the_class_zip(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    """alice has `Main.java` and `main.java`, `é.txt` composed and decomposed (NFC and NFD: two
    files on Linux, one on macOS), `notes.` and `notes`, a folder `Src/` and one `src/` with a
    file of the same name in each. Her Linux folder holds them all; the teacher's macOS or
    Windows unzip put each pair into one file, the later silently replacing the earlier (or
    asking which to keep). In the class zip no two entries are the same to such a file system,
    and each entry holds the file it names."""
    (alice,) = volumes(tmp_path, "alice", folder="week1")
    week = Path(alice.mount) / "week1"
    names = ["Main.java", "main.java", unicodedata.normalize("NFC", "\u00e9.txt"),
             unicodedata.normalize("NFD", "\u00e9.txt"), "notes.", "notes", "Src/a.py", "src/a.py",
             "CON.txt", "what?.txt", "what_.txt"]
    for name in names:
        (week / name).parent.mkdir(parents=True, exist_ok=True)
        (week / name).write_text(name)
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    data = await class_zip(web, operator)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = {info.filename: archive.read(info).decode() for info in archive.infolist()}
    assert sorted(entries.values()) == sorted(names)
    by_fold: dict[str, list[str]] = {}
    for entry in entries:
        by_fold.setdefault(folded(entry), []).append(entry)
    assert all(len(same) == 1 for same in by_fold.values()), [s for s in by_fold.values() if len(s) > 1]
    windows = [e for e in entries if any(c in e for c in '<>"|?*')
               or any(p.split(".")[0].upper() in ("CON", "PRN", "AUX", "NUL") for p in e.split("/"))]
    assert not windows, windows
    for entry, content in entries.items():  # each entry is the file it says, up to the escapes
        assert entry.startswith("alice/")
        if "%~" not in entry:
            assert unquote(entry.removeprefix("alice/")) == content, entry


def test_a_record_sealed_for_another_student_folder_or_assignment_is_not_believed(tmp_path: Path) -> None:
    """bob copies alice's genuine record into his folder (hers lists files he may want the
    update to overwrite), a record of his own from another assignment, and his main folder's
    record into his feedback folder. The seal names the assignment (its key), the environment
    and the folder: none of them is believed where it was moved; each is where it was written."""
    key, other_key = manifest_key(SECRET, NS, ASG), manifest_key(SECRET, NS, "week2")
    files = {"hello.py": "a" * 64}
    written = {
        "alice": Sealer(key, "jupyterlab/alice", "week1"),
        "week2": Sealer(other_key, "jupyterlab/bob", "week1"),
        "main": Sealer(key, "jupyterlab/bob", "week1"),
    }
    bob_main = Sealer(key, "jupyterlab/bob", "week1")
    bob_feedback = Sealer(key, "jupyterlab/bob", "week1/feedback")
    week = tmp_path / "bob" / "week1"
    (week / "feedback").mkdir(parents=True)
    with Folder.open(str(tmp_path / "bob"), "week1") as main, \
            Folder.open(str(tmp_path / "bob"), "week1/feedback") as feedback:
        for origin, into, folder, sealer in (("alice", week, main, bob_main),
                                             ("week2", week, main, bob_main),
                                             ("main", week / "feedback", feedback, bob_feedback)):
            record = manifest_bytes(files, written[origin], assignment=f"{NS}/{ASG}", commit="c1")
            (into / MANIFEST_NAME).write_bytes(record)
            assert load_manifest(folder, sealer) is None, origin
            with Folder.open(str(tmp_path / "bob"), str(into.relative_to(tmp_path / "bob"))) as same:
                assert load_manifest(same, written[origin]) == files, origin  # believed where it belongs


def test_a_record_that_is_a_pipe_or_a_link_never_blocks_nor_is_followed(tmp_path: Path) -> None:
    """bob makes his record a named pipe (opening one to read waits for a writer: the worker's
    thread, and with it the batch, would wait forever), then a link to alice's genuine record.
    Neither is read: the pipe is opened without waiting and seen not to be a file, the link is
    never followed."""
    sealer = Sealer(manifest_key(SECRET, NS, ASG), "jupyterlab/bob", "week1")
    (tmp_path / "bob" / "week1").mkdir(parents=True)
    record = tmp_path / "bob" / "week1" / MANIFEST_NAME
    os.mkfifo(record)
    answers: list[object] = []
    with Folder.open(str(tmp_path / "bob"), "week1") as folder:
        reader = threading.Thread(target=lambda: answers.append(load_manifest(folder, sealer)), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while reader.is_alive() and time.monotonic() < deadline:
            reader.join(0.1)
        if reader.is_alive():  # blocked on the pipe: let it go, then fail
            with open(os.open(record, os.O_WRONLY | os.O_NONBLOCK), "wb"):
                pass
            reader.join()
        assert answers == [None]
        assert not reader.is_alive()
        record.unlink()
        (tmp_path / "alice").mkdir()
        genuine = tmp_path / "alice" / MANIFEST_NAME
        genuine.write_bytes(manifest_bytes({"a.py": "b" * 64}, sealer, assignment="x", commit="c"))
        record.symlink_to(genuine)
        assert load_manifest(folder, sealer) is None


def test_a_feedback_zip_that_climbs_into_another_students_folder_gives_him_nothing(tmp_path: Path) -> None:
    """An assistant's zip with `alice/../bob/grade.md` and `alice\\..\\bob\\x.md`: nothing of it
    reaches bob (nor alice); the entries are said as left out."""
    upload = tmp_path / "upload.zip"
    with zipfile.ZipFile(upload, "w") as archive:
        archive.writestr("alice/../bob/grade.md", "A+\n")
        archive.writestr("alice\\..\\bob\\x.md", "A+\n")
        archive.writestr("alice/ok.md", "fine\n")
    made = iter(range(10))
    split = split_feedback(upload, lambda: tmp_path / f"t{next(made)}.tar", Limits(100, 10**6))
    assert sorted(split.students) == ["alice"]
    assert split.students["alice"].files == 1
    assert len(split.ignored) == 2, split.ignored


def test_a_record_with_a_seal_line_and_20_mib_after_it_costs_the_worker_a_chunk(tmp_path: Path) -> None:
    """bob's record starts like the platform's (its seal's line, 64 hex digits) and goes on for
    20 MiB without a newline. The seal is checked on the bytes as they are read, up to the
    record's limit (16 MiB), then given up: not believed, and the worker held about a chunk and
    the spool's 1 MiB (the rest of the spool is on disk), never the record."""
    sealer = Sealer(manifest_key(SECRET, NS, ASG), "jupyterlab/bob", "week1")
    (tmp_path / "bob" / "week1").mkdir(parents=True)
    record = tmp_path / "bob" / "week1" / MANIFEST_NAME
    with open(record, "wb") as out:
        out.write(b'{\n "seal": "' + b"0" * 64 + b'",\n')
        for _ in range(20):
            out.write(b"{" * (1024 * 1024))
    with Folder.open(str(tmp_path / "bob"), "week1") as folder:
        tracemalloc.start()
        try:
            assert load_manifest(folder, sealer) is None
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"the worker held {peak / 1024 / 1024:.1f} MiB"


@pytest.mark.parametrize("entries", [("alice/notes", "alice/notes/week1.md"),
                                     ("alice/notes/week1.md", "alice/notes")])
def test_a_feedback_zip_with_a_file_where_its_folder_is_is_refused_naming_both(
        tmp_path: Path, entries: tuple[str, str]) -> None:
    """An assistant's zip gives alice `notes` (a file) and `notes/week1.md` (a file in a folder
    of that name): her folder cannot hold both, so one of them never reached her and she was
    told of a conflict she did not make. Such a zip is refused like any other ambiguous one,
    naming both entries."""
    upload = tmp_path / "upload.zip"
    with zipfile.ZipFile(upload, "w") as archive:
        for entry in entries:
            archive.writestr(entry, f"written as {entry}\n")
    made = iter(range(10))
    with pytest.raises(Ambiguous) as refused:
        split_feedback(upload, lambda: tmp_path / f"t{next(made)}.tar", Limits(100, 10**6))
    assert "alice/notes" in str(refused.value) and "alice/notes/week1.md" in str(refused.value)


# Run in a process of its own whose files may grow to 4 MiB at most (RLIMIT_FSIZE), as a worker
# Pod's scratch space is bounded: what load_manifest writes to disk for a record it is checking.
CHECK_IN_A_SMALL_SCRATCH = """
import resource, signal, sys
from userland.coursework.apply import Sealer, load_manifest
from userland.coursework.safefs import Folder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4 * 1024 * 1024, 4 * 1024 * 1024))
volume, key = sys.argv[1], sys.argv[2]
with Folder.open(volume, "week1") as folder:
    print(load_manifest(folder, Sealer(key, "jupyterlab/bob", "week1")))
"""


def test_a_forged_record_writes_nothing_to_the_workers_scratch_space(tmp_path: Path) -> None:
    """bob, and 15 classmates in his batch, each write a 16 MiB record that starts with a seal's
    line. Checking one spooled it to the worker's scratch space as it was read (16 MiB each, 16
    at once: 256 MiB, the whole margin of a hand-out Pod's scratch, whose excess has the Pod
    evicted). A forged record is now checked without keeping its bytes anywhere: in a process
    whose files may not pass 4 MiB, it is read, not believed, and nothing fails."""
    key = manifest_key(SECRET, NS, ASG)
    (tmp_path / "bob" / "week1").mkdir(parents=True)
    with open(tmp_path / "bob" / "week1" / MANIFEST_NAME, "wb") as out:
        out.write(b'{\n "seal": "' + b"0" * 64 + b'",\n')
        for _ in range(16):
            out.write(b" " * (1024 * 1024 - 8))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-c", CHECK_IN_A_SMALL_SCRATCH, str(tmp_path / "bob"), key],
                          env={**os.environ, "TMPDIR": str(scratch)}, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None"


def deep_folder_of_long_names(week: Path, files: int) -> None:
    """63 folders one in another, each named with 255 bytes, and `files` empty files of 255-byte
    names in the deepest: every file's path is 16 KB (made with the *at calls, as a student's
    shell does folder by folder: no path of 16 KB is ever given to the kernel whole)."""
    fd = os.open(week, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(63):
            name = f"{level:02d}" + "d" * 253
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        for i in range(files):
            os.close(os.open(f"{i:05d}" + "f" * 250, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_copy_of_16_kb_paths_is_refused_before_its_names_fill_the_worker(tmp_path: Path) -> None:
    """bob nests 63 folders of 255-byte names and fills the deepest with empty files of 255-byte
    names, within the file limit. A copy keeps every file's path until its digest is made: 16 KB
    a file, 320 MB at the default 20,000 files, and two such students in a batch had the 512 MiB
    worker Pod killed (the store, which checks every copy, held as much again). The paths of a
    copy are bounded in all (512 bytes a file on average): past that the copy is refused in words
    and the worker held little. Scaled down: 1,000 files (16 MB of paths) at a limit of 1,000."""
    week = tmp_path / "bob" / "week1"
    week.mkdir(parents=True)
    deep_folder_of_long_names(week, 1000)
    tracemalloc.start()
    try:
        with open(os.devnull, "wb") as out:
            copy = take_copy(str(tmp_path / "bob"), "week1", out, Limits(1000, 10**8))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert copy.result is None and "names" in copy.reason, copy.reason
    assert peak < 4 * 1024 * 1024, f"the worker held {peak / 1024 / 1024:.1f} MiB"


def test_the_store_refuses_a_copy_whose_paths_pass_the_bound_too(tmp_path: Path) -> None:
    """The store checks every copy it is sent (keeping each path to refuse one sent twice): a
    copy of 40 files with 16 KB paths, past 512 bytes a file at a limit of 1,000 files, is refused
    there too, in words, whatever made it; one of short names is taken."""
    deep = "/".join(f"{level:02d}" + "d" * 253 for level in range(63))
    for count, name, refused in ((40, deep + "/f{i:03d}", True), (40, "src/f{i:03d}.py", False)):
        tar = tmp_path / f"copy-{refused}.tar"
        with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as archive:
            for i in range(count):
                archive.addfile(tarfile.TarInfo(name.format(i=i)), io.BytesIO(b""))
        if refused:
            with pytest.raises(TooLarge, match="names"):
                check_copy(str(tar), Limits(1000, 10**8))
        else:
            assert check_copy(str(tar), Limits(1000, 10**8)).files == count


async def test_a_feedback_zip_of_long_names_is_refused_before_they_are_read(
        store: str, web: StoreClient, operator: StoreClient, tmp_path: Path) -> None:
    """An assistant uploads a zip whose entries have names of 60,000 bytes (a zip allows 65,535;
    the upload may be 1 GiB, every byte of it names). zipfile reads the whole directory, and an
    object per entry with its name, before a name is checked: the store (every course's, 1 GiB)
    held the upload's size over again. The directory is refused in words past 512 bytes an entry
    allowed (20 MB at the 20,000 files feedback may hold), before zipfile reads it; the store's
    traced peak stays small. Scaled down: 360 names of 60,000 bytes (a directory of 21.6 MB)."""
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        for i in range(360):
            archive.writestr(f"alice/{i:03d}" + "n" * 59_990, b"")
    data = upload.getvalue()
    await students(operator, "alice")
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, ASG, UID, data)
    assert refused.value.status == 400 and "names" in refused.value.message, refused.value.message
    saved = tmp_path / "upload.zip"  # what the store does with the upload, measured on its own
    saved.write_bytes(data)
    made = iter(range(10))
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge, match="names"):
            split_feedback(saved, lambda: tmp_path / f"t{next(made)}.tar", Limits(20_000, 1024**3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"the store held {peak / 1024 / 1024:.1f} MiB"


def test_every_case_spelling_of_one_name_gets_an_entry_of_its_own() -> None:
    """alice makes all 16,384 case spellings of `abcdefghijklmn.txt` (one folder holds them on
    Linux). Each is one entry, none the same as another on a case-insensitive disk, numbered
    `%~2` to `%~16384` in the order written (the number is remembered per name, so the store does
    not try 16,384 numbers for each)."""
    names = EntryNames()
    spellings = sorted("".join(c.upper() if up else c for c, up in zip("abcdefghijklmn", bits, strict=True))
                       + ".txt" for bits in itertools.product((False, True), repeat=14))
    written = [names.name("alice/", spelling) for spelling in spellings]
    assert len({folded(entry) for entry in written}) == len(spellings) == 16_384
    assert written[0] == "alice/ABCDEFGHIJKLMN.txt" and written[-1] == "alice/abcdefghijklmn%~16384.txt"
