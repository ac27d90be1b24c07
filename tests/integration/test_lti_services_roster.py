"""Reading rosters (Names and Role Provisioning Services 2.0) from a real LTI 1.3 platform.

Real: lti1p3platform's NRPS handler behind aiohttp (tests/support/lti_services_platform.py),
paging with `Link: rel="next"`, tokens from its token endpoint. Attacks and bad input: a page
loop, a next page on another site, 5,000 members, a roster over the bound, a student in two
linked LMS courses, a token endpoint answering garbage in the middle of a sync.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.lti_services_platform import LtiServicesPlatform, new_tool_key
from tests.support.waiting import MUST_COMPLETE
from userland.platform.clients.lti_services_roster import read_roster
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model.lti_services_roster import LIS, RosterError
from userland.platform.model.lti_services_roster_diff import Course, Policy, Student, plan_sync
from userland.platform.model.lti_services_token import SCOPE_MEMBERSHIP, ServiceCredentials

TOOL_KEY = new_tool_key()
LEARNER, INSTRUCTOR = f"{LIS}#Learner", f"{LIS}#Instructor"


def members(count: int, prefix: str = "s", role: str = LEARNER) -> list[dict[str, object]]:
    return [
        {"user_id": f"{prefix}{i}", "roles": [role], "name": f"Student {i}", "email": f"{prefix}{i}@uni.edu"}
        for i in range(count)
    ]


@pytest.fixture
async def lms() -> AsyncIterator[LtiServicesPlatform]:
    async with LtiServicesPlatform(TOOL_KEY, page_size=100) as platform:
        yield platform


@pytest.fixture
async def tokens() -> AsyncIterator[TokenClient]:
    async with aiohttp.ClientSession() as session:
        yield TokenClient(session, timeout=MUST_COMPLETE)


def creds(lms: LtiServicesPlatform) -> ServiceCredentials:
    return ServiceCredentials(client_id=lms.client_id, token_url=lms.token_url, key=TOOL_KEY)


async def read(lms: LtiServicesPlatform, tokens: TokenClient, context: str = "c1", **kw: int):  # type: ignore[no-untyped-def]
    return await read_roster(
        tokens, creds(lms), lms.memberships_url(context), issuer=lms.issuer, context=context, **kw
    )


async def test_every_page_is_read_with_one_token_of_the_membership_scope(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    lms.rosters["c1"] = members(995) + members(5, "t", INSTRUCTOR)
    roster = await read(lms, tokens)
    assert len(roster.members) == 1000 and roster.pages == 10 and roster.context_id == "c1"
    assert len({m.user_id for m in roster.members}) == 1000
    assert [form["scope"] for form in lms.token_requests] == [SCOPE_MEMBERSHIP]
    assert {scope for _, _, scope in lms.service_requests} == {SCOPE_MEMBERSHIP}
    plan = plan_sync([roster.members], Course(), Policy())
    assert len(plan.add) == 995 and len(plan.staff_set) == 5


async def test_five_thousand_members_are_read(lms: LtiServicesPlatform, tokens: TokenClient) -> None:
    lms.page_size = 500
    lms.rosters["big"] = members(5000)
    roster = await read(lms, tokens, "big")
    assert len(roster.members) == 5000 and roster.pages == 10
    assert len(plan_sync([roster.members], Course(), Policy()).add) == 5000


async def test_a_roster_past_the_bound_is_refused_whole_with_the_reason(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    lms.rosters["c1"] = members(1500)
    with pytest.raises(RosterError, match="more than 1,000 members") as err:
        await read(lms, tokens, max_members=1000)
    assert not err.value.retryable
    with pytest.raises(RosterError, match="more than 5 pages"):
        await read(lms, tokens, max_pages=5)


async def test_a_page_loop_stops_the_read_and_changes_nothing(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    lms.rosters["c1"] = members(250)
    lms.faults.page_loop = True  # page 3's next points back to page 1
    with pytest.raises(RosterError, match="go round in a loop") as err:
        await read(lms, tokens)
    assert "changed nothing" in str(err.value)
    assert len(lms.service_requests) == 3  # pages 1, 2, 3: page 1 is not asked again


async def test_a_next_page_on_another_site_gets_no_token(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    seen: list[str] = []

    async def thief(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"members": []})

    app = web.Application()
    app.router.add_get("/steal", thief)
    async with TestServer(app, host="localhost") as other:  # another host name: another site
        lms.rosters["c1"] = members(250)
        lms.faults.next_elsewhere = str(other.make_url("/steal"))
        with pytest.raises(RosterError, match="another site"):
            await read(lms, tokens)
    assert seen == []


async def test_a_token_endpoint_answering_garbage_mid_sync_is_a_clear_error(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    lms.rosters["c1"] = members(10)
    lms.faults.token_garbage = b"<html>maintenance</html>"
    with pytest.raises(RosterError, match="could not sign in to the LMS") as err:
        await read(lms, tokens)
    assert err.value.retryable


async def test_an_lms_that_refuses_says_what_to_check(lms: LtiServicesPlatform, tokens: TokenClient) -> None:
    with pytest.raises(RosterError, match=r"HTTP 404.*Launch Userland from the course again") as err:
        await read(lms, tokens, "deleted-course")
    assert not err.value.retryable
    # A token of another service's scope is refused by the roster service: the tool asks each
    # service with its own scope, and the platform holds it to that.
    lms.rosters["c1"] = members(1)
    response = await tokens.call(
        creds(lms),
        {"https://purl.imsglobal.org/spec/lti-ags/scope/score"},
        "GET",
        lms.memberships_url("c1"),
        accept="application/json",
    )
    assert response.status == 401


async def test_a_student_in_two_linked_lms_courses_gets_one_environment(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    lms.rosters["sec-a"] = [*members(3), {"user_id": "both", "roles": [LEARNER], "email": "both@uni.edu"}]
    lms.rosters["sec-b"] = [
        {"user_id": "both", "roles": [LEARNER], "email": "both@uni.edu", "status": "Inactive"},
        {"user_id": "b1", "roles": [LEARNER], "email": "b1@uni.edu"},
    ]
    a, b = await read(lms, tokens, "sec-a"), await read(lms, tokens, "sec-b")
    plan = plan_sync([a.members, b.members], Course(), Policy())
    assert sorted(s.login for s in plan.add) == ["b1", "both", "s0", "s1", "s2"]
    # Dropped from section B only: still in A, so kept.
    course = Course(
        students={"both": Student("both", person=(lms.issuer, "both"))},
        bindings={(lms.issuer, "both"): "both"},
    )
    assert plan_sync([a.members, b.members], course, Policy()).suspend == ()
    # Dropped from both: suspended.
    lms.rosters["sec-a"] = members(3)
    a = await read(lms, tokens, "sec-a")
    assert plan_sync([a.members, b.members], course, Policy(), datetime.now(UTC)).suspend == ("both",)


async def test_a_course_fed_by_two_lms_courses_plans_once_or_not_at_all(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    from userland.platform.clients.lti_services_sync import LinkedContext, plan_course_sync

    def link(context: str) -> LinkedContext:
        return LinkedContext(creds(lms), lms.issuer, context, lms.memberships_url(context))

    lms.rosters["sec-a"] = members(300, "a")
    lms.rosters["sec-b"] = [*members(300, "b"), *members(10, "a")]  # ten students in both sections
    lms.rosters["sec-b"].append({"user_id": "odd", "roles": "Learner"})  # roles not a list
    sync = await plan_course_sync(tokens, [link("sec-a"), link("sec-b")], Course(), Policy())
    assert len(sync.plan.add) == 600 and sync.plan.members == 600 and len(sync.rosters) == 2
    assert [(s.who, s.reason) for s in sync.plan.skipped] == [
        ("1 entry of LMS course sec-b", "Not added: the LMS listed them without an LMS user id or roles.")
    ]
    with pytest.raises(RosterError, match="more than 500 members together"):
        await plan_course_sync(tokens, [link("sec-a"), link("sec-b")], Course(), Policy(), max_members=500)
    # One linked roster unreadable: no plan at all (its students would be suspended).
    course = Course(
        students={"b0": Student("b0", person=(lms.issuer, "b0"))}, bindings={(lms.issuer, "b0"): "b0"}
    )
    with pytest.raises(RosterError, match=r"LMS course gone: .*HTTP 404"):
        await plan_course_sync(tokens, [link("sec-a"), link("gone")], course, Policy())
