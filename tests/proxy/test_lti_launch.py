"""The LTI 1.3 launch end to end: a real LTI platform (lti1p3platform, served by aiohttp with a
real RSA key), the real gateway in-process with its /lti/ routes, a real API server holding the
LtiRegistration and the tool's key Secret, real Redis. Every attack of issue 28's launch half is
a test here: each gets a clear page, and signs nobody in.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jwt
import pytest
import redis.asyncio

from tests.support import MUST_COMPLETE, eventually
from tests.support.lti_launch_platform import INSTRUCTOR, LEARNER, LaunchSpec, LtiTestPlatform, new_rsa_pem
from userland.auth.bindings import LoginBindings
from userland.platform.clients.kube import SECRETS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.clients.lti_keys import read_keys, rotate_keys
from userland.platform.clients.sessions import RedisSessionStore
from userland.platform.model import naming
from userland.platform.model.lti_keys import TOOL_KEYS_SECRET

from .conftest import PUBLIC_URL, GatewayFactory, template_body
from .lti_flow import HOST, LTI_REGISTRATIONS, LtiFlow, page_data, ready_condition, register

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"


@pytest.fixture
async def platform() -> AsyncIterator[LtiTestPlatform]:
    lms = await LtiTestPlatform(PUBLIC_URL).start()
    yield lms
    await lms.close()


@pytest.fixture
async def flow(
    gateway_factory: GatewayFactory,
    kube: KubeClient,
    namespace: str,
    platform: LtiTestPlatform,
    rdb: redis.asyncio.Redis,
) -> AsyncIterator[LtiFlow]:
    await rdb.flushdb()  # names bound by an earlier test's LMS users must not shift these tests' names
    await register(kube, namespace, "lms", platform.spec())
    gateway = await gateway_factory(lti_namespace=namespace, admins=("root",))
    # Ready once the gateway checked the registration against the platform's key set.
    condition = await eventually(lambda: _ready(kube, namespace, "lms"), timeout=MUST_COMPLETE)
    assert condition["reason"] == "KeySetFetched"
    await eventually(lambda: _jwks_served(gateway), timeout=MUST_COMPLETE)
    async with aiohttp.ClientSession() as http:
        yield LtiFlow(gateway, platform, http)


async def _ready(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    condition = await ready_condition(kube, namespace, name)
    return condition if condition.get("status") == "True" else None


async def _jwks_served(gateway: Any) -> bool:
    resp = await gateway.get("/lti/jwks", headers=HOST)
    return resp.status == 200


@pytest.fixture
async def rdb(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.from_url(redis_url)
    yield client
    await client.aclose()


def learner(user_id: str = "u-1", email: str = "Alice@uni.example.edu", **kwargs: Any) -> LaunchSpec:
    return LaunchSpec(user_id=user_id, roles=[LEARNER], email=email, name="Alice A.", **kwargs)


# -- the launch ---------------------------------------------------------------------------------


async def test_a_student_launch_signs_them_in_with_no_other_sign_in(
    flow: LtiFlow, rdb: redis.asyncio.Redis
) -> None:
    session_id, location = await flow.launch(flow.platform.add_launch(learner()))
    assert location == "/"
    session = await RedisSessionStore(rdb, 3600).load(session_id)
    assert session is not None
    assert (session.login, session.role, session.github_id, session.name) == (
        "alice",
        "student",
        0,
        "Alice A.",
    )
    # The platform host serves them as alice from now on.
    assert session.login == "alice"


async def test_login_by_post_works_too(flow: LtiFlow) -> None:
    step = await flow.login(flow.platform.add_launch(learner()), method="POST")
    assert step.response_status == 302, step.text
    assert step.location.startswith(flow.platform.url + "/auth?")
    params = step.auth_params
    assert (
        params["response_mode"] == "form_post" and params["prompt"] == "none" and params["scope"] == "openid"
    )
    assert params["redirect_uri"] == PUBLIC_URL + "/lti/launch"


async def test_the_identity_is_bound_at_first_sight(flow: LtiFlow, rdb: redis.asyncio.Redis) -> None:
    store = RedisSessionStore(rdb, 3600)
    first, _ = await flow.launch(flow.platform.add_launch(learner("u-1", "alice@uni.example.edu")))
    # The LMS later says another email: same person, same login.
    again, _ = await flow.launch(flow.platform.add_launch(learner("u-1", "alice.new@uni.example.edu")))
    # Another LMS user whose email says alice: never alice's environment.
    other, _ = await flow.launch(flow.platform.add_launch(learner("u-2", "alice@other.example.edu")))
    logins = [(await store.load(s)).login for s in (first, again, other)]  # type: ignore[union-attr]
    assert logins == ["alice", "alice", "alice-2"]


async def test_a_github_name_is_never_taken_by_an_lms_user_nor_the_reverse(
    flow: LtiFlow, rdb: redis.asyncio.Redis
) -> None:
    bindings = LoginBindings(rdb)
    assert await bindings.bind("bob", 4242)  # bob signed in with GitHub first
    session, _ = await flow.launch(flow.platform.add_launch(learner("u-7", "bob@uni.example.edu")))
    assert (await RedisSessionStore(rdb, 3600).load(session)).login == "bob-2"  # type: ignore[union-attr]
    # carol came from the LMS first: a GitHub account named carol cannot take her name.
    await flow.launch(flow.platform.add_launch(learner("u-8", "carol@uni.example.edu")))
    assert not await bindings.bind("carol", 777)
    binding = await bindings.get("carol")
    assert binding is not None and binding.github_id == 0 and binding.lti_subject
    # An admin's name (USERLAND_ADMINS: root) is a GitHub account's, never an LMS user's.
    session, _ = await flow.launch(flow.platform.add_launch(learner("u-9", "root@uni.example.edu")))
    assert (await RedisSessionStore(rdb, 3600).load(session)).login == "root-2"  # type: ignore[union-attr]


# -- attacks: each refused with a page, nobody signed in --------------------------------------------


async def refused_launch(flow: LtiFlow, spec: LaunchSpec) -> tuple[int, str]:
    step = await flow.login(flow.platform.add_launch(spec))
    assert step.response_status == 302, step.text
    fields = await flow.authorize(step.location)
    return await flow.post_launch(fields, step.cookies)


def assert_refused(status: int, text: str, words: str) -> None:
    assert status in (400, 403), text
    assert words in text, text
    assert 'data-mode="continue"' not in text and "Traceback" not in text


async def test_replayed_state_is_refused(flow: LtiFlow) -> None:
    step = await flow.login(flow.platform.add_launch(learner()))
    fields = await flow.authorize(step.location)
    status, _ = await flow.post_launch(fields, step.cookies)
    assert status == 200
    status, text = await flow.post_launch(fields, step.cookies)
    assert_refused(status, text, "expired or was already used")


async def test_replayed_id_token_with_a_fresh_state_is_refused(flow: LtiFlow) -> None:
    launch_id = flow.platform.add_launch(learner())
    step = await flow.login(launch_id)
    fields = await flow.authorize(step.location)
    assert (await flow.post_launch(fields, step.cookies))[0] == 200
    fresh = await flow.login(launch_id)  # a new login: new state, new nonce
    status, text = await flow.post_launch(
        {"id_token": fields["id_token"], "state": fresh.auth_params["state"]}, fresh.cookies
    )
    assert_refused(status, text, "does not answer the sign-in")


async def test_a_reused_nonce_is_refused(flow: LtiFlow) -> None:
    """Two logins; the platform is made to answer the second with a token carrying the first's
    nonce (already used): refused, whatever the state."""
    launch_id = flow.platform.add_launch(learner())
    first = await flow.login(launch_id)
    fields = await flow.authorize(first.location)
    assert (await flow.post_launch(fields, first.cookies))[0] == 200
    used_nonce = first.auth_params["nonce"]
    second = await flow.login(launch_id)
    claims = dict(flow.platform.issued[-1])
    token = flow.platform.sign(
        {**claims, "nonce": used_nonce, "iat": int(time.time()), "exp": int(time.time()) + 300}
    )
    status, text = await flow.post_launch(
        {"id_token": token, "state": second.auth_params["state"]}, second.cookies
    )
    assert_refused(status, text, "does not answer the sign-in")


async def test_signed_by_another_key_is_refused(flow: LtiFlow) -> None:
    other_private, _ = new_rsa_pem()
    kid = flow.platform.registration().get_kid()
    spec = learner(signer=lambda c: jwt.encode(c, other_private, algorithm="RS256", headers={"kid": kid}))
    assert_refused(*await refused_launch(flow, spec), "signature is not your LMS")


async def test_alg_none_is_refused(flow: LtiFlow) -> None:
    spec = learner(signer=lambda c: jwt.encode(c, None, algorithm="none"))  # type: ignore[arg-type]
    assert_refused(*await refused_launch(flow, spec), "RS256")


async def test_hs256_keyed_with_the_public_key_is_refused(flow: LtiFlow) -> None:
    import base64
    import hashlib
    import hmac

    def hs256(claims: dict[str, Any]) -> str:
        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        head = (
            b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64(json.dumps(claims).encode())
        )
        mac = hmac.new(flow.platform.public_pem.encode(), head.encode(), hashlib.sha256).digest()
        return head + "." + b64(mac)

    assert_refused(*await refused_launch(flow, learner(signer=hs256)), "RS256")


async def test_unknown_deployment_is_refused(flow: LtiFlow) -> None:
    step = await flow.login(flow.platform.add_launch(learner()), lti_deployment_id="deployment-9")
    assert step.response_status == 403 and "deployment id" in step.text
    # Named only in the token (the login named the registered one): refused at the launch.
    spec = learner(tamper=lambda c: {**c, CLAIM + "deployment_id": "deployment-9"})
    status, text = await refused_launch(flow, spec)
    assert_refused(status, text, "deployment")


async def test_unknown_client_id_is_refused(flow: LtiFlow) -> None:
    flow.platform.client_id = "someone-else"
    step = await flow.login(flow.platform.add_launch(learner()))
    assert step.response_status == 403
    assert "not registered here" in step.text and "Traceback" not in step.text


async def test_expired_token_is_refused(flow: LtiFlow) -> None:
    spec = learner(tamper=lambda c: {**c, "iat": int(time.time()) - 900, "exp": int(time.time()) - 600})
    assert_refused(*await refused_launch(flow, spec), "expired")


async def test_target_link_uri_elsewhere_is_refused(flow: LtiFlow) -> None:
    launch_id = flow.platform.add_launch(learner())
    url = flow.platform.login_initiation_url(launch_id).replace(
        "target_link_uri=http%3A%2F%2Fuserland.test", "target_link_uri=https%3A%2F%2Fevil.example"
    )
    resp = await flow.gateway.get(url[url.index("/lti/login") :], headers=HOST, allow_redirects=False)
    assert resp.status == 400 and "points to another site" in await resp.text()
    spec = learner(tamper=lambda c: {**c, CLAIM + "target_link_uri": "https://evil.example/lti/launch"})
    assert_refused(*await refused_launch(flow, spec), "points somewhere other than this site")


async def test_a_launch_without_id_token_or_state_is_refused(flow: LtiFlow) -> None:
    status, text = await flow.post_launch({"state": "made-up"})
    assert_refused(status, text, "expired or was already used")
    step = await flow.login(flow.platform.add_launch(learner()))
    status, text = await flow.post_launch(
        {"state": step.auth_params["state"], "id_token": "garbage"}, step.cookies
    )
    assert_refused(status, text, "no usable id_token")


async def test_a_ticket_works_once(flow: LtiFlow) -> None:
    step = await flow.login(flow.platform.add_launch(learner()))
    fields = await flow.authorize(step.location)
    _, text = await flow.post_launch(fields, step.cookies)
    url = page_data(text)["url"]
    assert (await flow.continue_(url)).status == 302
    again = await flow.continue_(url)
    assert again.status == 403 and "expired or was already used" in await again.text()


# -- third-party cookies blocked ----------------------------------------------------------------


async def test_no_cookie_and_no_platform_storage_starts_again_in_a_new_window(flow: LtiFlow) -> None:
    step = await flow.login(flow.platform.add_launch(learner()))
    fields = await flow.authorize(step.location)
    status, text = await flow.post_launch(fields, cookies=None)  # the iframe's cookie never came back
    assert status == 200
    data = page_data(text)
    assert data["mode"] == "restart" and data["url"] == ""
    restart = next(line for line in text.splitlines() if "Open Userland in a new window" in line)
    assert 'target="_blank"' in restart and "/lti/login?iss=" in restart
    # The page may be framed by the LMS and runs only its own script.
    resp = await flow.gateway.post(
        "/lti/launch", data={"state": "x"}, headers={**HOST, "Origin": flow.platform.url}
    )
    csp = resp.headers["Content-Security-Policy"]
    assert "frame-ancestors" not in csp and "X-Frame-Options" not in resp.headers
    assert "script-src 'sha256-" in csp and "unsafe-inline" not in csp


async def test_platform_storage_carries_the_browser_secret_instead_of_a_cookie(
    flow: LtiFlow, rdb: redis.asyncio.Redis
) -> None:
    step = await flow.login(flow.platform.add_launch(learner()), lti_storage_target="_parent")
    assert step.response_status == 200
    put = page_data(step.text)
    assert put["mode"] == "storage-put" and put["platform-origin"] == flow.platform.url
    assert put["url"].startswith(flow.platform.url + "/auth?")
    secret = put["value"]
    fields = await flow.authorize(put["url"])
    status, text = await flow.post_launch(fields, cookies=None)
    get = page_data(text)
    assert status == 200 and get["mode"] == "storage-get" and get["key"] == put["key"]
    # Without the secret the platform kept, the ticket signs nobody in.
    resp = await flow.continue_(get["url"] + "&proof=wrong")
    assert resp.status == 403 and "not started in this browser" in await resp.text()
    # A new launch, and this time the secret read back from the platform's storage.
    step = await flow.login(flow.platform.add_launch(learner()), lti_storage_target="_parent")
    put = page_data(step.text)
    fields = await flow.authorize(put["url"])
    _, text = await flow.post_launch(fields, cookies=None)
    resp = await flow.continue_(page_data(text)["url"] + "&proof=" + put["value"])
    assert resp.status == 302, await resp.text()
    assert secret != put["value"]


# -- the rest of the platform is not affected ------------------------------------------------------


async def test_other_cross_site_posts_are_still_refused(flow: LtiFlow) -> None:
    resp = await flow.gateway.post("/auth/logout", headers={**HOST, "Origin": flow.platform.url})
    assert resp.status == 403
    # And the LTI pages are the only ones that may be framed.
    resp = await flow.gateway.get("/auth/login", headers=HOST, allow_redirects=False)
    assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]


# -- registrations and keys -------------------------------------------------------------------------


async def test_registration_status_says_what_is_wrong(
    flow: LtiFlow, kube: KubeClient, namespace: str
) -> None:
    spec = flow.platform.spec()
    await register(
        kube, namespace, "no-keys", {**spec, "clientId": "c2", "keySetUrl": flow.platform.url + "/nope"}
    )
    await register(
        kube, namespace, "plain-http", {**spec, "clientId": "c3", "keySetUrl": "http://lms.example.edu/jwks"}
    )
    await register(kube, namespace, "twin", spec)

    async def reason(name: str) -> str | None:
        return (await ready_condition(kube, namespace, name)).get("reason")

    assert await eventually(lambda: reason("no-keys"), timeout=MUST_COMPLETE) == "KeySetUnreachable"
    assert await eventually(lambda: reason("plain-http"), timeout=MUST_COMPLETE) == "InvalidSpec"
    assert await eventually(lambda: reason("twin"), timeout=MUST_COMPLETE) == "Duplicate"
    no_keys = await ready_condition(kube, namespace, "no-keys")
    assert no_keys["status"] == "False" and "HTTP 404" in no_keys["message"]
    assert "must use https" in (await ready_condition(kube, namespace, "plain-http"))["message"]
    # The first registration still works.
    await flow.launch(flow.platform.add_launch(learner()))


async def test_the_tool_key_lives_in_a_secret_and_rotation_publishes_two(
    flow: LtiFlow, kube: KubeClient, namespace: str
) -> None:
    secret = await kube.get(SECRETS, namespace, TOOL_KEYS_SECRET)
    (entry,) = secret["data"]
    published = (await (await flow.gateway.get("/lti/jwks", headers=HOST)).json())["keys"]
    assert [k["kid"] + ".pem" for k in published] == [entry]
    assert all("d" not in k for k in published)  # public halves only
    keys = await rotate_keys(kube, namespace)
    assert len(keys) == 2 and len(await read_keys(kube, namespace)) == 2


async def test_lti_is_off_without_its_namespace(gateway_factory: GatewayFactory) -> None:
    gateway = await gateway_factory()
    resp = await gateway.get("/lti/jwks", headers=HOST)
    assert resp.status != 200


async def test_an_instructor_launch_signs_in_as_student_role_only(
    flow: LtiFlow, rdb: redis.asyncio.Redis
) -> None:
    """The platform role stays `student`: an LMS Instructor teaches their course (course roles,
    linked per course), never every course as USERLAND_INSTRUCTORS would."""
    spec = LaunchSpec(user_id="t-1", roles=[INSTRUCTOR], email="tina@uni.example.edu")
    session, _ = await flow.launch(flow.platform.add_launch(spec))
    assert (await RedisSessionStore(rdb, 3600).load(session)).role == "student"  # type: ignore[union-attr]


async def test_registrations_are_readable_with_kubectl_columns(
    flow: LtiFlow, kube: KubeClient, namespace: str
) -> None:
    listed = await kube.list(LTI_REGISTRATIONS, namespace)
    (obj,) = listed["items"]
    assert obj["status"]["keys"] == 1 and obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


# -- landing in the course's environment ---------------------------------------------------------


async def linked_template(kube: KubeClient, namespace: str, contexts: str) -> None:
    body = template_body("ide", host="ide.test")
    body["metadata"]["annotations"] = {naming.ANNOTATION_LTI_CONTEXTS: contexts}
    await kube.create(TEMPLATES, namespace, body)


async def userlands_of(kube: KubeClient, namespace: str) -> list[str]:
    return sorted(u["metadata"]["name"] for u in (await kube.list(USERLANDS, namespace))["items"])


async def test_a_learner_lands_in_their_own_environment_of_the_linked_course(
    flow: LtiFlow, kube: KubeClient, namespace: str
) -> None:
    await linked_template(kube, namespace, "lms:course-1, lms:course-9")
    launch_id = flow.platform.add_launch(learner(context_id="course-1"))

    async def lands() -> str:
        _, location = await flow.launch(launch_id)
        assert location == "http://ide.test/"  # on to alice's own origin, through the handoff
        return location

    await eventually(lands, timeout=MUST_COMPLETE)  # once the gateway's watch has the Template
    assert await userlands_of(kube, namespace) == ["ide-alice"]
    # Again: the environment is there, nothing more is made.
    await flow.launch(launch_id)
    assert await userlands_of(kube, namespace) == ["ide-alice"]


async def test_roles_count_for_the_launchs_own_context_and_registration_only(
    flow: LtiFlow, kube: KubeClient, namespace: str
) -> None:
    # The course is linked to another registration's context of the same id, and to course-1 here.
    await linked_template(kube, namespace, "other-lms:course-2, lms:course-1")
    first = flow.platform.add_launch(learner(context_id="course-1"))
    await eventually(lambda: _lands_at(flow, first, "http://ide.test/"), timeout=MUST_COMPLETE)
    await kube.delete(USERLANDS, namespace, "ide-alice")
    # This platform's course-2 is another course than other-lms's course-2: nothing is made.
    _, location = await flow.launch(
        flow.platform.add_launch(learner("u-5", "dan@uni.example.edu", context_id="course-2"))
    )
    assert location == "/"
    # An Instructor of the linked course gets no environment made, and no role from the launch
    # itself: the web UI's course page decides (tests/proxy/test_lti_link.py).
    spec = LaunchSpec(user_id="t-1", roles=[INSTRUCTOR], email="tina@uni.example.edu", context_id="course-1")
    _, location = await flow.launch(flow.platform.add_launch(spec))
    assert location.startswith("/lms/course?launch=")
    names = await userlands_of(kube, namespace)
    assert "ide-dan" not in names and "ide-tina" not in names


async def _lands_at(flow: LtiFlow, launch_id: str, where: str) -> bool:
    _, location = await flow.launch(launch_id)
    return location == where
