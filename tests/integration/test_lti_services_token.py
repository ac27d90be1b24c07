"""The tool's client-credentials token against a real LTI 1.3 platform (lti1p3platform over HTTP).

Real: the platform's token endpoint (tests/support/lti_services_platform.py) fetches the tool's
JWKS over HTTP and checks the RS256 client assertion; the tool's key and the platform's are
real 2048-bit RSA keys. Faults are the platform's own switches (slow, garbage, a redirect).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.support.lti_services_platform import LtiServicesPlatform, new_tool_key
from tests.support.waiting import MUST_COMPLETE, eventually
from userland.platform.clients.lti_services_token import ServiceError, TokenClient
from userland.platform.model.lti_services_keys import ToolKey
from userland.platform.model.lti_services_roster import MEDIA_TYPE
from userland.platform.model.lti_services_token import (
    SCOPE_LINEITEM,
    SCOPE_MEMBERSHIP,
    SCOPE_SCORE,
    ServiceCredentials,
    TokenError,
)

TOOL_KEY = new_tool_key()


@pytest.fixture
async def lms() -> AsyncIterator[LtiServicesPlatform]:
    async with LtiServicesPlatform(TOOL_KEY) as platform:
        platform.rosters["c1"] = [{"user_id": "u1", "roles": ["Learner"]}]
        yield platform


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def creds(
    lms: LtiServicesPlatform, key: ToolKey = TOOL_KEY, client_id: str = "", url: str = ""
) -> ServiceCredentials:
    return ServiceCredentials(client_id=client_id or lms.client_id, token_url=url or lms.token_url, key=key)


async def test_a_token_is_asked_for_exactly_the_scopes_needed_and_reused(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    tokens = TokenClient(session, timeout=MUST_COMPLETE)
    first = await tokens.token(creds(lms), {SCOPE_MEMBERSHIP})
    assert first.value in lms.tokens_issued
    assert (await tokens.token(creds(lms), {SCOPE_MEMBERSHIP})) is first
    # Ten callers at once share one request.
    await asyncio.gather(*(tokens.token(creds(lms), {SCOPE_SCORE}) for _ in range(10)))
    assert [form["scope"] for form in lms.token_requests] == [SCOPE_MEMBERSHIP, SCOPE_SCORE]
    assert tokens.token_requests == 2
    # A call with the token reaches the service, which checks it and its scope.
    response = await tokens.call(
        creds(lms), {SCOPE_MEMBERSHIP}, "GET", lms.memberships_url("c1"), accept=MEDIA_TYPE
    )
    assert response.status == 200 and lms.service_requests[-1][2] == SCOPE_MEMBERSHIP
    assert tokens.token_requests == 2


async def test_a_token_is_asked_again_once_it_is_about_to_expire(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    now = [1000.0]  # the token client's clock for a token's life (monotonic by default)
    tokens = TokenClient(session, timeout=MUST_COMPLETE, clock=lambda: now[0])
    first = await tokens.token(creds(lms), {SCOPE_SCORE})
    now[0] += 3600 - 61  # the platform's tokens live an hour; kept until a minute before
    assert await tokens.token(creds(lms), {SCOPE_SCORE}) is first
    now[0] += 2
    second = await tokens.token(creds(lms), {SCOPE_SCORE})
    assert second is not first and len(lms.token_requests) == 2
    # Each assertion had its own jti (the platform refuses a reused one).
    assert len(lms.jtis) == 2


async def test_a_token_the_platform_stops_accepting_is_replaced_once(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    tokens = TokenClient(session, timeout=MUST_COMPLETE)
    await tokens.token(creds(lms), {SCOPE_MEMBERSHIP})
    lms.rotate_platform_key()  # every token issued so far is now refused (401)
    response = await tokens.call(
        creds(lms), {SCOPE_MEMBERSHIP}, "GET", lms.memberships_url("c1"), accept=MEDIA_TYPE
    )
    assert response.status == 200 and tokens.token_requests == 2


async def test_a_slow_token_endpoint_gives_a_clear_error_in_bounded_time(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    lms.faults.token_delay = 30
    tokens = TokenClient(session, timeout=0.5)
    with pytest.raises(TokenError) as err:
        await tokens.token(creds(lms), {SCOPE_SCORE})
    assert "did not answer within 0.5 seconds" in str(err.value) and err.value.retryable
    lms.faults.token_delay = 0
    recovered = TokenClient(session, timeout=MUST_COMPLETE)  # a generous timeout: the LMS is busy too
    assert (await recovered.token(creds(lms), {SCOPE_SCORE})).value  # and it recovers


async def test_a_hung_token_endpoint_costs_one_timeout_for_all_its_callers(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    lms.faults.token_delay = 60
    tokens = TokenClient(session, timeout=1)
    results = await asyncio.gather(
        *(tokens.token(creds(lms), {SCOPE_SCORE}) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, TokenError) and "did not answer within 1 seconds" in str(r) for r in results)
    assert len(lms.token_requests) == 1  # five callers, one request, one timeout


async def test_a_hung_token_endpoint_holds_up_no_other_registration(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    # The timeout is a safety net far above what the other token takes, even on a busy machine.
    tokens = TokenClient(session, timeout=MUST_COMPLETE)
    async with LtiServicesPlatform(TOOL_KEY) as other:
        lms.faults.token_delay = MUST_COMPLETE * 2
        waiting = [asyncio.ensure_future(tokens.token(creds(lms), {SCOPE_SCORE})) for _ in range(5)]
        await eventually(lambda: lms.token_requests)  # the hung request is under way
        assert (await tokens.token(creds(other), {SCOPE_SCORE})).value in other.tokens_issued
        assert not any(task.done() for task in waiting)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


@pytest.mark.parametrize(
    "garbage,words",
    [
        (b"<html><body>Please sign in</body></html>", "not a token (not a JSON object)"),
        (b'{"access_token": 5}', "without a usable access_token"),
        (b"x" * 2_000_000, "more than 65536 bytes"),
    ],
)
async def test_a_garbage_token_endpoint_gives_a_clear_error(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession, garbage: bytes, words: str
) -> None:
    lms.faults.token_garbage = garbage
    with pytest.raises(TokenError, match=re.escape(words)):
        await TokenClient(session, timeout=MUST_COMPLETE).token(creds(lms), {SCOPE_SCORE})


async def test_the_platform_refuses_a_tool_with_the_wrong_key_or_client_id(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    tokens = TokenClient(session, timeout=MUST_COMPLETE)
    with pytest.raises(
        TokenError, match="refused Userland's credentials with HTTP 401: invalid_client"
    ) as err:
        await tokens.token(creds(lms, key=new_tool_key("tool-1")), {SCOPE_SCORE})  # same kid, other key
    assert not err.value.retryable
    with pytest.raises(TokenError, match="invalid_client"):
        await tokens.token(creds(lms, client_id="someone-else"), {SCOPE_SCORE})
    assert lms.tokens_issued == []


async def test_credentials_go_only_to_the_registrations_token_url(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession
) -> None:
    with pytest.raises(TokenError, match="redirect"):
        await TokenClient(session, timeout=MUST_COMPLETE).token(
            creds(lms, url=f"{lms.url}/moved/token"), {SCOPE_SCORE}
        )
    assert lms.token_requests == []  # the redirect was not followed: /token never saw the assertion
    with pytest.raises(ValueError, match="must use https"):
        ServiceCredentials(client_id="c", token_url="http://lms.example/token", key=TOOL_KEY)
    tokens = TokenClient(session, timeout=MUST_COMPLETE)
    with pytest.raises(ServiceError, match="must use https"):
        await tokens.call(creds(lms), {SCOPE_SCORE}, "GET", "http://elsewhere.example/x", accept="*/*")
    assert tokens.token_requests == 0


async def test_no_token_or_assertion_is_ever_logged(
    lms: LtiServicesPlatform, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = TokenClient(session, timeout=MUST_COMPLETE)
    await tokens.call(
        creds(lms), {SCOPE_MEMBERSHIP, SCOPE_LINEITEM}, "GET", lms.memberships_url("c1"), accept=MEDIA_TYPE
    )
    lms.faults.token_garbage = b"{}"
    with pytest.raises(TokenError):
        await tokens.token(creds(lms), {SCOPE_SCORE})
    secrets = [*lms.tokens_issued, *(form["client_assertion"] for form in lms.token_requests)]
    assert secrets and any("LTI token obtained" in r.getMessage() for r in caplog.records)
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for secret in secrets:
        assert secret not in logged and secret[-20:] not in logged
