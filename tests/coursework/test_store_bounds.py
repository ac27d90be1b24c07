"""What one course's staff can do to the assignment store (SECURITY.md, "Assignments
and the store"): a recreated assignment, feedback folders of nobody, uploads past a quota, a full
disk. Real: the store over HTTP on loopback, the worker's own code on folders in tmp, a real
small file system (tmpfs) for a full disk. Nothing is patched."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.coursework.test_attacks import zeros_zip
from tests.support.coursework import (
    ASG,
    INTERNAL,
    NS,
    OTHER_UID,
    ROUND,
    STORE_SECRET,
    UID,
    GitServer,
    job,
    store_server,
    students,
    volumes,
    work,
)
from tests.support.mounts import small_volume
from tests.support.ports import free_port
from userland.coursework.store_files import Quotas
from userland.coursework.trees import Limits
from userland.platform.clients.store_client import FetchRefused, StoreClient, StoreError
from userland.platform.model.coursework import Member

LATER = "20261214T235900Z"


async def zip_names(web: StoreClient, uid: str = UID, **kwargs: object) -> dict[str, bytes]:
    response = await web.open_zip(NS, ASG, uid, **kwargs)  # type: ignore[arg-type]
    try:
        data = await response.read()
    finally:
        response.release()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


async def collect(store: str, tmp_path: Path, files: dict[str, str], *, uid: str = UID, round_: str = ROUND,
                  template: str = "jupyterlab") -> None:
    """Each login's `answer.py` with this text, collected by the worker's own code."""
    base = tmp_path / f"{uid[-4:]}-{round_}-{template}"
    members = [Member(m.login, template, m.mount) for m in volumes(base, *files, folder="week1")]
    for member in members:
        (Path(member.mount) / "week1" / "answer.py").write_text(files[member.login])
    assert await work(store, job("collect", members, round=round_, uid=uid), tmp_path) == 0


async def test_a_recreated_assignment_never_serves_the_deleted_ones_copies(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    """week1 is collected from alice and bob, deleted, and made again (another uid) for alice
    only: the new one's zip holds alice's new copy and nothing of the deleted one's (bob's copy
    was served before, and `bob/README.md` twice when its Templates changed)."""
    await students(operator, "alice", "bob", uid=OTHER_UID)
    await collect(store, tmp_path, {"alice": "old alice\n", "bob": "old bob\n"}, uid=OTHER_UID)
    assert set(await zip_names(web, OTHER_UID)) == {"alice/answer.py", "bob/answer.py"}
    # Deleted and made again: the operator lists what exists; the store retires the rest.
    answer = await operator.live(NS, {ASG: UID})
    assert answer == {"retired": 1, "removed": 1}  # retention 0 here: removed at once
    await students(operator, "alice")
    await collect(store, tmp_path, {"alice": "new alice\n"}, round_=LATER)
    assert await zip_names(web) == {"alice/answer.py": b"new alice\n"}
    assert (await operator.state(NS, ASG, OTHER_UID))["copies"] == {}
    # A job of the deleted assignment (its Pod outlived it) keeps nothing, there or here.
    late = volumes(tmp_path / "late", "bob", folder="week1")
    (Path(late[0].mount) / "week1" / "answer.py").write_text("late bob\n")
    await work(store, job("collect", late, round=LATER, uid=OTHER_UID), tmp_path)
    assert await zip_names(web) == {"alice/answer.py": b"new alice\n"}
    assert (await operator.state(NS, ASG, OTHER_UID))["copies"] == {}


async def test_a_zip_holds_the_current_students_nested_when_templates_differ(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    await operator.members(NS, ASG, UID, [("jupyterlab", "alice"), ("jupyterlab", "bob"), ("vscode", "bob")])
    await collect(store, tmp_path, {"alice": "a\n", "bob": "b lab\n"})
    await collect(store, tmp_path, {"bob": "b code\n"}, template="vscode")
    # Two Templates' copies: nested by Template, whatever was asked (never two `bob/answer.py`).
    assert set(await zip_names(web)) == {"alice/jupyterlab/answer.py", "bob/jupyterlab/answer.py",
                                         "bob/vscode/answer.py"}
    # bob leaves the assignment: his copies stay in the store but are no longer in its zip.
    await students(operator, "alice")
    assert await zip_names(web) == {"alice/answer.py": b"a\n"}


async def test_feedback_folders_of_made_up_logins_are_never_kept(
        store: str, operator: StoreClient, web: StoreClient, tmp_path: Path) -> None:
    """An assistant uploads 2,000 folders of made-up logins in one small zip (4,000 files were
    kept for nobody), and a zip of 200 MB of zeros for a made-up login (a 209 MB tar was kept):
    neither keeps a byte; alice's own feedback is kept."""
    await students(operator, "alice")
    upload = io.BytesIO()
    with zipfile.ZipFile(upload, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("alice/notes.md", "Well done.\n")
        for i in range(2000):
            archive.writestr(f"made-up-{i}/a.txt", "x")
            archive.writestr(f"made-up-{i}/b.txt", "y")
    answer = await web.put_feedback(NS, ASG, UID, upload.getvalue())
    assert answer["students"] == {"alice": {"files": 1, "bytes": 11}}
    assert len([i for i in answer["ignored"] if "not a student of this assignment" in i]) == 2000
    state = await operator.state(NS, ASG, UID)
    assert set(state["feedback"]) == {"alice"}
    kept = state["usage"]["bytes"]
    zeros = zeros_zip(tmp_path / "zeros.zip", {"mallory/zeros.bin": 200 * 1024 * 1024})
    assert len(zeros) < 512 * 1024
    answer = await web.put_feedback(NS, ASG, UID, zeros)
    assert answer["students"] == {} and answer["ignored"] == ["mallory (not a student of this assignment)"]
    assert (await operator.state(NS, ASG, UID))["usage"]["bytes"] == kept < 64 * 1024
    # One student's own upload names a student of it, or is refused in words.
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, ASG, UID, b"x", login="mallory", name="x.txt")
    assert refused.value.status == 400 and "not a student" in refused.value.message


