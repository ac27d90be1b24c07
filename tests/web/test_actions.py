"""The web UI's actions (web/actions.py) on a real control plane, as the web UI's ServiceAccount.

Real: the control plane with deploy/rbac/ applied; each test's namespace made a course from
deploy/course/ (RoleBinding, label, staff, the VS Code Template); requests with the web UI's
own token, so Kubernetes RBAC is the fence these tests meet. No operator runs: the actions
only write Userlands (the operator's part is tested in tests/operator/).
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.operator.support import template_body
from tests.web.course_support import apply_rbac, kubectl, make_course, web_client
from tests.web.support import set_phase
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import EVENTS, TEMPLATES, USERLANDS, KubeClient, NotFound
from userland.platform.clients.kubeconfig import ClusterAccess
from userland.platform.model import naming
from userland.platform.model.objects import rfc3339
from userland.web import actions
from userland.web.actions import RowResult, summarize
from userland.web.rules.roster import RosterRow, parse_csv, parse_logins

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


@pytest.fixture
def course(rbac: ControlPlane, namespace: str) -> str:
    make_course(rbac, namespace)
    return namespace


@pytest.fixture
async def as_web(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with web_client(rbac, tmp_path) as client:
        yield client


@pytest.fixture
async def nowhere() -> AsyncIterator[KubeClient]:
    """A client whose every request fails as unreachable: proves a result came without a request."""

    async def no_token() -> str | None:
        return None

    access = ClusterAccess(host="http://127.0.0.1:1", ssl_context=ssl.create_default_context(),
                           authorization=no_token)
    async with KubeClient(access) as client:
        yield client


def writes(client: KubeClient) -> int:
    return sum(client.writes.values())


async def userlands(kube: KubeClient, namespace: str) -> dict[str, JSON]:
    return {u["metadata"]["name"]: u for u in (await kube.list(USERLANDS, namespace))["items"]}


async def web_events(kube: KubeClient, namespace: str) -> list[tuple[str, str, str]]:
    items = (await kube.list(EVENTS, namespace))["items"]
    return sorted((e["involvedObject"]["name"], e["reason"],
                   e["metadata"]["annotations"]["userland.dev/actor"])
                  for e in items if e.get("reportingComponent") == "userland-web")


def outcomes(results: list[RowResult]) -> list[tuple[str, str, str]]:
    return [(r.login, r.template, r.outcome) for r in results]


# --- add ------------------------------------------------------------------------------------------------


async def test_add_students_creates_one_userland_per_row_and_template(
    as_web: KubeClient, kube: KubeClient, course: str
) -> None:
    await kube.create(TEMPLATES, course, template_body("db"))
    rows = parse_csv(b"login,name,email,section\n"
                     b"Alice,Alice Adams,alice@uni.edu,L1\n"
                     b"bob,,,\n"
                     b"not_a_login,Mallory,,\n"
                     b"ALICE,Alice again,,\n")
    results = await actions.add_students(as_web, course, ["vscode", "db"], rows, actor="teacher")
    assert outcomes(results) == [
        ("alice", "vscode", "created"), ("alice", "db", "created"),
        ("bob", "vscode", "created"), ("bob", "db", "created"),
        ("not_a_login", "vscode", "invalid"), ("not_a_login", "db", "invalid"),
        ("alice", "vscode", "invalid"), ("alice", "db", "invalid"),
    ]
    assert results[4].detail.startswith("not a GitHub login") and results[6].detail == "duplicate of line 2"
    assert as_web.writes[("create", "Userland")] == 4  # invalid rows cost no request
    assert summarize(results) == "4 created, 4 invalid"
    made = await userlands(kube, course)
    assert sorted(made) == ["db-alice", "db-bob", "vscode-alice", "vscode-bob"]
    alice = made["vscode-alice"]
    assert alice["spec"] == {"user": "alice", "template": "vscode", "suspended": False}  # CRD default
    assert alice["metadata"]["labels"] == {"userland.dev/user": "alice", "userland.dev/template": "vscode"}
    assert alice["metadata"]["annotations"] == {
        "userland.dev/name": "Alice Adams", "userland.dev/email": "alice@uni.edu",
        "userland.dev/section": "L1", "userland.dev/added-by": "teacher",
    }
    assert made["vscode-bob"]["metadata"]["annotations"] == {"userland.dev/added-by": "teacher"}


async def test_importing_the_same_roster_again_writes_nothing(
    as_web: KubeClient, course: str
) -> None:
    rows = parse_logins("alice bob carol")
    first = await actions.add_students(as_web, course, ["vscode"], rows, actor="teacher")
    assert summarize(first) == "3 created"
    before = writes(as_web)
    again = await actions.add_students(as_web, course, ["vscode"], rows, actor="ta1")
    assert outcomes(again) == [(login, "vscode", "exists") for login in ("alice", "bob", "carol")]
    assert summarize(again) == "3 already there"
    assert writes(as_web) == before


async def test_new_details_for_an_existing_student_are_updated_not_duplicated(
    as_web: KubeClient, kube: KubeClient, course: str
) -> None:
    await actions.add_students(as_web, course, ["vscode"], parse_csv(b"login,name\nalice,Alice\nbob,Bob\n"),
                               actor="teacher")
    before = writes(as_web)
    results = await actions.add_students(
        as_web, course, ["vscode"], parse_csv(b"login,name,email\nalice,Alice Adams,a@uni.edu\nbob,Bob,\n"),
        actor="other")
    assert [(r.outcome, r.detail) for r in results] == [("exists", "already there; updated name, email"),
                                                        ("exists", "")]
    assert writes(as_web) == before + 1
    annotations = (await kube.get(USERLANDS, course, "vscode-alice"))["metadata"]["annotations"]
    assert annotations["userland.dev/name"] == "Alice Adams"
    assert annotations["userland.dev/added-by"] == "teacher"  # who added them first stays


async def test_a_student_given_the_template_under_another_name_gets_no_duplicate(
    as_web: KubeClient, kube: KubeClient, course: str
) -> None:
    await kube.create(USERLANDS, course, {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
                                          "metadata": {"name": "alices-ide"},
                                          "spec": {"user": "Alice", "template": "vscode"}})
    (result,) = await actions.add_students(as_web, course, ["vscode"], parse_logins("alice"), actor="teacher")
    assert (result.outcome, result.detail) == ("exists", "already there as alices-ide")
    assert sorted(await userlands(kube, course)) == ["alices-ide"]


async def test_a_name_taken_by_another_pair_is_reported(as_web: KubeClient, kube: KubeClient,
                                                        course: str) -> None:
    # `vscode` + `a-b` and `vscode-a` + `b` share the name vscode-a-b.
    await kube.create(TEMPLATES, course, template_body("vscode-a"))
    await actions.add_students(as_web, course, ["vscode"], parse_logins("a-b"), actor="teacher")
    (result,) = await actions.add_students(as_web, course, ["vscode-a"], parse_logins("b"), actor="teacher")
    assert (result.outcome, result.detail) == ("error", "the name vscode-a-b is taken by a-b's vscode")
    assert (await kube.get(USERLANDS, course, "vscode-a-b"))["spec"]["user"] == "a-b"


async def test_two_imports_at_once_create_each_student_once(as_web: KubeClient, kube: KubeClient,
                                                            course: str) -> None:
    rows = parse_logins(" ".join(f"student{i}" for i in range(30)))
    first, second = await asyncio.gather(
        actions.add_students(as_web, course, ["vscode"], rows, actor="teacher"),
        actions.add_students(as_web, course, ["vscode"], rows, actor="ta1"),
    )
    for a, b in zip(first, second, strict=True):
        # Both read an empty course; the API server's 409 tells the loser, which re-reads.
        assert sorted([a.outcome, b.outcome]) == ["created", "exists"], (a, b)
    assert len(await userlands(kube, course)) == 30


async def test_an_unknown_template_is_invalid_and_writes_nothing(as_web: KubeClient, course: str) -> None:
    results = await actions.add_students(as_web, course, ["nope", "../templates/vscode"],
                                         parse_logins("alice"), actor="teacher")
    assert [(r.outcome, r.detail) for r in results] == [
        ("invalid", "there is no Template 'nope' in this course"),
        ("invalid", "there is no Template '../templates/vscode' in this course"),
    ]
    assert writes(as_web) == 0


async def test_no_template_chosen(as_web: KubeClient, course: str) -> None:
    results = await actions.add_students(as_web, course, [], parse_logins("alice x--y"), actor="teacher")
    assert [(r.outcome, r.detail[:19]) for r in results] == [("invalid", "choose a Template"),
                                                             ("invalid", "not a GitHub login:")]


@pytest.fixture
def plain(rbac: ControlPlane) -> Iterator[str]:
    """A namespace that is not a course, with a Template in it (the web UI must not be able to use it)."""
    name = f"plain-{uuid.uuid4().hex[:8]}"
    assert kubectl(rbac, "create", "namespace", name).returncode == 0
    yield name
    kubectl(rbac, "delete", "namespace", name, "--wait=false")


async def test_outside_a_course_kubernetes_refuses_and_every_row_says_so(
    as_web: KubeClient, kube: KubeClient, plain: str
) -> None:
    await kube.create(TEMPLATES, plain, template_body("vscode"))
    for namespace in (plain, "userland-system", "kube-system", "default"):
        results = await actions.add_students(as_web, namespace, ["vscode"], parse_logins("mallory eve"),
                                             actor="teacher")
        assert [(r.outcome, r.detail) for r in results] == [("not_allowed", actions.NOT_A_COURSE)] * 2
        for action in (actions.restart(as_web, namespace, ["vscode-mallory"], actor="teacher"),
                       actions.remove_students(as_web, namespace, ["vscode-mallory"], actor="teacher"),
                       actions.set_suspended(as_web, namespace, ["vscode-mallory"], True, actor="teacher"),
                       actions.start(as_web, namespace, ["vscode-mallory"], actor="teacher")):
            assert outcomes(await action) == [("vscode-mallory", "", "not_allowed")]
    assert (await kube.list(USERLANDS, plain))["items"] == []


async def test_bad_names_are_answered_without_a_request(nowhere: KubeClient) -> None:
    rows = [RosterRow(1, "x--y"), RosterRow(2, "../../api", problem="not a GitHub login: '../../api'")]
    added = await actions.add_students(nowhere, "course", ["vscode"], rows, actor="teacher")
    assert [r.outcome for r in added] == ["invalid", "invalid"]
    added = await actions.add_students(nowhere, "../secrets", ["vscode"], parse_logins("alice"), actor="t")
    assert outcomes(added) == [("alice", "vscode", "not_allowed")]
    bad_names = ["../../../api/v1/secrets", "vscode-alice/status", "", "UPPER", "a" * 64, "x?watch=1"]
    for results in (await actions.remove_students(nowhere, "course", bad_names, actor="t"),
                    await actions.restart(nowhere, "course", bad_names, actor="t"),
                    await actions.start(nowhere, "course", bad_names, actor="t")):
        assert [r.outcome for r in results] == ["invalid"] * len(bad_names)
    (result,) = await actions.restart(nowhere, "bad/namespace", ["vscode-alice"], actor="t")
    assert result.outcome == "not_allowed"
    # ... while a good name does reach the (absent) API server: the client really is unusable.
    (result,) = await actions.restart(nowhere, "course", ["vscode-alice"], actor="t")
    assert result.outcome == "error"


# --- actions on existing environments ------------------------------------------------------------------


@pytest.fixture
async def students(as_web: KubeClient, course: str) -> list[str]:
    results = await actions.add_students(as_web, course, ["vscode"], parse_logins("alice bob carol"),
                                         actor="teacher")
    assert all(r.outcome == "created" for r in results)
    return ["vscode-alice", "vscode-bob", "vscode-carol"]


async def test_restart_stamps_the_userland_and_records_an_event(
    as_web: KubeClient, kube: KubeClient, course: str, students: list[str]
) -> None:
    when = datetime(2026, 11, 23, 18, 30, 5, 999, tzinfo=timezone(timedelta(hours=9)))
    results = await actions.restart(as_web, course, ["vscode-alice", "vscode-bob", "vscode-nobody"],
                                    actor="ta1", now=when)
    assert outcomes(results) == [("alice", "vscode", "restarted"), ("bob", "vscode", "restarted"),
                                 ("vscode-nobody", "", "missing")]
    assert summarize(results) == "2 restarted, 1 not found"
    made = await userlands(kube, course)
    for name in ("vscode-alice", "vscode-bob"):
        assert made[name]["metadata"]["annotations"]["userland.dev/restartedAt"] == "2026-11-23T09:30:05Z"
    assert "userland.dev/restartedAt" not in made["vscode-carol"]["metadata"]["annotations"]
    assert await web_events(kube, course) == [("vscode-alice", "Restarted", "ta1"),
                                              ("vscode-bob", "Restarted", "ta1")]


async def test_restart_of_a_suspended_environment_says_what_happens(
    as_web: KubeClient, course: str, students: list[str]
) -> None:
    await actions.set_suspended(as_web, course, ["vscode-alice"], True, actor="teacher")
    (result,) = await actions.restart(as_web, course, ["vscode-alice"], actor="teacher")
    assert (result.outcome, result.detail) == ("restarted", "it is suspended: it starts fresh when resumed")


async def test_suspend_resume_and_unchanged_without_a_write(
    as_web: KubeClient, kube: KubeClient, course: str, students: list[str]
) -> None:
    results = await actions.set_suspended(as_web, course, ["vscode-alice", "vscode-bob"], True,
                                          actor="teacher")
    assert outcomes(results) == [("alice", "vscode", "suspended"), ("bob", "vscode", "suspended")]
    before = writes(as_web)
    again = await actions.set_suspended(as_web, course, ["vscode-alice", "vscode-carol"], True,
                                        actor="teacher")
    assert [(r.outcome, r.detail) for r in again] == [("unchanged", "already suspended"), ("suspended", "")]
    assert writes(as_web) == before + 2  # carol's patch and its Event; nothing for alice
    made = await userlands(kube, course)
    assert [made[n]["spec"].get("suspended") for n in students] == [True, True, True]
    resumed = await actions.set_suspended(as_web, course, ["vscode-bob"], False, actor="teacher")
    assert outcomes(resumed) == [("bob", "vscode", "resumed")]
    assert (await kube.get(USERLANDS, course, "vscode-bob"))["spec"]["suspended"] is False
    reasons = [r for _, r, _ in await web_events(kube, course)]
    assert sorted(reasons) == ["Resumed", "Suspended", "Suspended", "Suspended"]


async def test_start_before_a_lecture_resumes_the_suspended_only_when_chosen(
    as_web: KubeClient, kube: KubeClient, course: str, students: list[str]
) -> None:
    """Staff suspended alice's and carol's on purpose: "start" leaves them suspended unless an
    instructor chose to resume them (issue 16); an assistant's start never resumes (issue 17)."""
    await actions.set_suspended(as_web, course, ["vscode-alice", "vscode-carol"], True, actor="teacher")
    await set_phase(kube, course, "vscode-bob", "Ready")
    for resume, may_resume in ((False, True), (True, False)):
        results = await actions.start(as_web, course, [*students, "vscode-ghost"], actor="ta1",
                                      resume_suspended=resume, may_resume=may_resume)
        left = actions.LEFT_SUSPENDED_CHOSEN if may_resume else actions.LEFT_SUSPENDED_ASSISTANT
        assert [(r.login, r.outcome, r.detail) for r in results] == [
            ("alice", "left_suspended", left), ("bob", "unchanged", "already running"),
            ("carol", "left_suspended", left),
            ("vscode-ghost", "missing", "there is no such environment (removed already?)"),
        ]
        assert summarize(results) == "1 unchanged, 2 left suspended, 1 not found"
    made = await userlands(kube, course)
    assert all(made[n]["spec"].get("suspended") is True for n in ("vscode-alice", "vscode-carol"))
    results = await actions.start(as_web, course, students, actor="teacher", resume_suspended=True,
                                  may_resume=True)
    assert [(r.login, r.outcome) for r in results] == [("alice", "started"), ("bob", "unchanged"),
                                                        ("carol", "started")]
    made = await userlands(kube, course)
    assert all(made[n]["spec"].get("suspended") is False for n in ("vscode-alice", "vscode-carol"))
    assert [e for e in await web_events(kube, course) if e[1] == "Started"] == [
        ("vscode-alice", "Started", "teacher"), ("vscode-carol", "Started", "teacher")]


