"""LTI Dynamic Registration (`/lti/register`) through the real gateway: the LMS (the test
platform's configuration and registration endpoint, real HTTP) is registered by a signed-in
Userland admin, the answer becomes an LtiRegistration on the real API server, which the gateway
then checks; nobody else can register an LMS. Real Redis holds the admin's session."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
import redis.asyncio

from tests.support import MUST_COMPLETE, eventually
from tests.support.lti_launch_platform import LtiTestPlatform
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session

from .conftest import PUBLIC_URL, GatewayFactory
from .lti_flow import HOST, LTI_REGISTRATIONS, page_data, ready_condition


@pytest.fixture
async def lms() -> AsyncIterator[LtiTestPlatform]:
    platform = await LtiTestPlatform(PUBLIC_URL, client_id="dyn-client-7", deployment_id="dep-7").start()
    yield platform
    await platform.close()


async def session_of(redis_url: str, login: str, role: str) -> str:
    client = redis.asyncio.from_url(redis_url)
    try:
        return await RedisSessionStore(client, 3600).save(
            Session(
                login=login,
                github_id=1,
                role=role,  # type: ignore[arg-type]
                csrf="c",
                created=time.time(),
            )
        )
    finally:
        await client.aclose()


def register_url(lms: LtiTestPlatform, token: str | None = None) -> str:
    return "/lti/register?" + urlencode(
        {
            "openid_configuration": lms.url + "/.well-known/openid-configuration",
            "registration_token": token or lms.registration_token,
        }
    )


async def confirm(
    gateway: object, lms: LtiTestPlatform, cookie: str, token: str | None = None, csrf: str = "c"
) -> tuple[int, str]:
    """The admin's confirmation: the form the GET shows, posted back (same origin)."""
    form = {
        "openid_configuration": lms.url + "/.well-known/openid-configuration",
        "registration_token": token or lms.registration_token,
        "csrf": csrf,
    }
    resp = await gateway.post(
        "/lti/register",
        data=form,  # type: ignore[attr-defined]
        headers={**HOST, "Cookie": f"userland_session={cookie}", "Origin": PUBLIC_URL},
    )
    return resp.status, await resp.text()


async def jwks_served(gateway: object) -> bool:
    resp = await gateway.get("/lti/jwks", headers=HOST)  # type: ignore[attr-defined]
    return bool(resp.status == 200)


async def test_an_admin_registers_an_lms_in_one_step(
    gateway_factory: GatewayFactory, kube: KubeClient, namespace: str, redis_url: str, lms: LtiTestPlatform
) -> None:
    gateway = await gateway_factory(lti_namespace=namespace)
    await eventually(lambda: jwks_served(gateway), timeout=MUST_COMPLETE)
    admin = await session_of(redis_url, "root", "admin")
    # The GET only asks: a link or an image elsewhere never registers anything.
    resp = await gateway.get(register_url(lms), headers={**HOST, "Cookie": f"userland_session={admin}"})
    assert resp.status == 200 and 'name="csrf" value="c"' in await resp.text()
    assert lms.registered == [] and (await kube.list(LTI_REGISTRATIONS, namespace))["items"] == []
    status, text = await confirm(gateway, lms, admin)
    assert status == 200, text
    assert page_data(text)["mode"] == "close" and "Userland is registered" in text
    (asked,) = lms.registered
    assert asked["initiate_login_uri"] == PUBLIC_URL + "/lti/login"
    assert (
        asked["redirect_uris"] == [PUBLIC_URL + "/lti/launch"]
        and asked["jwks_uri"] == PUBLIC_URL + "/lti/jwks"
    )
    (obj,) = (await kube.list(LTI_REGISTRATIONS, namespace))["items"]
    assert obj["spec"] == lms.spec() | {"deploymentIds": ["dep-7"], "clientId": "dyn-client-7"}
    name = obj["metadata"]["name"]

    async def ready() -> bool:
        return (await ready_condition(kube, namespace, name)).get("status") == "True"

    await eventually(ready, timeout=MUST_COMPLETE)
    # Twice: the same registration exists; a clear page, nothing changed.
    status, text = await confirm(gateway, lms, admin)
    assert status == 409 and "already exists" in text


async def test_only_a_signed_in_admin_can_register(
    gateway_factory: GatewayFactory, kube: KubeClient, namespace: str, redis_url: str, lms: LtiTestPlatform
) -> None:
    gateway = await gateway_factory(lti_namespace=namespace)
    await eventually(lambda: jwks_served(gateway), timeout=MUST_COMPLETE)
    anonymous = await gateway.get(register_url(lms), headers=HOST)
    assert anonymous.status == 401 and "Sign in in a new window" in await anonymous.text()
    student = await session_of(redis_url, "alice", "student")
    resp = await gateway.get(register_url(lms), headers={**HOST, "Cookie": f"userland_session={student}"})
    assert resp.status == 403 and "Only a Userland admin" in await resp.text()
    assert (await confirm(gateway, lms, student))[0] == 403
    instructor = await session_of(redis_url, "tom", "instructor")
    assert (await confirm(gateway, lms, instructor))[0] == 403
    # An admin's session, but a form not from this page (another token): refused.
    admin = await session_of(redis_url, "root", "admin")
    status, text = await confirm(gateway, lms, admin, csrf="forged")
    assert status == 403 and "expired" in text
    # And from another site, the gateway refuses the post before anything else.
    resp = await gateway.post(
        "/lti/register",
        data={"csrf": "c"},
        headers={**HOST, "Cookie": f"userland_session={admin}", "Origin": lms.url},
    )
    assert resp.status == 403
    assert lms.registered == [] and (await kube.list(LTI_REGISTRATIONS, namespace))["items"] == []


async def test_bad_configurations_are_refused_in_words(
    gateway_factory: GatewayFactory, kube: KubeClient, namespace: str, redis_url: str, lms: LtiTestPlatform
) -> None:
    gateway = await gateway_factory(lti_namespace=namespace)
    await eventually(lambda: jwks_served(gateway), timeout=MUST_COMPLETE)
    cookie = await session_of(redis_url, "root", "admin")
    admin = {**HOST, "Cookie": f"userland_session={cookie}"}
    status, text = await confirm(gateway, lms, cookie, token="stolen")
    assert status == 400 and "refused the registration (HTTP 401)" in text
    plain = "/lti/register?" + urlencode({"openid_configuration": "http://lms.example.edu/.well-known/x"})
    resp = await gateway.get(plain, headers=admin)
    assert resp.status == 400 and "must use https" in await resp.text()
    # A configuration whose issuer is another site cannot register that site.
    other = LtiTestPlatform(PUBLIC_URL, issuer="https://canvas.instructure.com")
    await other.start()
    try:
        status, text = await confirm(gateway, other, cookie)
        assert status == 400 and "not on its issuer" in text
    finally:
        await other.close()
    assert (await kube.list(LTI_REGISTRATIONS, namespace))["items"] == []
