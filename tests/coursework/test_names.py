"""Attack review of assignments, issue 25 (SECURITY.md, "Names that mislead or collide"): names
that mislead or collide. A student's file name is theirs to choose; what the teacher extracts
from the class zip must be what the student had, one entry for one file, and named so that it
cannot pass for something else. Feedback staff upload must go to the student it names, and only
into the files a student may be given.

Real: the store over HTTP on loopback, the worker's own code on real folders in tmp, real git
behind git's http-backend for a source with a submodule. Nothing is patched."""

from __future__ import annotations

import io
import unicodedata
import zipfile
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.coursework import (
    ASG,
    NS,
    ROUND,
    UID,
    GitServer,
    add_submodule,
    job,
    students,
    volumes,
    work,
)
from userland.platform.clients.store_client import StoreClient, StoreError

# Names a student may give files (each one's content is its name, to tell which entry is which):
# a right-to-left override that shows `invoice<RLO>fdp.exe` as "invoiceexe.pdf", C1 controls
# (NEL, CSI), the other bidi controls, a backslash (a folder separator to Windows' zip tools) and
# its escaped spelling, which must not become the same entry.
NAMES = ["invoice\u202efdp.exe", "a\\b.txt", "a%5Cb.txt", "x\u0085y.txt", "csi\u009b2J.txt",
         "iso\u2066late\u2069.txt", "mark\u200fed.txt", "100%.txt", "C:\\evil.bat", "plain.txt"]


def unsafe(name: str) -> list[str]:
    """The characters of `name` that a zip entry must not carry: controls (C0, DEL, C1), bidi
    controls (category Cf with a bidi class of its own), a backslash, a colon."""
    return [f"U+{ord(c):04X}" for c in name
            if unicodedata.category(c) in ("Cc", "Cf") or c in "\\:"]


async def test_names_that_mislead_or_collide_are_escaped_in_the_class_zip(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    """alice names files with a right-to-left override, C1 controls, bidi isolates and marks, a
    backslash and the escaped spelling of one (`a\\b.txt` and `a%5Cb.txt`). In the class zip every
    file is one entry of its own, under alice/, named without a control character, a bidi control,
    a backslash or a colon; percent-decoding an entry's name gives the student's name back."""
    (alice,) = volumes(tmp_path, "alice", folder="week1")
    for name in NAMES:
        (Path(alice.mount) / "week1" / name).write_text(name)
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    assert (await operator.state(NS, ASG, UID))["copies"][ROUND]["jupyterlab/alice"]["files"] == len(NAMES)
    await students(operator, "alice")
    response = await web.open_zip(NS, ASG, UID)
    try:
        data = await response.read()
    finally:
        response.release()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = {info.filename: archive.read(info).decode() for info in archive.infolist()}
        count = len(archive.infolist())
    assert count == len(NAMES) == len(entries), sorted(entries)
    for entry, content in entries.items():
        assert entry.startswith("alice/") and not unsafe(entry), (entry, unsafe(entry))
        assert unquote(entry.removeprefix("alice/")) == content, entry


def feedback_zip(*entries: str) -> bytes:
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        for name in entries:
            archive.writestr(name, f"written as {name}\n")
    return upload.getvalue()


@pytest.mark.parametrize(("entries", "pair"), [
    (("Alice/grade.md", "alice/grade.md"), ("Alice/", "alice/")),
    (("alice/notes.md", "ALICE/other.md"), ("alice/", "ALICE/")),
    (("bob/a\\b.md", "bob/a/b.md"), ("bob/a\\b.md", "bob/a/b.md")),
])
async def test_a_feedback_zip_whose_names_mean_the_same_student_is_refused_naming_them(
        store: str, web: StoreClient, operator: StoreClient, entries: tuple[str, ...],
        pair: tuple[str, str]) -> None:
    """Logins are not case-sensitive: a zip with `Alice/` and `alice/` gave both folders to alice,
    one grade file silently replacing the other (so did two spellings of one file). The zip is
    refused (400, which the web UI shows as a page) with words that name the pair, and nothing of
    it is kept."""
    await students(operator, "alice", "bob")
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, ASG, UID, feedback_zip(*entries))
    assert refused.value.status == 400
    for name in pair:
        assert name in refused.value.message, refused.value.message
    assert (await operator.state(NS, ASG, UID))["feedback"] == {}


async def test_a_single_feedback_file_named_like_the_hand_out_record_is_refused(
        store: str, web: StoreClient, operator: StoreClient) -> None:
    """The platform keeps `.userland-handout.json` in every student's folder (and in feedback/):
    the zip path leaves it out, and a single file of that name uploaded for one student is refused
    in words too, nothing kept."""
    await students(operator, "alice")
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, ASG, UID, b'{"files": {}}', login="alice",
                               name=".userland-handout.json")
    assert refused.value.status == 400 and ".userland-handout.json" in refused.value.message
    assert (await operator.state(NS, ASG, UID))["feedback"] == {}
    await web.put_feedback(NS, ASG, UID, b"fine\n", login="alice", name="review.md")
    assert set((await operator.state(NS, ASG, UID))["feedback"]) == {"alice"}


async def test_a_submodule_in_the_source_is_said(git_server: GitServer, store: str,
                                                 operator: StoreClient) -> None:
    """A source with a submodule: git's archive holds an empty folder where it is, and it was
    left out without a word (students missed its files and nobody knew). The fetch says it is
    left out, and why, where the assignment's status lists what is not handed out."""
    commit = git_server.repo("withsub", {"hello.py": "print('hi')\n", "lib/util.py": "x = 1\n"})
    add_submodule(git_server, "withsub", "lib/vendored", commit)
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("withsub"), ref="main", sub_path="")
    assert fetched["count"] == 2, fetched
    said = {path: why for path, why in fetched["skipped"]}
    assert set(said) == {"lib/vendored"}, said
    assert "submodule" in said["lib/vendored"], said
