"""The assignment store over real HTTP with the worker's own code: a commit fetched once from a
real git server, handed out into students' folders, copies taken and kept once, zips streamed
back, feedback returned; and what the store refuses (forged or stretched job scopes, a second
copy for the same deadline, requests nobody signed).

The worker runs in this process (`coursework.worker.run`, the code a worker Pod runs) against
folders in tmp: the Pods themselves are tested with the operator and the local runner
(tests/operator/test_assignments.py)."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import aiohttp
import pytest

from tests.support.coursework import ASG, NS, OTHER_UID, ROUND, UID, GitServer, job, students, volumes, work
from tests.support.coursework import STORE_SECRET as SECRET
from tests.support.mounts import small_volume
from userland.coursework.worker import run
from userland.platform.clients.store_client import FetchRefused, StoreClient
from userland.platform.model import coursework
from userland.platform.model.coursework import JobScope, job_token


async def test_fetch_once_hand_out_collect_and_zip(git_server: GitServer, store: str, operator: StoreClient,
                                                   web: StoreClient, tmp_path: Path) -> None:
    commit = git_server.repo("course", {"week1/hello.py": "print('hi')\n", "week1/data/a.csv": "1,2\n"})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("course"), ref="main",
                                   sub_path="week1")
    assert fetched["commit"] == commit and fetched["count"] == 2
    alice, bob = members = volumes(tmp_path, "alice", "bob")
    assert await work(store, job("handout", members, source=fetched["key"], commit=commit), tmp_path) == 0
    state = await operator.state(NS, ASG, UID)
    assert {k: v["state"] for k, v in state["handout"].items()} == {
        "jupyterlab/alice": "HandedOut", "jupyterlab/bob": "HandedOut"}
    assert state["handout"]["jupyterlab/alice"]["commit"] == commit
    assert (Path(alice.mount) / "week1" / "hello.py").read_text() == "print('hi')\n"
    # alice answers; bob writes a big one.
    (Path(alice.mount) / "week1" / "answer.py").write_text("print(42)\n")
    (Path(bob.mount) / "week1" / "big.bin").write_bytes(bytes(range(256)) * 4000)
    assert await work(store, job("collect", members, round=ROUND), tmp_path) == 0
    state = await operator.state(NS, ASG, UID)
    receipts = state["copies"][ROUND]
    assert receipts["jupyterlab/alice"]["files"] == 3
    assert receipts["jupyterlab/bob"]["bytes"] == 1_024_000 + len("print('hi')\n") + len("1,2\n")
    # The zip of every copy, read back file by file.
    await students(operator, "alice", "bob")
    response = await web.open_zip(NS, ASG, UID)
    try:
        data = await response.read()
    finally:
        response.release()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == ["alice/answer.py", "alice/data/a.csv", "alice/hello.py",
                                              "bob/big.bin", "bob/data/a.csv", "bob/hello.py"]
        assert archive.read("alice/answer.py") == b"print(42)\n"
        assert archive.read("bob/big.bin") == bytes(range(256)) * 4000
    response = await web.open_zip(NS, ASG, UID, login="alice", nested=True)
    try:
        with zipfile.ZipFile(io.BytesIO(await response.read())) as archive:
            assert sorted(archive.namelist()) == ["alice/jupyterlab/answer.py", "alice/jupyterlab/data/a.csv",
                                                  "alice/jupyterlab/hello.py"]
    finally:
        response.release()


async def test_a_copy_is_kept_once_whoever_uploads_again(git_server: GitServer, store: str,
                                                         operator: StoreClient, tmp_path: Path) -> None:
    (alice,) = volumes(tmp_path, "alice")
    (Path(alice.mount) / "week1").mkdir()
    (Path(alice.mount) / "week1" / "answer.py").write_text("at the deadline\n")
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    first = (await operator.state(NS, ASG, UID))["copies"][ROUND]["jupyterlab/alice"]
    # She edits afterwards, and the same round is collected again (a retried Pod): same copy.
    (Path(alice.mount) / "week1" / "answer.py").write_text("after the deadline\n")
    assert await work(store, job("collect", [alice], round=ROUND), tmp_path) == 0
    again = (await operator.state(NS, ASG, UID))["copies"][ROUND]["jupyterlab/alice"]
    assert again == first


async def test_a_copy_too_big_for_the_pods_scratch_is_streamed_from_the_folder(
        store: str, operator: StoreClient, tmp_path: Path) -> None:
    """Copies are first taken into the Pod's scratch space (the folder at the moment); one that
    does not fit there is streamed from the folder instead, and is the same copy."""
    (alice,) = volumes(tmp_path, "alice")
    (Path(alice.mount) / "week1").mkdir()
    (Path(alice.mount) / "week1" / "big.bin").write_bytes(bytes(range(256)) * 1000)
    the_job = job("collect", [alice], round=ROUND)
    with small_volume(tmp_path / "scratch", size="64k") as scratch:
        assert await run(the_job, job_token(SECRET, the_job.scope), store, scratch) == 0
        assert list(scratch.iterdir()) == []
    receipt = (await operator.state(NS, ASG, UID))["copies"][ROUND]["jupyterlab/alice"]
    assert (receipt["files"], receipt["bytes"]) == (1, 256_000)


async def test_what_the_store_refuses(store: str, tmp_path: Path) -> None:
    alice, bob = volumes(tmp_path, "alice", "bob")
    url = f"{store}/v1/a/{NS}/{ASG}/{UID}/copies/{ROUND}/jupyterlab/bob"
    empty = io.BytesIO()
    import tarfile
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    scope = job("collect", [alice], round=ROUND).scope
    forged = JobScope(kind="collect", namespace=NS, assignment=ASG, members=(alice, bob),
                      expires=scope.expires, round=ROUND)
    cases = {
        "no scope at all": {},
        "alice's job used for bob": {coursework.SCOPE_HEADER: scope.header(),
                                     coursework.TOKEN_HEADER: job_token(SECRET, scope)},
        "a scope stretched to bob, with alice's token": {coursework.SCOPE_HEADER: forged.header(),
                                                         coursework.TOKEN_HEADER: job_token(SECRET, scope)},
        "a scope signed with another secret": {coursework.SCOPE_HEADER: forged.header(),
                                               coursework.TOKEN_HEADER: job_token("y" * 40, forged)},
        "the web UI's signature": {coursework.SIGNATURE_HEADER: coursework.request_signature(
            SECRET, "web", "PUT", url.removeprefix(store))},
        # A job of a deleted assignment of the same name (another uid) cannot write into this one.
        "bob's job for the deleted week1": {
            coursework.SCOPE_HEADER: job("collect", [bob], round=ROUND, uid=OTHER_UID).scope.header(),
            coursework.TOKEN_HEADER: job_token(SECRET, job("collect", [bob], round=ROUND,
                                                           uid=OTHER_UID).scope)},
    }
    async with aiohttp.ClientSession() as http:
        for case, headers in cases.items():
            async with http.put(url, data=empty.getvalue(), headers=headers) as response:
                assert response.status == 403, case
        # The state and zips need a signature of the operator or the web UI.
        async with http.get(f"{store}/v1/a/{NS}/{ASG}/{UID}/state") as response:
            assert response.status == 403
        async with http.get(f"{store}/v1/a/{NS}/{ASG}/{UID}/collected.zip") as response:
            assert response.status == 403
        # An expired job.
        old = JobScope(kind="collect", namespace=NS, assignment=ASG, members=(bob,),
                       expires=int(time.time()) - 1, round=ROUND)
        expired = {coursework.SCOPE_HEADER: old.header(), coursework.TOKEN_HEADER: job_token(SECRET, old)}
        async with http.put(url, data=empty.getvalue(), headers=expired) as response:
            assert response.status == 403


async def test_feedback_uploaded_and_returned(store: str, operator: StoreClient, web: StoreClient,
                                              tmp_path: Path) -> None:
    alice, bob = volumes(tmp_path, "alice", "bob")
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w") as archive:
        archive.writestr("alice/notes.md", "Well done.\n")
        archive.writestr("alice/tests/result.txt", "10/10\n")
        archive.writestr("not a login!/x.txt", "x")
        archive.writestr("__MACOSX/alice/._notes.md", "junk")
        archive.writestr("../escape.txt", "x")
    await students(operator, "alice", "bob")
    answer = await web.put_feedback(NS, ASG, UID, upload.getvalue())
    assert answer["students"] == {"alice": {"files": 2, "bytes": len("Well done.\n") + len("10/10\n")}}
    assert set(answer["ignored"]) == {"not a login!", "../escape.txt"}
    single = await web.put_feedback(NS, ASG, UID, b"print('see line 3')\n", login="bob",
                                    name="review.py")
    assert single["students"] == {"bob": {"files": 1, "bytes": 20}}
    state = await operator.state(NS, ASG, UID)
    feedback = {login: ("9/10", "Clear work.", "d1") if login == "alice" else ("", "", "d2")
                for login in state["feedback"]}
    assert await work(store, job("feedback", [alice, bob], feedback=feedback), tmp_path) == 0
    back = Path(alice.mount) / "week1" / "feedback"
    assert (back / "notes.md").read_text() == "Well done.\n"
    assert (back / "tests" / "result.txt").read_text() == "10/10\n"
    assert "**Grade:** 9/10" in (back / "FEEDBACK.md").read_text()
    assert (Path(bob.mount) / "week1" / "feedback" / "review.py").read_text() == "print('see line 3')\n"
    assert not (Path(bob.mount) / "week1" / "feedback" / "FEEDBACK.md").exists()
    returned = (await operator.state(NS, ASG, UID))["feedbackReturned"]
    assert returned["jupyterlab/alice"]["digest"] == "d1"
    assert returned["jupyterlab/alice"]["state"] == "HandedOut"


async def test_a_source_that_cannot_be_had_is_a_reason(git_server: GitServer, operator: StoreClient) -> None:
    git_server.repo("course", {"a.py": "a\n"})
    with pytest.raises(FetchRefused) as refused:
        await operator.fetch(NS, ASG, UID, url=git_server.url_of("course"), ref="nope", sub_path="")
    assert refused.value.reason == "UnknownRef" and "nope" in refused.value.message
