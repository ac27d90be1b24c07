"""The store's part in grading (coursework/store_grades.py) and the grading Pod's two steps
(coursework/grading_work.py), attacked (docs/grading.md, SECURITY.md "Grading").

Real: the store over HTTP on loopback, git for the tests' source, the collection worker's and the
grading steps' own code on real folders in tmp. A grading job is for one student's copy of one
round with one set of tests: it gets nothing else, and what it reports is kept as that copy's
grading under a version the store computes itself.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import aiohttp

from tests.support.coursework import (
    ASG,
    NS,
    ROUND,
    STORE_SECRET,
    UID,
    GitServer,
    job,
    students,
    volumes,
    work,
)
from userland.coursework.grading_work import _extract, read_results, report_of, run_grade_step
from userland.platform.clients.store_client import StoreClient
from userland.platform.model import coursework
from userland.platform.model.coursework import Job, JobScope, Member, job_token
from userland.platform.model.gradescope import RESULTS_MAX_BYTES
from userland.platform.model.grading import grade_version

BASE = f"/v1/a/{NS}/{ASG}/{UID}"


async def collected(store: str, operator: StoreClient, tmp_path: Path) -> None:
    """alice's and bob's copies of ROUND, taken by the collection worker's own code."""
    await students(operator, "alice", "bob")
    members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(members[0].mount) / "week1" / "answer.py").write_text("alice's\n")
    (Path(members[1].mount) / "week1" / "answer.py").write_text("bob's\n")
    assert await work(store, job("collect", members, round=ROUND, at=""), tmp_path) == 0


async def tests_key(operator: StoreClient, git_server: GitServer) -> str:
    git_server.repo("course", {"week1/starter.py": "pass\n", "grading/run_autograder": "#!/bin/sh\necho hi\n",
                               "grading/answers.json": '{"secret": 42}\n'})
    fetched = await operator.fetch(NS, ASG, UID, url=git_server.url_of("course"), ref="", sub_path="grading")
    return str(fetched["key"])


def grade_job(folder: Path, login: str, key: str, *, round_: str = ROUND, kind: str = "grade") -> Job:
    scope = JobScope(kind=kind, namespace=NS, assignment=ASG,  # type: ignore[arg-type]
                     members=(Member(login, "jupyterlab", str(folder / "submission")),),
                     expires=int(time.time()) + 600, source=key, round=round_, uid=UID)
    return Job(scope=scope, path="/autograder")


async def get(store: str, the_job: Job, path: str) -> int:
    headers = {coursework.SCOPE_HEADER: the_job.scope.header(),
               coursework.TOKEN_HEADER: job_token(STORE_SECRET, the_job.scope)}
    async with aiohttp.ClientSession() as session, \
            session.get(store + BASE + path, headers=headers) as answer:
        await answer.read()
        return answer.status


async def test_fetch_brings_only_this_copy_and_these_tests_and_closes_the_folders(
        store: str, operator: StoreClient, git_server: GitServer, tmp_path: Path) -> None:
    await collected(store, operator, tmp_path)
    key = await tests_key(operator, git_server)
    folder = tmp_path / "pod"
    the_job = grade_job(folder, "alice", key)
    assert await run_grade_step("fetch", the_job, job_token(STORE_SECRET, the_job.scope), store,
                                scratch=tmp_path) == 0
    assert (folder / "submission" / "answer.py").read_text() == "alice's\n"
    assert sorted(p.name for p in (folder / "source").iterdir()) == ["answers.json", "run_autograder"]
    assert os.access(folder / "source" / "run_autograder", os.X_OK)
    assert (folder / "source").stat().st_mode & 0o777 == 0o700  # the tests: the harness's alone
    assert (folder / "submission").stat().st_mode & 0o777 == 0o555
    assert (folder / "results").stat().st_mode & 0o777 == 0o755