async def test_feedback_before_the_store_knows_the_students_is_refused(web: StoreClient) -> None:
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, ASG, UID, b"x", login="alice", name="x.txt")
    assert refused.value.status == 409 and "try again" in refused.value.message


@pytest.fixture
async def quota_store(tmp_path: Path) -> AsyncIterator[tuple[str, StoreClient, StoreClient]]:
    """A store whose assignments may keep 2 MB each, and a course 3 MB."""
    async with store_server(tmp_path / "store", quotas=Quotas(assignment=2_000_000, course=3_000_000),
                            copy_limits=Limits(100, 10**8)) as url:
        operator, web = StoreClient(url, STORE_SECRET, "operator"), StoreClient(url, STORE_SECRET, "web")
        try:
            yield url, operator, web
        finally:
            await operator.close()
            await web.close()


async def test_a_quota_passed_is_refused_in_words_and_keeps_nothing(
        quota_store: tuple[str, StoreClient, StoreClient], tmp_path: Path) -> None:
    url, operator, web = quota_store
    await students(operator, "alice", "bob")
    big = zeros_zip(tmp_path / "big.zip", {"alice/recording.bin": 2_500_000})
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, ASG, UID, big)
    assert refused.value.status == 413
    assert "USERLAND_STORE_ASSIGNMENT_QUOTA_MB" in refused.value.message
    assert "Nothing was kept" in refused.value.message
    state = await operator.state(NS, ASG, UID)
    assert state["feedback"] == {}
    assert state["usage"]["quotaBytes"] == 2_000_000 and state["usage"]["bytes"] < 10_000
    # Within the quota: kept, and counted.
    await web.put_feedback(NS, ASG, UID, zeros_zip(tmp_path / "ok.zip", {"alice/recording.bin": 1_500_000}))
    assert (await operator.state(NS, ASG, UID))["usage"]["bytes"] > 1_500_000
    # A copy past it: that student's collection fails with the quota's words; alice's is taken.
    (alice, bob) = members = volumes(tmp_path, "alice", "bob", folder="week1")
    (Path(alice.mount) / "week1" / "a.py").write_text("a\n")
    (Path(bob.mount) / "week1" / "big.bin").write_bytes(b"\x01" * 600_000)
    assert await work(url, job("collect", members, round=ROUND), tmp_path) == 0
    state = await operator.state(NS, ASG, UID)
    assert "jupyterlab/alice" in state["copies"][ROUND]
    assert "quota" in state["collectFailed"][ROUND]["jupyterlab/bob"]["reason"]
    # The course's quota counts every assignment of it: another one has 1 MB of room left at most.
    other = "0b6a5c1e-0000-4000-8000-00000000c003"
    await operator.members(NS, "week2", other, [("jupyterlab", "alice")])
    with pytest.raises(StoreError) as refused:
        await web.put_feedback(NS, "week2", other,
                               zeros_zip(tmp_path / "w2.zip", {"alice/recording.bin": 1_500_000}))
    assert refused.value.status == 413 and "USERLAND_STORE_COURSE_QUOTA_MB" in refused.value.message


