"""Logout, /auth/verify, and failing closed when Redis is down."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import redis.asyncio
from authflow import SESSION_COOKIE, AppFactory, set_cookies

from tests.support import free_port
from userland.auth.routes import current_session
from userland.platform.clients.sessions import (
    MemorySessionStore,
    RedisSessionStore,
    SessionStoreUnavailable,
    connect_redis,
)
from userland.platform.model.keyspace import session_key


def _cookie(cookie: str) -> dict[str, str]:
    return {"Cookie": f"{SESSION_COOKIE}={cookie}"}


async def test_logout_confirms_then_deletes_the_session(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("lou", 1)
    _, cookie = await h.login("lou")
    assert await h.redis.exists(session_key(cookie)) == 1

    page = await h.client.get("/auth/logout", headers=_cookie(cookie))
    assert page.status == 200
    html = await page.text()
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match is not None and 'action="/auth/logout"' in html and 'method="post"' in html
    assert await h.redis.exists(session_key(cookie)) == 1  # GET alone signs nobody out

    wrong = await h.client.post("/auth/logout", data={"csrf": "nope"}, headers=_cookie(cookie),
                                allow_redirects=False)
    assert wrong.status == 403
    assert await h.redis.exists(session_key(cookie)) == 1

    done = await h.client.post("/auth/logout", data={"csrf": match.group(1)}, headers=_cookie(cookie),
                               allow_redirects=False)
    # No student origin to visit (no host Template here): straight to the platform's last step.
    assert done.status == 303 and done.headers["Location"].startswith("/auth/signed-out?chain=")
    removed = set_cookies(done)[SESSION_COOKIE]
    assert removed.value == "" and removed["max-age"] == "0" and removed["domain"] == ""
    last = await h.client.get(done.headers["Location"], allow_redirects=False)
    assert last.status == 302 and last.headers["Location"] == "/"
    assert last.headers["Clear-Site-Data"] == '"cache", "cookies", "storage", "executionContexts"'
    again = await h.client.get(done.headers["Location"], allow_redirects=False)  # single use
    assert again.status == 302 and "Clear-Site-Data" not in again.headers
    assert await h.redis.exists(session_key(cookie)) == 0
    assert (await h.verify(cookie)).status == 401


async def test_logout_without_a_session_just_goes_home(make_app: AppFactory) -> None:
    h = await make_app()
    page = await h.client.get("/auth/logout")
    assert page.status == 200 and "not signed in" in await page.text()
    resp = await h.client.post("/auth/logout", allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/"


async def test_verify_is_200_with_the_user_only_for_a_valid_session(make_app: AppFactory) -> None:
    h = await make_app(instructors=("ines",))
    h.github.add_user("Ines", 1)
    _, cookie = await h.login("ines")
    ok = await h.verify(cookie)
    assert ok.status == 200
    assert (ok.headers["X-User"], ok.headers["X-User-Role"]) == ("ines", "instructor")
    assert ok.headers["Cache-Control"] == "no-store"
    for bad in (None, "", "forged" + cookie[6:], cookie + "x"):
        resp = await h.verify(bad)
        assert resp.status == 401
        assert "X-User" not in resp.headers
    await h.redis.delete(session_key(cookie))  # expired
    assert (await h.verify(cookie)).status == 401


@pytest.fixture
async def dead_redis() -> AsyncIterator[redis.asyncio.Redis]:
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    yield client
    await client.aclose()


async def test_redis_down_every_protected_request_is_a_503(make_app: AppFactory,
                                                           dead_redis: redis.asyncio.Redis) -> None:
    h = await make_app(redis=dead_redis, store=RedisSessionStore(dead_redis, 3600), dev_login=True,
                       admins=("boss",))
    h.github.add_user("boss", 1)
    cookie = {"Cookie": f"{SESSION_COOKIE}={'a' * 43}; userland_login=n"}
    requests = [
        ("GET", "/auth/verify", None),
        ("GET", "/auth/login?next=/", None),
        ("GET", "/auth/callback?state=s&code=c", None),
        ("GET", "/auth/logout", None),
        ("POST", "/auth/logout", {"csrf": "x"}),
        ("GET", "/auth/admin/bindings/dora", None),
        ("POST", "/auth/admin/bindings/dora/clear", {"csrf": "x"}),
        ("GET", "/auth/dev-login", None),
        ("POST", "/auth/dev-login", {"state": "s", "login": "x"}),
    ]
    for method, path, data in requests:
        resp = await h.client.request(method, path, data=data, headers=cookie, allow_redirects=False)
        assert resp.status == 503, (method, path, resp.status)
        text = await resp.text()
        assert "unavailable" in text and "Traceback" not in text
        assert SESSION_COOKIE not in set_cookies(resp)


async def test_redis_failing_only_for_sessions_still_fails_closed(make_app: AppFactory) -> None:
    """The state store up but the session store down: the login completes nothing."""
    store = MemorySessionStore(3600)
    h = await make_app(store=store)
    h.github.add_user("amy", 1)
    h.github.sign_in("amy")
    authorize_url, nonce = await h.start_login()
    store.available = False
    resp = await h.callback(await h.authorize(authorize_url), nonce)
    assert resp.status == 503
    assert SESSION_COOKIE not in set_cookies(resp)


async def test_current_session_raises_when_the_store_is_down(make_app: AppFactory,
                                                             dead_redis: redis.asyncio.Redis) -> None:
    from aiohttp.test_utils import make_mocked_request

    h = await make_app(redis=dead_redis, store=RedisSessionStore(dead_redis, 3600))
    request = make_mocked_request("GET", "/", headers=_cookie("a" * 43), app=h.client.app)
    with pytest.raises(SessionStoreUnavailable):
        await current_session(request)
    assert await current_session(make_mocked_request("GET", "/", app=h.client.app)) is None
