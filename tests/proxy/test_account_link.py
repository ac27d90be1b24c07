"""Linking a student's GitHub and LMS sign-ins to one login (issue 28, Identity), end to end: the
real gateway in-process with GitHub sign-in (the fake GitHub: a real local HTTP server) and the
LTI launch (the real test LMS: lti1p3platform over aiohttp, real keys), real Redis and a real API
server. After a link both doors land in the same login; every attack gets a clear page and
changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
import redis.asyncio
from yarl import URL

from tests.fakes.github import FakeGitHub
from tests.jargon import jargon_in
from tests.support import MUST_COMPLETE, eventually
from tests.support.lti_launch_platform import LEARNER, LaunchSpec, LtiTestPlatform
from userland.auth.bindings import LoginBindings
from userland.auth.rules.origins import cookie_names
from userland.platform.clients.kube import KubeClient
from userland.platform.clients.sessions import RedisSessionStore
from userland.platform.model.keyspace import AUDIT_STREAM, OAUTH_STATE_PREFIX, lms_link_key, pattern

from .conftest import PUBLIC_URL, GatewayFactory
from .lti_flow import HOST, LtiFlow, page_data, ready_condition, register

SESSION = cookie_names(secure=False).session
NONCE = cookie_names(secure=False).nonce
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def learner(user_id: str, email: str) -> LaunchSpec:
    return LaunchSpec(user_id=user_id, roles=[LEARNER], email=email, name=email.split("@")[0].title())


@dataclass
class Doors:
    """A browser with both doors: GitHub sign-in and LMS launches, through the one gateway."""

    flow: LtiFlow
    github: FakeGitHub
    rdb: redis.asyncio.Redis

    @property
    def gateway(self):  # type: ignore[no-untyped-def]
        return self.flow.gateway

    async def login_of(self, cookie: str) -> str:
        session = await RedisSessionStore(self.rdb, 3600).load(cookie)
        assert session is not None
        return session.login

    async def github_sign_in(self, name: str) -> str:
        """A GitHub sign-in as `name`; returns the session cookie."""
        self.github.sign_in(name)
        resp = await self.gateway.get("/auth/login", params={"next": "/"}, headers=HOST,
                                      allow_redirects=False)
        assert resp.status == 302, await resp.text()
        nonce = resp.cookies[NONCE].value
        back = await self.github_back(resp.headers["Location"], nonce)
        assert back.status == 302, await back.text()
        return back.cookies[SESSION].value

    async def github_back(self, authorize_url: str, nonce: str, session: str | None = None,
                          ) -> aiohttp.ClientResponse:
        """The browser at GitHub, then back at the gateway's callback with its cookies."""
        callback = await self.at_github(authorize_url)
        return await self.callback(callback, nonce, session)

    async def at_github(self, authorize_url: str) -> str:
        async with self.flow.http.get(authorize_url, allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            location = resp.headers["Location"]
        assert location.startswith(PUBLIC_URL + "/auth/callback?")
        return location

    async def callback(self, callback_url: str, nonce: str | None, session: str | None,
                       ) -> aiohttp.ClientResponse:
        cookies = {**({NONCE: nonce} if nonce else {}), **({SESSION: session} if session else {})}
        cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
        return await self.gateway.get(URL(callback_url).path_qs, allow_redirects=False,
                                      headers={**HOST, "Cookie": cookie})

    async def launch(self, spec: LaunchSpec, session: str | None = None) -> aiohttp.ClientResponse:
        """A whole LMS launch; the last step (/lti/continue, top-level) carries `session`."""
        step = await self.flow.login(self.flow.platform.add_launch(spec))
        assert step.response_status == 302, step.text
        fields = await self.flow.authorize(step.location)
        status, text = await self.flow.post_launch(fields, step.cookies)
        assert status == 200, text
        data = page_data(text)
        headers = {**HOST, **({"Cookie": f"{SESSION}={session}"} if session else {})}
        return await self.gateway.get(data["url"], headers=headers, allow_redirects=False)

    async def lms_sign_in(self, spec: LaunchSpec, session: str | None = None) -> str:
        resp = await self.launch(spec, session)
        assert resp.status == 302, await resp.text()
        return resp.cookies[SESSION].value

    async def account(self, session: str) -> str:
        resp = await self.gateway.get("/auth/account", headers={**HOST, "Cookie": f"{SESSION}={session}"})
        assert resp.status == 200
        return await resp.text()

    async def post(self, path: str, session: str, csrf: str | None) -> aiohttp.ClientResponse:
        form = {} if csrf is None else {"csrf": csrf}
        headers = {**HOST, "Cookie": f"{SESSION}={session}", "Origin": PUBLIC_URL}
        return await self.gateway.post(path, data=form, allow_redirects=False, headers=headers)

    async def csrf(self, session: str) -> str:
        found = _CSRF.search(await self.account(session))
        assert found, "the account page offers no link"
        return found.group(1)

    async def start_github_link(self, session: str) -> tuple[str, str]:
        """POST "Link your GitHub account": the authorize URL and the browser's nonce."""
        resp = await self.post("/auth/account/link-github", session, await self.csrf(session))
        assert resp.status == 303, await resp.text()
        return resp.headers["Location"], resp.cookies[NONCE].value

    async def link_github(self, session: str, github_name: str) -> aiohttp.ClientResponse:
        self.github.sign_in(github_name)
        authorize, nonce = await self.start_github_link(session)
        return await self.github_back(authorize, nonce, session)

    async def arm_lms_link(self, session: str) -> None:
        resp = await self.post("/auth/account/link-lms", session, await self.csrf(session))
        assert resp.status == 200 and "Within 10 minutes" in await resp.text()

    async def audit(self) -> list[dict[str, str]]:
        entries = await self.rdb.xrange(AUDIT_STREAM)
        return [{k.decode(): v.decode() for k, v in fields.items()} for _id, fields in entries]


@pytest.fixture
async def doors(gateway_factory: GatewayFactory, kube: KubeClient, namespace: str,
                redis_url: str) -> AsyncIterator[Doors]:
    rdb = redis.asyncio.Redis.from_url(redis_url)
    await rdb.flushdb()
    github = FakeGitHub()
    await github.start()
    lms = await LtiTestPlatform(PUBLIC_URL).start()
    await register(kube, namespace, "lms", lms.spec())
    gateway = await gateway_factory(
        lti_namespace=namespace, admins=("root",), github_client_id=github.client_id,
        github_client_secret=github.client_secret, github_url=github.url, github_api_url=github.api_url)

    async def ready() -> bool:
        condition = await ready_condition(kube, namespace, "lms")
        return condition.get("status") == "True" and (
            await gateway.get("/lti/jwks", headers=HOST)).status == 200

    await eventually(ready, timeout=MUST_COMPLETE)
    for name, github_id in (("alicegh", 501), ("bobgh", 601), ("dave", 701), ("erin", 801), ("root", 1)):
        github.add_user(name, github_id)
    async with aiohttp.ClientSession() as http:
        yield Doors(LtiFlow(gateway, lms, http), github, rdb)
    await lms.close()
    await github.close()
    await rdb.aclose()


# -- both doors, one login ------------------------------------------------------------------------


async def test_an_lms_student_links_github_and_both_doors_open_the_same_login(doors: Doors) -> None:
    alice = await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))
    assert await doors.login_of(alice) == "alice"
    page = await doors.account(alice)
    assert "through your LMS" in page and "Link your GitHub account" in page
    assert jargon_in(page) == []
    linked = await doors.link_github(alice, "alicegh")
    assert linked.status == 200 and "GitHub account linked" in await linked.text()
    # GitHub now signs alice in as alice (not as alicegh), and so does the LMS.
    assert await doors.login_of(await doors.github_sign_in("alicegh")) == "alice"
    assert await doors.login_of(await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))) == "alice"
    binding = await LoginBindings(doors.rdb).get("alice")
    assert binding is not None and binding.github_id == 501 and binding.lti_subject
    assert await LoginBindings(doors.rdb).get("alicegh") is None  # no second environment
    page = await doors.account(alice)
    assert page.count("<strong>linked</strong>") == 2 and "csrf" not in page and jargon_in(page) == []
    assert [(e["actor"], e["action"], e["result"]) for e in await doors.audit()] == [
        ("alice", "account.link-github", "linked GitHub account alicegh")]


