"""LMS roster sync end to end: rosters read from a real LTI platform, applied to a real course.

Real: the LMS (lti1p3platform over aiohttp, tests/support/lti_services_platform.py) serving
NRPS pages with its own tokens; the control plane with deploy/rbac/ applied and the test's
namespace made a course from deploy/course/; the writes made with the web UI's own
ServiceAccount token, so Kubernetes RBAC is the fence. No operator runs: the sync only writes
Userlands (their Pods are the operator's part, tested in tests/operator/).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from tests.operator.support import template_body
from tests.support.lti_services_platform import LtiServicesPlatform, new_tool_key
from tests.support.waiting import MUST_COMPLETE
from tests.web.course_support import apply_rbac, make_course, web_client
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import EVENTS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.clients.lti_services_sync import LinkedContext, plan_course_sync
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model import naming
from userland.platform.model.lti_services_roster import LIS
from userland.platform.model.lti_services_roster_diff import Policy
from userland.platform.model.lti_services_token import ServiceCredentials
from userland.web import actions
from userland.web.lti_roster import apply_plan, read_course
from userland.web.rules.roster import RosterRow

TOOL_KEY = new_tool_key()
TEMPLATE = "lab"
LEARNER, INSTRUCTOR = f"{LIS}#Learner", f"{LIS}#Instructor"
DEFAULT = Policy()


def member(user: str, role: str = LEARNER, status: str = "Active") -> dict[str, object]:
    return {
        "user_id": user,
        "roles": [role],
        "status": status,
        "name": f"Student {user}",
        "email": f"{user}@uni.edu",
    }


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


@pytest.fixture
async def course(rbac: ControlPlane, namespace: str, kube: KubeClient) -> str:
    make_course(rbac, namespace)
    await kube.create(TEMPLATES, namespace, template_body(TEMPLATE))
    return namespace


@pytest.fixture
async def as_web(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with web_client(rbac, tmp_path) as client:
        yield client


@pytest.fixture
async def lms() -> AsyncIterator[LtiServicesPlatform]:
    async with LtiServicesPlatform(TOOL_KEY, page_size=4) as platform:
        yield platform


async def sync(
    lms: LtiServicesPlatform,
    kube: KubeClient,
    namespace: str,
    policy: Policy = DEFAULT,
    now: datetime | None = None,
) -> tuple[list[actions.RowResult], object]:
    async with aiohttp.ClientSession() as session:
        tokens = TokenClient(session, timeout=MUST_COMPLETE)
        link = LinkedContext(
            ServiceCredentials(lms.client_id, lms.token_url, TOOL_KEY),
            lms.issuer,
            "c1",
            lms.memberships_url("c1"),
        )
        course = await read_course(kube, namespace, TEMPLATE)
        planned = await plan_course_sync(tokens, [link], course, policy, now=now)
    return await apply_plan(kube, namespace, TEMPLATE, planned.plan, now=now), planned.plan


async def userlands(kube: KubeClient, namespace: str) -> dict[str, dict]:  # type: ignore[type-arg]
    return {u["spec"]["user"]: u for u in (await kube.list(USERLANDS, namespace))["items"]}


async def test_the_roster_sync_creates_suspends_restores_and_leaves_staffs_work_alone(
    lms: LtiServicesPlatform, course: str, kube: KubeClient, as_web: KubeClient
) -> None:
    lms.rosters["c1"] = [member(f"s{i}") for i in range(9)] + [member("prof", INSTRUCTOR)]
    # A student staff added by hand, before any sync.
    await actions.add_students(as_web, course, [TEMPLATE], [RosterRow(1, "handmade")], actor="teacher")

    results, plan = await sync(lms, as_web, course)
    assert sorted(r.login for r in results if r.outcome == "created") == [f"s{i}" for i in range(9)]
    found = await userlands(kube, course)
    annotations = found["s3"]["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_LTI_PERSON] == f'["{lms.issuer}","s3"]'
    assert annotations[naming.ANNOTATION_STUDENT_EMAIL] == "s3@uni.edu"
    assert "prof" not in found  # staff get no environment; the staff list is not changed yet

    # Nothing changed in the LMS: nothing written.
    again, plan = await sync(lms, as_web, course)
    assert again == []
    # Only the staff change is left in the plan: applying staff lists is not wired yet.
    assert plan.writes == 1 and plan.staff_set == (("prof", "instructor"),)  # type: ignore[attr-defined]

    # s1 dropped, s2 made inactive; staff suspend s3 by hand.
    lms.rosters["c1"] = [m for m in lms.rosters["c1"] if m["user_id"] != "s1"]
    lms.rosters["c1"][1]["status"] = "Inactive"  # s2
    await actions.set_suspended(as_web, course, [naming.userland_name(TEMPLATE, "s3")], True, actor="teacher")
    results, _ = await sync(lms, as_web, course)
    assert sorted((r.login, r.outcome) for r in results) == [("s1", "suspended"), ("s2", "suspended")]
    found = await userlands(kube, course)
    assert found["s1"]["spec"]["suspended"] is True
    assert found["s1"]["metadata"]["annotations"][naming.ANNOTATION_SUSPENDED_BY] == "lms"
    assert found["handmade"]["spec"].get("suspended") is not True  # added by hand: left alone
    events = (await kube.list(EVENTS, course))["items"]
    assert any(e["reason"] == "Suspended" and "LMS roster" in e["message"] for e in events)

    # s1 back in the LMS: resumed. s3, whom staff suspended, stays suspended.
    lms.rosters["c1"].append(member("s1"))
    results, _ = await sync(lms, as_web, course)
    assert [(r.login, r.outcome) for r in results] == [("s1", "resumed")]
    found = await userlands(kube, course)
    assert found["s1"]["spec"]["suspended"] is False
    assert naming.ANNOTATION_SUSPENDED_BY not in found["s1"]["metadata"].get("annotations", {})
    assert found["s3"]["spec"]["suspended"] is True


async def test_remove_after_n_days_removes_only_the_syncs_own_suspensions(
    lms: LtiServicesPlatform, course: str, as_web: KubeClient, kube: KubeClient
) -> None:
    lms.rosters["c1"] = [member("a"), member("b")]
    policy = Policy(dropped="remove", remove_after_days=7)
    t0 = datetime.now(UTC)
    await sync(lms, as_web, course, policy, now=t0)
    lms.rosters["c1"] = [member("b")]
    results, _ = await sync(lms, as_web, course, policy, now=t0)
    assert [(r.login, r.outcome) for r in results] == [("a", "suspended")]
    results, _ = await sync(lms, as_web, course, policy, now=t0 + timedelta(days=3))
    assert results == []
    results, _ = await sync(lms, as_web, course, policy, now=t0 + timedelta(days=8))
    assert [(r.login, r.outcome) for r in results] == [("a", "removed")]
    assert set(await userlands(kube, course)) == {"b"}