async def test_a_full_disk_is_said_in_words_and_the_metric_shows_it_coming(tmp_path: Path) -> None:
    """The store's volume fills (a real 4 MB file system): a copy that does not fit fails that
    student's collection in words (nothing half-kept), feedback is a 507 in words, and /metrics
    showed how little was free."""
    with small_volume(tmp_path / "volume", size="4m") as volume:
        async with store_server(volume / "store", copy_limits=Limits(100, 10**8)) as url:
            operator, web = StoreClient(url, STORE_SECRET, "operator"), StoreClient(url, STORE_SECRET, "web")
            try:
                await students(operator, "alice", "bob")
                async with aiohttp.ClientSession() as http:
                    async with http.get(f"{INTERNAL[url]}/metrics") as response:
                        metrics = await response.text()
                    async with http.get(f"{url}/metrics") as response:
                        assert response.status == 404  # never on the API's port, which worker Pods reach
                assert "userland_store_volume_size_bytes 4.194304e+06" in metrics
                assert "userland_store_volume_free_bytes" in metrics
                assert f'userland_store_course_bytes{{namespace="{NS}"}}' in metrics
                alice, bob = members = volumes(tmp_path, "alice", "bob", folder="week1")
                (Path(alice.mount) / "week1" / "a.py").write_text("a\n")
                (Path(bob.mount) / "week1" / "big.bin").write_bytes(bytes(range(256)) * 20_000)  # 5 MB
                assert await work(url, job("collect", members, round=ROUND), tmp_path) == 0
                state = await operator.state(NS, ASG, UID)
                assert "jupyterlab/alice" in state["copies"][ROUND]
                assert "disk is full" in state["collectFailed"][ROUND]["jupyterlab/bob"]["reason"]
                with pytest.raises(StoreError) as refused:
                    await web.put_feedback(NS, ASG, UID, zeros_zip(tmp_path / "f.zip",
                                                                   {"alice/big.bin": 5_000_000}))
                assert refused.value.status == 507 and "disk is full" in refused.value.message
                assert (await operator.state(NS, ASG, UID))["feedback"] == {}
            finally:
                await operator.close()
                await web.close()


async def test_a_deleted_assignment_is_kept_for_the_retention_then_removed(tmp_path: Path) -> None:
    async with store_server(tmp_path / "store", retention=3600) as url:
        operator = StoreClient(url, STORE_SECRET, "operator")
        try:
            await operator.members(NS, ASG, UID, [("jupyterlab", "alice")])
            await collect(url, tmp_path, {"alice": "a\n"})
            folder = tmp_path / "store" / "assignments" / NS / ASG / UID
            # Deleted: retired, still there (and counted) until the retention is over.
            assert await operator.live(NS, {}) == {"retired": 1, "removed": 0}
            assert (folder / "retired").exists() and (folder / "copies").exists()
            # Listed again (an operator's cache that was behind): not retired any more.
            assert await operator.live(NS, {ASG: UID}) == {"retired": 0, "removed": 0}
            assert not (folder / "retired").exists()
        finally:
            await operator.close()
    async with store_server(tmp_path / "store", retention=0) as url:
        operator = StoreClient(url, STORE_SECRET, "operator")
        try:
            assert await operator.live(NS, {}) == {"retired": 1, "removed": 1}
            assert [p.name for p in folder.iterdir()] == ["retired"]  # a tombstone, nothing else
        finally:
            await operator.close()


async def test_the_store_fetches_only_under_its_allowed_prefixes_and_says_nothing_of_what_it_found(
        git_server: GitServer, store: str, operator: StoreClient, tmp_path: Path) -> None:
    """An instructor types addresses to learn what the store can reach: a closed port, a page
    that answers 404, one that answers 200 (the store's own /healthz, with a `?x=` suffix), an
    address outside the allowed prefixes. Outside the prefixes: refused before git runs, naming
    the setting. Inside: one reason and one sentence for all of them, whatever was found."""
    from aiohttp import web as aioweb
    from aiohttp.test_utils import TestServer
    hits: list[str] = []

    async def page(request: aioweb.Request) -> aioweb.Response:
        hits.append(request.path_qs)
        if request.path.startswith("/missing"):
            raise aioweb.HTTPNotFound()
        return aioweb.Response(text="ok\n")
    app = aioweb.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    probe = TestServer(app, host="127.0.0.1")
    await probe.start_server()
    try:
        probe_url = str(probe.make_url("")).rstrip("/")
        # Outside USERLAND_STORE_GIT_URLS (only the git server is allowed here): never fetched.
        with pytest.raises(FetchRefused) as refused:
            await operator.fetch(NS, ASG, UID, url=f"{probe_url}/found.git", ref="", sub_path="")
        assert refused.value.reason == "URLNotAllowed"
        assert "USERLAND_STORE_GIT_URLS" in refused.value.message and git_server.url in refused.value.message
        assert hits == []
        for sneaky in ("http://169.254.169.254/latest/meta-data", f"{git_server.url}.evil.example/x.git",
                       f"{git_server.url}/../../etc.git"):
            with pytest.raises(FetchRefused) as refused:
                await operator.fetch(NS, ASG, UID, url=sneaky, ref="", sub_path="")
            assert refused.value.reason == "URLNotAllowed", sneaky
        # Inside the prefixes (a store allowing the probe's server, a closed port and the other
        # store too): one reason and one sentence for all, whatever was there.
        closed = f"http://127.0.0.1:{free_port()}"
        targets = {"closed port": f"{closed}/x.git", "404": f"{probe_url}/missing.git",
                   "200": f"{probe_url}/found.git", "the store's own page": f"{store}/healthz?x=.git"}
        async with store_server(tmp_path / "open-store", git_urls=(
                f"{probe_url}/", f"{closed}/", f"{store}/")) as url:
            client = StoreClient(url, STORE_SECRET, "operator")
            try:
                said = {}
                for case, target in targets.items():
                    with pytest.raises(FetchRefused) as refused:
                        await client.fetch(NS, ASG, UID, url=target, ref="", sub_path="")
                    said[case] = (refused.value.reason, refused.value.message.replace(target, "URL"))
            finally:
                await client.close()
        assert len(set(said.values())) == 1, said
        reason, message = said["200"]
        assert reason == "Unreachable" and "not reachable or not a git repository" in message
        assert hits  # the probe was asked: the words are the same although it answered
    finally:
        await probe.close()