async def test_a_github_student_links_the_lms_and_both_doors_open_the_same_login(doors: Doors) -> None:
    bob = await doors.github_sign_in("bobgh")
    assert "Link your LMS account" in await doors.account(bob)
    await doors.arm_lms_link(bob)
    assert "Waiting" in await doors.account(bob)
    # The next launch completed in this browser, by an LMS user seen for the first time.
    linked = await doors.lms_sign_in(learner("u-5", "bob@uni.example.edu"), bob)
    assert await doors.login_of(linked) == "bobgh"
    assert await LoginBindings(doors.rdb).get("bob") is None  # the name it got a moment ago is free again
    # From now on, from any browser: the LMS and GitHub both land in bobgh.
    assert await doors.login_of(await doors.lms_sign_in(learner("u-5", "bob@uni.example.edu"))) == "bobgh"
    assert await doors.login_of(await doors.github_sign_in("bobgh")) == "bobgh"
    assert not await doors.rdb.exists(lms_link_key("bobgh"))  # used once
    assert [e["result"] for e in await doors.audit()] == ["linked LMS account"]


# -- attacks: each refused with a page, nothing changed ---------------------------------------------


async def test_a_link_state_used_by_another_session_then_replayed_is_refused(doors: Doors) -> None:
    alice = await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))
    doors.github.sign_in("alicegh")
    authorize, nonce = await doors.start_github_link(alice)
    callback = await doors.at_github(authorize)
    # Meanwhile this browser was signed in as another student (carol): not carol's link.
    carol = await doors.lms_sign_in(learner("u-3", "carol@uni.example.edu"))
    other = await doors.callback(callback, nonce, carol)
    assert other.status == 403 and "started in another sign-in" in await other.text()
    # The same answer replayed with alice's own session: the state was single use.
    replay = await doors.callback(callback, nonce, alice)
    assert replay.status == 403 and "expired" in await replay.text()
    for login in ("alice", "carol"):
        binding = await LoginBindings(doors.rdb).get(login)
        assert binding is not None and binding.github_id == 0
    # alicegh was linked nowhere: signing in with it is a GitHub account of its own.
    assert await doors.login_of(await doors.github_sign_in("alicegh")) == "alicegh"