async def test_a_grading_job_gets_nothing_but_its_own(store: str, operator: StoreClient,
                                                      git_server: GitServer, tmp_path: Path) -> None:
    await collected(store, operator, tmp_path)
    key = await tests_key(operator, git_server)
    folder = tmp_path / "pod"
    mine = grade_job(folder, "alice", key)
    assert await get(store, mine, "/grading/copy.tar") == 200
    assert await get(store, mine, "/grading/tests.tar") == 200
    # Its token is for alice's copy only: the paths of others' and of the whole class are refused.
    assert await get(store, mine, "/copies/" + ROUND + "/jupyterlab/bob") in (403, 404, 405)
    assert await get(store, mine, "/collected.zip") == 403
    assert await get(store, mine, f"/sources/{key}.tar") == 403  # not a hand-out job
    assert await get(store, mine, "/grading/results/jupyterlab/bob") == 403  # staff's, signed
    # A collection job's token does not open the grading endpoints, nor a forged scope.
    collect_job = job("collect", [Member("alice", "jupyterlab")], round=ROUND)
    assert await get(store, collect_job, "/grading/copy.tar") == 403
    other_round = grade_job(folder, "alice", key, round_="20200101T000000Z")
    assert await get(store, other_round, "/grading/copy.tar") == 404
    forged = {coursework.SCOPE_HEADER: grade_job(folder, "bob", key).scope.header(),
              coursework.TOKEN_HEADER: job_token(STORE_SECRET, mine.scope)}
    async with aiohttp.ClientSession() as session, \
            session.get(store + BASE + "/grading/copy.tar", headers=forged) as answer:
        assert answer.status == 403


async def test_a_report_is_kept_under_the_version_the_store_computes(
        store: str, operator: StoreClient, git_server: GitServer, tmp_path: Path) -> None:
    await collected(store, operator, tmp_path)
    key = await tests_key(operator, git_server)
    folder = tmp_path / "pod"
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "results.json").write_text('{"score": 7, "tests": [{"name": "a", "score": 7}]}')
    the_job = grade_job(folder, "alice", key)
    assert await run_grade_step("report", the_job, job_token(STORE_SECRET, the_job.scope), store) == 0
    state = await operator.state(NS, ASG, UID)
    receipt = state["copies"][ROUND]["jupyterlab/alice"]
    summary = state["graded"]["jupyterlab/alice"]
    assert summary["version"] == grade_version(receipt["sha256"], key)
    assert summary["state"] == "Graded" and summary["score"] == 7.0 and summary["tests"] == 1
    assert "jupyterlab/bob" not in state["graded"]


def test_what_the_report_step_reads(tmp_path: Path) -> None:
    """A student's code may have put anything at results.json: a link, a folder, a device, a
    file past the limit. None of it is followed or read past 1 MB."""
    results = tmp_path / "results"
    results.mkdir()
    assert report_of(results)["reason"] == "NoResults"
    (results / "results.json").symlink_to("/etc/passwd")
    assert read_results(results) is None
    (results / "results.json").unlink()
    (results / "results.json").symlink_to("/dev/zero")
    assert read_results(results) is None
    (results / "results.json").unlink()
    (results / "results.json").mkdir()
    assert read_results(results) is None
    (results / "results.json").rmdir()
    with open(results / "results.json", "wb") as out:
        out.truncate(10 * 1024 * 1024 * 1024)  # 10 GiB, sparse: nothing past the limit is read
    data = read_results(results)
    assert data is not None and len(data) == RESULTS_MAX_BYTES + 1
    assert report_of(results)["reason"] == "ResultsTooLarge"
    (results / "results.json").unlink()
    (results / ".exit-status").write_text("137\n")
    found = report_of(results)
    assert found["reason"] == "NoResults" and "137: killed" in str(found["message"])
    # The grade step's wrapper saw the node kill a process at the memory limit: out of memory.
    (results / ".oom-killed").write_text("killed\n")
    found = report_of(results)
    assert found["reason"] == "OutOfMemory" and "ran out of memory" in str(found["message"])
    # ... unless the harness outlived it and wrote its results: those stand.
    (results / "results.json").write_text('{"score": 1, "tests": []}')
    assert report_of(results)["state"] == "Graded"


def test_a_copy_with_links_and_climbing_names_is_extracted_without_them(tmp_path: Path) -> None:
    tar_path = tmp_path / "copy.tar"
    with tarfile.open(tar_path, "w") as archive:
        for name, kind in (("ok.py", tarfile.REGTYPE), ("../escape.py", tarfile.REGTYPE),
                           ("/abs.py", tarfile.REGTYPE), ("link", tarfile.SYMTYPE),
                           ("dir/in.py", tarfile.REGTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc"
                archive.addfile(info)
            else:
                data = b"x\n"
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    into = tmp_path / "submission"
    assert _extract(tar_path, into) == 2
    assert sorted(str(p.relative_to(into)) for p in into.rglob("*")) == ["dir", "dir/in.py", "ok.py"]
    assert not (tmp_path / "escape.py").exists()