async def test_a_captured_signature_takes_neither_another_body_nor_a_second_use(
        store: str, operator: StoreClient, web: StoreClient) -> None:
    """Someone on the path between the web UI and the store copies a signed request (its header
    and body). Sent again, it is refused (each nonce once); its header with another body (other
    feedback, other students) is refused and nothing of that body is kept. Before, one captured
    header took two different feedback bodies within 120 s."""
    from aiohttp import web as aioweb
    from aiohttp.test_utils import TestServer
    captured: list[tuple[str, str, dict[str, str], bytes]] = []

    async def record(request: aioweb.Request) -> aioweb.Response:
        captured.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        return aioweb.json_response({"students": {}, "ignored": [], "members": 0})
    app = aioweb.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    recorder = TestServer(app, host="127.0.0.1")
    await recorder.start_server()
    web_spy = StoreClient(str(recorder.make_url("")).rstrip("/"), STORE_SECRET, "web")
    operator_spy = StoreClient(str(recorder.make_url("")).rstrip("/"), STORE_SECRET, "operator")
    try:
        await students(operator, "alice", "bob")
        honest = io.BytesIO()
        with zipfile.ZipFile(honest, "w") as archive:
            archive.writestr("alice/notes.md", "Well done.\n")
        await web_spy.put_feedback(NS, ASG, UID, honest.getvalue())
        await operator_spy.members(NS, ASG, UID, [("jupyterlab", "alice"), ("jupyterlab", "bob")])
    finally:
        await web_spy.close()
        await operator_spy.close()
        await recorder.close()
    (method, path, headers, body), (m_method, m_path, m_headers, m_body) = captured
    forged = io.BytesIO()
    with zipfile.ZipFile(forged, "w") as archive:
        archive.writestr("bob/notes.md", "Failed.\n")
    signature = {"X-Userland-Store-Auth": headers["X-Userland-Store-Auth"]}
    async with aiohttp.ClientSession() as http:
        # The captured header with another body: refused, nothing kept.
        async with http.request(method, store + path, data=forged.getvalue() + body[-64:],
                                headers=signature) as response:
            assert response.status == 403
        async with http.request(method, store + path, data=body, headers=signature) as response:
            assert response.status == 403  # its nonce is spent, even by a refused use
        # The operator's members, captured and sent with another list: refused.
        forged_members = json.dumps({"members": [["jupyterlab", "mallory"]]}).encode()
        async with http.request(m_method, store + m_path, data=forged_members, headers={
                "X-Userland-Store-Auth": m_headers["X-Userland-Store-Auth"],
                "Content-Type": "application/json"}) as response:
            assert response.status == 403
    # Nothing of the forged bodies was kept; a fresh, honest request works.
    assert (await operator.state(NS, ASG, UID))["feedback"] == {}
    answer = await web.put_feedback(NS, ASG, UID, honest.getvalue())
    assert answer["students"] == {"alice": {"files": 1, "bytes": 11}}
    assert m_body  # what the operator sent, for the record: the store never saw it


async def test_an_honest_signed_request_is_used_once(store: str, operator: StoreClient) -> None:
    from userland.platform.model import coursework
    path = f"/v1/a/{NS}/{ASG}/{UID}/members"
    body = json.dumps({"members": [["jupyterlab", "alice"]]}).encode()
    header = {coursework.SIGNATURE_HEADER: coursework.request_signature(
        STORE_SECRET, "operator", "PUT", path, body=hashlib.sha256(body).hexdigest()),
        "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.put(store + path, data=body, headers=header) as response:
            assert response.status == 200
        async with http.put(store + path, data=body, headers=header) as response:
            assert response.status == 403