async def test_a_link_answer_in_another_browser_is_refused(doors: Doors) -> None:
    alice = await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))
    doors.github.sign_in("alicegh")
    authorize, _nonce = await doors.start_github_link(alice)
    resp = await doors.github_back(authorize, "", alice)  # the browser's nonce cookie is not there
    assert resp.status == 403
    assert (await LoginBindings(doors.rdb).get("alice")).github_id == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("path", ["/auth/account/link-github", "/auth/account/link-lms"])
@pytest.mark.parametrize("csrf", [None, "forged"])
async def test_a_cross_site_post_without_the_csrf_token_is_refused(doors: Doors, path: str,
                                                                   csrf: str | None) -> None:
    alice = await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))
    bob = await doors.github_sign_in("bobgh")
    resp = await doors.post(path, alice if path.endswith("github") else bob, csrf)
    assert resp.status == 403 and "Form expired" in await resp.text()
    assert not await doors.rdb.keys(pattern(OAUTH_STATE_PREFIX))  # no link started
    assert not await doors.rdb.exists(lms_link_key("bobgh"))  # no link armed


async def test_linking_a_github_account_bound_to_another_student_is_refused(doors: Doors) -> None:
    dave = await doors.github_sign_in("dave")  # dave has his own environment
    mallory = await doors.lms_sign_in(learner("u-6", "mallory@uni.example.edu"))
    resp = await doors.link_github(mallory, "dave")
    assert resp.status == 403 and "has its own Userland account" in await resp.text()
    assert (await LoginBindings(doors.rdb).get("mallory")).github_id == 0  # type: ignore[union-attr]
    assert await doors.login_of(await doors.github_sign_in("dave")) == "dave"
    assert await doors.login_of(dave) == "dave"
    assert [e["result"] for e in await doors.audit()] == ["refused: github_taken"]


async def test_a_github_account_linked_to_one_lms_student_cannot_be_linked_to_another(doors: Doors) -> None:
    erin = await doors.lms_sign_in(learner("u-7", "erin.l@uni.example.edu"))
    assert (await doors.link_github(erin, "erin")).status == 200
    frank = await doors.lms_sign_in(learner("u-8", "frank@uni.example.edu"))
    resp = await doors.link_github(frank, "erin")
    assert resp.status == 403 and "has its own Userland account" in await resp.text()
    assert (await LoginBindings(doors.rdb).get("frank")).github_id == 0  # type: ignore[union-attr]
    assert await doors.login_of(await doors.github_sign_in("erin")) == "erin-l"


async def test_an_admins_github_account_is_never_linked_to_a_student(doors: Doors) -> None:
    alice = await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))
    resp = await doors.link_github(alice, "root")
    assert resp.status == 403 and "belongs to staff" in await resp.text()
    assert (await LoginBindings(doors.rdb).get("alice")).github_id == 0  # type: ignore[union-attr]


async def test_an_lms_account_bound_elsewhere_is_not_linked(doors: Doors) -> None:
    alice = await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))  # alice's own environment
    bob = await doors.github_sign_in("bobgh")
    await doors.arm_lms_link(bob)
    resp = await doors.launch(learner("u-1", "alice@uni.example.edu"), bob)
    assert resp.status == 403 and "has its own Userland account" in await resp.text()
    assert SESSION not in resp.cookies  # nobody signed in by it
    assert await doors.login_of(alice) == "alice"
    assert (await LoginBindings(doors.rdb).get("bobgh")).lti_subject == ""  # type: ignore[union-attr]
    assert await doors.login_of(await doors.lms_sign_in(learner("u-1", "alice@uni.example.edu"))) == "alice"
    assert [e["result"] for e in await doors.audit()] == ["refused: lms_taken"]


async def test_a_link_armed_in_one_browser_is_not_used_by_another_browsers_launch(doors: Doors) -> None:
    armed_here = await doors.github_sign_in("bobgh")
    await doors.arm_lms_link(armed_here)
    elsewhere = await doors.github_sign_in("bobgh")  # bob's other browser: another sign-in
    for session in (elsewhere, None):
        user = "u-5" if session else "u-9"
        got = await doors.lms_sign_in(learner(user, f"{user}@uni.example.edu"), session)
        assert await doors.login_of(got) == user  # a login of its own, not bobgh
    assert (await LoginBindings(doors.rdb).get("bobgh")).lti_subject == ""  # type: ignore[union-attr]
    assert await doors.rdb.exists(lms_link_key("bobgh"))  # still armed, for its own browser only
    assert json.dumps(await doors.audit()) == "[]"