async def test_start_wakes_a_sleeping_environment_naming_who_started_it(
    as_web: KubeClient, kube: KubeClient, course: str, students: list[str]
) -> None:
    await set_phase(kube, course, "vscode-alice", "Ready")
    await set_phase(kube, course, "vscode-bob", "Idle")
    when = datetime(2026, 11, 23, 9, 0, 5, tzinfo=UTC)
    results = await actions.start(as_web, course, ["vscode-alice", "vscode-bob"], actor="ta1", now=when)
    assert [(r.login, r.outcome, r.detail) for r in results] == [
        ("alice", "unchanged", "already running"), ("bob", "started", "it was asleep")]
    made = await userlands(kube, course)
    # The operator wakes it and names its real cause (staff, not "its student opened it").
    annotations = made["vscode-bob"]["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_STARTED_AT] == "2026-11-23T09:00:05Z"
    assert annotations[naming.ANNOTATION_STARTED_BY] == "ta1"
    assert naming.ANNOTATION_LAST_ACTIVITY not in annotations
    assert naming.ANNOTATION_STARTED_AT not in (made["vscode-alice"]["metadata"].get("annotations") or {})
    assert made["vscode-bob"]["spec"].get("suspended") is not True


@pytest.mark.parametrize(("status", "outcome", "words"), [
    ({}, "unchanged", "waiting to be set up"),
    ({"phase": "Starting", "reason": "Starting"}, "unchanged", "already starting"),
    ({"phase": "Starting", "reason": "ImagePullBackOff"}, "unchanged",
     "already starting, but the image cannot be downloaded"),
    ({"phase": "Pending", "reason": "TemplateNotFound"}, "cannot_start",
     "it cannot start: its template does not exist yet"),
    ({"phase": "Failed", "reason": "ProgramNotInstalled"}, "cannot_start",
     "it cannot start: its program is not installed on this machine"),
    ({"phase": "Failed", "reason": "StartTimeout"}, "cannot_start",
     "it cannot start: it did not become ready in time"),
    ({"phase": "Failed", "reason": "SomethingNew"}, "cannot_start", "it cannot start: it cannot start"),
    ({"phase": "Ready", "reason": "Available"}, "unchanged", "already running"),
    ({"phase": "Idle", "reason": "Asleep"}, "started", "it was asleep"),
])
def test_start_decision_says_what_is_true(status: dict[str, str], outcome: str, words: str) -> None:
    obj: dict[str, object] = {"metadata": {"name": "x"}, "spec": {"user": "a", "template": "t"}}
    if status:
        obj["status"] = {"phase": status["phase"], "conditions": [{"type": "Ready", "status": "False",
                                                                   "reason": status["reason"]}]}
    got = actions.start_decision(obj, resume_suspended=False, may_resume=True)
    assert got[:2] == (outcome, words) and got[2] == (outcome == "started")


async def test_remove_students(as_web: KubeClient, kube: KubeClient, course: str,
                               students: list[str]) -> None:
    results = await actions.remove_students(as_web, course, ["vscode-alice", "vscode-alice", "vscode-zed"],
                                            actor="teacher")
    got = sorted(outcomes(results))
    # The same name twice: one delete wins, the other finds it gone.
    assert got == [("alice", "vscode", "removed"), ("vscode-alice", "", "missing"),
                   ("vscode-zed", "", "missing")]
    with pytest.raises(NotFound):
        await kube.get(USERLANDS, course, "vscode-alice")
    assert sorted(await userlands(kube, course)) == ["vscode-bob", "vscode-carol"]
    assert await web_events(kube, course) == [("vscode-alice", "Removed", "teacher")]


async def test_many_rows_keep_their_order_at_any_concurrency(as_web: KubeClient, course: str) -> None:
    rows = parse_logins(" ".join(f"s{i:03d}" for i in range(120)))
    results = await actions.add_students(as_web, course, ["vscode"], rows, actor="teacher", concurrency=7)
    assert [r.login for r in results] == [r.login for r in rows]
    assert {r.outcome for r in results} == {"created"}
    names = [f"vscode-s{i:03d}" for i in range(120)]
    restarted = await actions.restart(as_web, course, names, actor="teacher", concurrency=1)
    assert [r.login for r in restarted] == [r.login for r in rows]


# --- pure parts ------------------------------------------------------------------------------------


def test_summarize() -> None:
    def r(outcome: actions.Outcome) -> RowResult:
        return RowResult("a", "t", outcome)

    assert summarize([]) == "nothing to do"
    assert summarize([r("invalid"), r("created"), r("exists"), r("created"), r("invalid"), r("created")]) == (
        "3 created, 1 already there, 2 invalid")
    assert summarize([r("error"), r("not_allowed"), r("missing"), r("removed")]) == (
        "1 removed, 1 not found, 1 not allowed, 1 failed")
    assert [o for o in actions.Outcome.__args__ if RowResult("a", "t", o).ok] == [  # type: ignore[attr-defined]
        "created", "exists", "removed", "restarted", "suspended", "resumed", "started", "unchanged",
        "left_suspended"]


def test_restart_stamp_is_rfc3339_in_utc() -> None:
    """A restart is stamped as `kubectl rollout restart` stamps it (platform/model/objects.rfc3339)."""
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, 678)) == "2026-01-02T03:04:05Z"  # naive: UTC
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5)))) == (
        "2026-01-02T08:04:05Z")
    now = rfc3339()
    assert abs(datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) - datetime.now(UTC)) < (
        timedelta(minutes=1))


def test_desired_userland_names_labels_and_only_given_details() -> None:
    body = actions.desired_userland("vscode", RosterRow(2, "alice", section="L1"), actor="teacher")
    assert body["metadata"] == {
        "name": "vscode-alice",
        "labels": {"userland.dev/user": "alice", "userland.dev/template": "vscode"},
        "annotations": {"userland.dev/added-by": "teacher", "userland.dev/section": "L1"},
    }
    long = actions.desired_userland("a-very-long-template-name-for-a-course", RosterRow(1, "b" * 39),
                                    actor="t")
    assert len(long["metadata"]["name"]) <= 63
