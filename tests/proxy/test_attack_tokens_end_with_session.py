"""Attack review of issue 17: the web UI's form tokens outlived the session they were made in.

The web UI's CSRF token was an HMAC over the login and a 4-hour window, nothing else: a token
copied from a page before sign-out (by a lab neighbour, from a shared screen, from a page left
in the browser's cache) was still good after sign-out, for anyone who later got that login's
session (the next sign-in of the same student, a fixated session). The gateway now signs the
session's id into the identity it gives the web UI (platform/model/identity.py `session_id`), and the
token covers it: signing out ends every token of that session.

What is real: the gateway (`create_app`, auth routes mounted), the web UI (`userland.web.app`
`create_app`, its watches on the real control plane), Redis. The sessions are made the way a
login makes them (`RedisSessionStore.save`), the sign-out is the real one (GET the form, POST it).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from aiohttp.test_utils import TestServer

from userland.platform.clients.kube import NAMESPACES, KubeClient
from userland.platform.clients.sessions import RedisSessionStore, Session
from userland.platform.model.settings import Settings
from userland.web.app import create_app as create_web_app

from .conftest import PUBLIC_HOST, PUBLIC_URL, SECRET, GatewayFactory

CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def web_ui(kube: KubeClient, namespace: str, redis_url: str) -> AsyncIterator[str]:
    """The real web UI with `namespace` as a course; its base URL."""
    await kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
        "labels": {"userland.dev/course": "true"}, "annotations": {"userland.dev/title": "CS 101"}}})
    app = create_web_app(Settings(redis_url=redis_url, identity_secret=SECRET, public_url=PUBLIC_URL,
                                  cookie_secure=False), kube=kube)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


async def sign_in(redis_url: str, login: str) -> str:
    """A session as a login makes it (a random CSRF secret of its own); the cookie value."""
    client = redis.asyncio.from_url(redis_url)
    try:
        return await RedisSessionStore(client, 3600).save(Session(
            login=login, github_id=4242, role="admin", csrf=secrets.token_urlsafe(32), created=time.time()))
    finally:
        await client.aclose()


def platform(cookie: str) -> dict[str, str]:
    return {"Host": PUBLIC_HOST, "Cookie": f"userland_session={cookie}", "Origin": PUBLIC_URL}


async def test_a_form_token_from_before_sign_out_is_refused_after(
        gateway_factory: GatewayFactory, web_ui: str, namespace: str, redis_url: str) -> None:
    gw = await gateway_factory(web_url=web_ui)
    first = await sign_in(redis_url, "teacher")
    course_page = f"/courses/{namespace}"

    async def token(cookie: str) -> str:
        response = await gw.get(course_page, headers=platform(cookie))
        assert response.status == 200, await response.text()
        found = CSRF_FIELD.search(await response.text())
        assert found is not None, "the dashboard has no form token"
        return found.group(1)

    async def act(cookie: str, csrf: str) -> Any:
        return await gw.post(f"{course_page}/actions", headers=platform(cookie), allow_redirects=False,
                             data={"csrf": csrf, "action": "restart", "names": "nobody"})

    # The web UI's watches see the course a moment after it is labelled.
    deadline = time.monotonic() + 15
    while (await gw.get(course_page, headers=platform(first))).status != 200:
        assert time.monotonic() < deadline, "the web UI never showed the course"
        await asyncio.sleep(0.05)
    old = await token(first)
    done = await act(first, old)
    assert done.status == 200 and "no such environment" in await done.text()

    # Sign out through the gateway, as the browser does.
    form = await gw.get("/auth/logout", headers=platform(first))
    logout_csrf = CSRF_FIELD.search(await form.text())
    assert logout_csrf is not None
    out = await gw.post("/auth/logout", headers=platform(first), data={"csrf": logout_csrf.group(1)},
                        allow_redirects=False)
    assert out.status == 303

    # The same login signs in again (the student back at the lab computer, or someone handed a
    # session for that login): a token of the session that ended must be worth nothing now.
    second = await sign_in(redis_url, "teacher")
    replayed = await act(second, old)
    assert replayed.status == 403, "a token from before sign-out was accepted after it"
    assert "This form has expired" in await replayed.text()
    # The new session's own token works.
    fresh = await act(second, await token(second))
    assert fresh.status == 200 and "no such environment" in await fresh.text()
