"""Attack review of assignments, issue 25 (SECURITY.md, "A student exhausting the worker"): a
worker's memory must not grow with what one student writes, and one student's trouble is that
student's failure, never the batch's.

Real: the store over HTTP on loopback, the worker's own code (`coursework.worker.run`, what a
worker Pod runs) on real folders in tmp, real git behind git's http-backend where a source is
needed. Nothing is patched. Memory is measured with tracemalloc (what Python allocates), which
is what a record parsed whole, or a list of every left-out name, costs."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from tests.support.coursework import ASG, NS, ROUND, UID, GitServer, job, volumes, work
from userland.coursework.apply import Sealer, load_manifest, manifest_bytes, take_copy
from userland.coursework.safefs import Folder
from userland.coursework.trees import Limits
from userland.platform.clients.store_client import StoreClient
from userland.platform.model.assignments import MANIFEST_NAME
from userland.platform.model.coursework import manifest_key

MIB = 1024 * 1024
# The most a record is read up to (coursework/apply.py's MANIFEST_LIMIT): a forged one just
# under it is what the old worker parsed whole (about 420 MiB of Python objects).
RECORD_LIMIT = 16 * MIB


def forged_record(size: int = RECORD_LIMIT - 64) -> bytes:
    """A hand-out record of `size` bytes of `{}` entries: cheap to write, a dict per two bytes to
    whoever parses it before checking its seal."""
    head, tail = b'{"files": [', b"{}]}"
    count = (size - len(head) - len(tail)) // 3
    return head + b"{}," * count + tail


def the_worker_held(peak: int, limit: int) -> str:
    return f"the worker held {peak / MIB:.1f} MiB (at most {limit / MIB:.0f} MiB expected)"


async def test_a_forged_16_mib_hand_out_record_is_never_parsed(
        git_server: GitServer, store: str, operator: StoreClient, tmp_path: Path) -> None:
    """bob writes a 16 MiB record of `{}` entries where the platform keeps his hand-out record.
    Parsed before its seal is checked it costs the worker about 420 MiB (two such students in a
    batch of 20 had the 512 MiB Pod killed, and the batch with it). The seal is checked on the
    bytes as they are read: the worker holds a few MiB, bob's record is not trusted (every file
    of his is his), and both students get the hand-out."""
    commit = git_server.repo("forged16", {"hello.py": "print('hi')\n"})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("forged16"), ref="main", sub_path="")
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(bob.mount) / "week1" / MANIFEST_NAME).write_bytes(forged_record())
    tracemalloc.start()
    try:
        assert await work(store, job("handout", members, source=fetched["key"], commit=commit), tmp_path) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB, the_worker_held(peak, 8 * MIB)
    state = (await operator.state(NS, ASG, UID))["handout"]
    assert {k: v["state"] for k, v in state.items()} == {"jupyterlab/alice": "HandedOut",
                                                         "jupyterlab/bob": "HandedOut"}
    assert (Path(bob.mount) / "week1" / "hello.py").read_text() == "print('hi')\n"
    # The platform's own record replaces the forged one, and is trusted by the next hand-out.
    assert (Path(bob.mount) / "week1" / MANIFEST_NAME).stat().st_size < 4096
    second = git_server.repo("forged16", {"hello.py": "print('hi, fixed')\n"})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("forged16"), ref="main", sub_path="")
    assert await work(store, job("handout", members, source=fetched["key"], commit=second), tmp_path) == 0
    for member in (alice, bob):
        assert (Path(member.mount) / "week1" / "hello.py").read_text() == "print('hi, fixed')\n"


@pytest.mark.parametrize("shape", ["16 MiB of {}", "nested 100,000 deep"])
async def test_a_forged_feedback_record_fails_no_one(store: str, web: StoreClient, operator: StoreClient,
                                                      tmp_path: Path, shape: str) -> None:
    """The same in `feedback/`, where returned feedback keeps its own record: a 16 MiB forged
    record costs the worker no more than a few MiB, and one nested 100,000 lists deep (which
    Python's json cannot parse: RecursionError) is bob's record only, not an exception that
    loses alice's feedback with the batch. Both get their feedback."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1/feedback")
    record = forged_record() if shape.startswith("16") else b"[" * 100_000
    (Path(bob.mount) / "week1" / "feedback" / MANIFEST_NAME).write_bytes(record)
    feedback = {"alice": ("A", "well done", "d1"), "bob": ("B", "good", "d2")}
    tracemalloc.start()
    try:
        assert await work(store, job("feedback", members, feedback=feedback), tmp_path) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB, the_worker_held(peak, 8 * MIB)
    returned = (await operator.state(NS, ASG, UID))["feedbackReturned"]
    assert {k: v["state"] for k, v in returned.items()} == {"jupyterlab/alice": "HandedOut",
                                                            "jupyterlab/bob": "HandedOut"}, returned
    for member, grade in ((alice, "A"), (bob, "B")):
        text = (Path(member.mount) / "week1" / "feedback" / "FEEDBACK.md").read_text()
        assert f"**Grade:** {grade}" in text


def hard_links_and_folders(week: Path, *, folders: int, links: int) -> None:
    """`folders` empty folders (in two folders) and `links` hard links of one small file (in a
    folder of their own): no folder lists more than half of them."""
    (week / "one.txt").write_text("one\n")
    for i in range(folders):
        (week / f"p{i % 2}" / f"dir{i:04d}").mkdir(parents=True)
    (week / "links").mkdir()
    for i in range(links):
        os.link(week / "one.txt", week / "links" / f"link{i:04d}.txt")


async def test_folders_and_hard_links_count_toward_the_limits(store: str, operator: StoreClient,
                                                                tmp_path: Path) -> None:
    """Folders and hard links cost a worker as much as files do (3.3 M entries passed 512 MiB,
    as folders, within the file limit): every entry counts, a copy may hold at most twice the
    file limit in entries. bob has 150 empty folders and 60 hard links of one file, the limit is
    100 files (no folder lists more than 100 entries): refused in words (the old worker took it:
    61 files); alice is collected."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(alice.mount) / "week1" / "answer.py").write_text("alice\n")
    hard_links_and_folders(Path(bob.mount) / "week1", folders=150, links=60)
    assert await work(store, job("collect", members, round=ROUND, max_files=100), tmp_path) == 0
    state = await operator.state(NS, ASG, UID)
    assert state["copies"][ROUND]["jupyterlab/alice"]["files"] == 1
    assert "jupyterlab/bob" not in state["copies"][ROUND]
    failed = state["collectFailed"][ROUND]["jupyterlab/bob"]
    assert failed["state"] == "Failed" and "200 entries" in failed["reason"], failed


LIMIT = 1_000


async def test_many_left_out_entries_across_folders_are_refused_without_listing_them(
        store: str, operator: StoreClient, tmp_path: Path) -> None:
    """bob spreads links over many folders (no folder lists more than the file limit, and no
    link is a file): the old worker listed every one as left out, in memory, without bound (3.3 M
    entries passed the Pod's 512 MiB). Scaled down (limit 1,000; 6,000 links in 60 folders):
    his copy is refused once the entries pass twice the limit, the worker holds little, alice is
    collected."""
    alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(alice.mount) / "week1" / "answer.py").write_text("alice\n")
    week = Path(bob.mount) / "week1"
    for folder in range(60):
        (week / f"d{folder:02d}").mkdir()
        for i in range(100):
            os.symlink("/etc/passwd", week / f"d{folder:02d}" / f"l{i:03d}")
    tracemalloc.start()
    try:
        assert await work(store, job("collect", members, round=ROUND, max_files=LIMIT), tmp_path) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    state = await operator.state(NS, ASG, UID)
    assert state["copies"][ROUND]["jupyterlab/alice"]["files"] == 1
    failed = state["collectFailed"][ROUND]["jupyterlab/bob"]
    assert "2,000 entries" in failed["reason"], failed
    assert peak < 3 * MIB, the_worker_held(peak, 3 * MIB)


def test_left_out_entries_are_counted_and_the_first_50_named(tmp_path: Path) -> None:
    """A copy that leaves out 120 links (within the limits) says how many were left out and
    names the first 50, no more: what the worker keeps of them does not grow with their number."""
    week = tmp_path / "alice" / "week1"
    week.mkdir(parents=True)
    (week / "answer.py").write_text("42\n")
    for folder in ("a", "b"):  # two folders: none lists more than the file limit
        (week / folder).mkdir()
        for i in range(60):
            os.symlink("../answer.py", week / folder / f"link{i:03d}")
    with open(tmp_path / "copy.tar", "wb") as out:
        copy = take_copy(str(tmp_path / "alice"), "week1", out, Limits(100, 10**7))
    assert copy.result is not None, copy.reason
    assert copy.result.files == 1
    assert copy.result.skipped_count == 120
    assert copy.result.skipped == [f"a/link{i:03d}" for i in range(50)]


def first_format_record(files: dict[str, str], sealer: Sealer, padding: int = 0) -> bytes:
    """A record as the worker wrote it before its seal covered its bytes (sealed over the parsed
    files), with `padding` bytes of spaces in its text."""
    return json.dumps({"about": " " * padding, "files": files, "seal": sealer.seal(files)}).encode()


def test_records_of_the_first_format_are_believed_only_when_small(tmp_path: Path) -> None:
    """Records written before this format (in students' folders from an earlier hand-out) are
    still believed when they are as small as a real one of a few thousand files (256 KiB), and
    not past it: parsing one can never cost the worker more than a few MiB. One of the current
    format is believed whatever its size up to the limit, and not once a byte of it changed."""
    sealer = Sealer(manifest_key("s" * 40, NS, ASG), "jupyterlab/alice", "week1")
    week = tmp_path / "alice" / "week1"
    week.mkdir(parents=True)
    files = {"hello.py": "a" * 64}
    record = week / MANIFEST_NAME
    record.write_bytes(first_format_record(files, sealer))
    with Folder.open(str(tmp_path / "alice"), "week1") as folder:
        assert load_manifest(folder, sealer) == files
        record.write_bytes(first_format_record(files, sealer, padding=300 * 1024))
        assert load_manifest(folder, sealer) is None
        many = {f"f{i:06d}.py": "b" * 64 for i in range(40_000)}  # 3.5 MB: past the first format's
        record.write_bytes(manifest_bytes(many, sealer, assignment="course/week1", commit="c1"))
        assert load_manifest(folder, sealer) == many
        record.write_bytes(record.read_bytes().replace(b"f000001.py", b"f000001.pz"))
        assert load_manifest(folder, sealer) is None
