"""Grades back to a real LTI 1.3 platform (Assignment and Grade Services 2.0), and deep linking.

Real: lti1p3platform's AGS handlers and its deep-linking response check behind aiohttp
(tests/support/lti_services_platform.py), the scores read back from its gradebook and through
its results service. Bad input: the LMS down during passback (503s), a column deleted in the
LMS, a deep-linking answer signed with another key.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from tests.support.lti_services_platform import LtiServicesPlatform, new_tool_key
from tests.support.waiting import MUST_COMPLETE
from userland.platform.clients.lti_services_grades import LineItems, pass_back, post_score
from userland.platform.clients.lti_services_token import TokenClient
from userland.platform.model import lti_services_deeplink as dl
from userland.platform.model.lti_services_grades import RESULTS_TYPE, Grade, LineItemSpec, service_url
from userland.platform.model.lti_services_token import (
    SCOPE_LINEITEM,
    SCOPE_RESULT_READONLY,
    SCOPE_SCORE,
    ServiceCredentials,
)

TOOL_KEY = new_tool_key()
SPEC = LineItemSpec(resource_id="course-a/lab1", label="Lab 1", score_maximum=10, tag="userland")


@pytest.fixture
async def lms() -> AsyncIterator[LtiServicesPlatform]:
    async with LtiServicesPlatform(TOOL_KEY, page_size=2) as platform:
        yield platform


@pytest.fixture
async def tokens() -> AsyncIterator[TokenClient]:
    async with aiohttp.ClientSession() as session:
        yield TokenClient(session, timeout=MUST_COMPLETE)


def creds(lms: LtiServicesPlatform) -> ServiceCredentials:
    return ServiceCredentials(client_id=lms.client_id, token_url=lms.token_url, key=TOOL_KEY)


async def test_the_line_item_is_created_once_and_found_on_every_sync(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    items = LineItems(tokens)
    # Other tools' columns first, so ours is on a later page (the platform pages by 2).
    for n in range(3):
        await items.ensure(creds(lms), lms.lineitems_url("c1"), LineItemSpec(f"other/{n}", f"Quiz {n}", 5))
    # Five syncs at once, none finding the column yet: one creates it, the others find it.
    racing = await asyncio.gather(
        *(items.ensure(creds(lms), lms.lineitems_url("c1"), SPEC) for _ in range(5))
    )
    first = racing[0]
    assert {item.id for item in racing} == {first.id}
    again = await items.ensure(creds(lms), lms.lineitems_url("c1"), SPEC)
    assert again.id == first.id
    assert [body["resourceId"] for body in lms.created_line_items].count("course-a/lab1") == 1
    assert first.label == "Lab 1" and first.score_maximum == 10
    # A fresh process (no locks, no memory) still finds it instead of adding another column.
    assert (await LineItems(tokens).ensure(creds(lms), lms.lineitems_url("c1"), SPEC)).id == first.id
    assert len(lms.created_line_items) == 4
    assert {scope for _, path, scope in lms.service_requests if "lineitems" in path} == {SCOPE_LINEITEM}


async def test_a_score_is_posted_and_read_back_from_the_gradebook(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    item = await LineItems(tokens).ensure(creds(lms), lms.lineitems_url("c1"), SPEC)
    when = datetime.now(UTC)
    outcome = await post_score(tokens, creds(lms), item.id, "u1", Grade(8.5, 10, "Good work"), when)
    assert outcome.kind == "ok"
    held = lms.scores_of("c1", "course-a/lab1")["u1"]
    assert held == {
        "userId": "u1",
        "scoreGiven": 8.5,
        "scoreMaximum": 10,
        "comment": "Good work",
        "activityProgress": "Completed",
        "gradingProgress": "FullyGraded",
        "timestamp": when.isoformat(timespec="milliseconds"),
    }
    assert lms.service_requests[-1][2] == SCOPE_SCORE  # the score went with a token for scores alone
    response = await tokens.call(
        creds(lms), {SCOPE_RESULT_READONLY}, "GET", service_url(item.id, "results"), accept=RESULTS_TYPE
    )
    assert [(r["userId"], r["resultScore"]) for r in json.loads(response.body)] == [("u1", 8.5)]
    # An older timestamp is refused by the LMS, and read as such.
    stale = await post_score(tokens, creds(lms), item.id, "u1", Grade(1, 10), when - timedelta(hours=1))
    assert stale.kind == "refused" and "newer grade" in stale.reason
    assert lms.scores_of("c1", "course-a/lab1")["u1"]["scoreGiven"] == 8.5


async def test_passback_posts_each_grade_once_and_again_only_when_it_changes(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    item = await LineItems(tokens).ensure(creds(lms), lms.lineitems_url("c1"), SPEC)
    grades = {f"u{i}": Grade(i, 10) for i in range(6)}
    first = await pass_back(tokens, creds(lms), item.id, grades, {})
    assert (first.posted, first.sent) == (6, 6) and {s.state for s in first.states.values()} == {"sent"}
    for _ in range(3):  # every sync after: nothing to post
        again = await pass_back(tokens, creds(lms), item.id, grades, first.states)
        assert again.posted == 0
    regraded = await pass_back(
        tokens, creds(lms), item.id, {**grades, "u3": Grade(9, 10, "regraded")}, first.states
    )
    assert regraded.posted == 1 and lms.scores_of("c1", "course-a/lab1")["u3"]["scoreGiven"] == 9
    assert Counter(post["userId"] for post in lms.score_posts) == {**{f"u{i}": 1 for i in range(6)}, "u3": 2}
    assert tokens.token_requests == 2  # one token for line items, one for scores, reused throughout


async def test_the_lms_down_during_passback_loses_nothing_and_posts_nothing_twice(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    item = await LineItems(tokens).ensure(creds(lms), lms.lineitems_url("c1"), SPEC)
    grades = {f"u{i:02d}": Grade(i % 11, 10) for i in range(40)}
    lms.faults.ags_down = 10_000
    t0 = datetime.now(UTC)
    down = await pass_back(tokens, creds(lms), item.id, grades, {}, now=t0, concurrency=4)
    assert down.sent == 0 and down.posted <= 4 and down.deferred == 40 - down.posted  # it stopped asking
    assert {s.state for s in down.states.values()} == {"pending"}
    retrying = [s for s in down.states.values() if s.attempts]
    assert retrying and all(
        "HTTP 503" in s.reason and "Trying again in 30 seconds" in s.reason for s in retrying
    )
    assert all(s.next_at == t0 + timedelta(seconds=30) for s in down.states.values())
    # Before the backoff is over, nothing is tried.
    early = await pass_back(tokens, creds(lms), item.id, grades, down.states, now=t0 + timedelta(seconds=10))
    assert early.posted == 0
    lms.faults.ags_down = 0
    back = await pass_back(tokens, creds(lms), item.id, grades, down.states, now=t0 + timedelta(seconds=31))
    assert back.sent == 40 and {s.state for s in back.states.values()} == {"sent"}
    assert Counter(post["userId"] for post in lms.score_posts) == dict.fromkeys(grades, 1)
    gradebook = lms.scores_of("c1", "course-a/lab1")
    assert {user: score["scoreGiven"] for user, score in gradebook.items()} == {
        u: g.given for u, g in grades.items()
    }


async def test_a_column_deleted_in_the_lms_fails_with_the_reason(
    lms: LtiServicesPlatform, tokens: TokenClient
) -> None:
    item = await LineItems(tokens).ensure(creds(lms), lms.lineitems_url("c1"), SPEC)
    lms.line_items["c1"].clear()
    result = await pass_back(tokens, creds(lms), item.id, {"u1": Grade(5, 10)}, {})
    state = result.states["u1"]
    assert state.state == "failed" and "no longer has this gradebook column" in state.reason
    assert (await pass_back(tokens, creds(lms), item.id, {"u1": Grade(5, 10)}, result.states)).posted == 0


async def test_the_deep_linking_answer_is_taken_by_the_platform(lms: LtiServicesPlatform) -> None:
    settings = dl.Settings.parse(
        {
            "deep_link_return_url": lms.deep_link_return_url,
            "accept_types": ["ltiResourceLink"],
            "data": "platform-opaque-data",
        }
    )
    item = dl.resource_link(url="http://127.0.0.1:9/lti/launch", title="Lab 1", line_item=SPEC)

    def answer(key: object = TOOL_KEY, **changes: str) -> str:
        claims = {
            "client_id": lms.client_id,
            "platform_issuer": lms.issuer,
            "deployment_id": lms.deployment_id,
            **changes,
        }
        return dl.deep_linking_response(
            key,
            settings=settings,
            items=[item],
            now=datetime.now().timestamp(),  # type: ignore[arg-type]
            nonce="n-1",
            **claims,
        )

    async with aiohttp.ClientSession() as session:

        async def post(token: str) -> tuple[int, str]:
            async with session.post(lms.deep_link_return_url, data={"JWT": token}) as response:
                return response.status, await response.text()

        assert await post(answer()) == (200, "linked")
        assert lms.deep_links[0][0]["lineItem"] == {
            "scoreMaximum": 10,
            "label": "Lab 1",
            "resourceId": "course-a/lab1",
            "tag": "userland",
        }
        status, text = await post(answer(new_tool_key("tool-1")))  # same kid, another key
        assert status == 400 and "InvalidSignatureError" in text
        assert (await post(answer(platform_issuer="https://other.example")))[0] == 400
        assert (await post(answer(deployment_id="dep-unknown")))[0] == 400
    assert len(lms.deep_links) == 1
