"""The development login: only when settings.dev_login is on, CSRF-protected, single-use."""

from __future__ import annotations

import re

import aiohttp
from authflow import PLAIN_SESSION_COOKIE as SESSION_COOKIE
from authflow import AppFactory, Harness, set_cookies

from userland.auth.dev_login import dev_github_id


async def _form(h: Harness, next_url: str = "/") -> tuple[str, str]:
    resp = await h.client.get("/auth/dev-login", params={"next": next_url})
    assert resp.status == 200
    match = re.search(r'name="state" value="([^"]+)"', await resp.text())
    assert match is not None
    return match.group(1), set_cookies(resp)[h.nonce_cookie].value


async def _submit(h: Harness, state: str, nonce: str | None, login: str) -> aiohttp.ClientResponse:
    headers = {"Cookie": f"{h.nonce_cookie}={nonce}"} if nonce else {}
    return await h.client.post("/auth/dev-login", data={"state": state, "login": login},
                               headers=headers, allow_redirects=False)


async def test_dev_login_signs_in_with_a_derived_id_and_listed_role(make_app: AppFactory) -> None:
    h = await make_app(dev_login=True, github_client_id="", cookie_secure=False, admins=("alice",))
    start = await h.client.get("/auth/login", params={"next": "/lab"}, allow_redirects=False)
    assert start.status == 302 and start.headers["Location"] == "/auth/dev-login?next=%2Flab"

    state, nonce = await _form(h, "/lab")
    resp = await _submit(h, state, nonce, "Alice")
    assert resp.status == 302 and resp.headers["Location"] == "/lab"
    cookie = set_cookies(resp)[SESSION_COOKIE]
    assert cookie["httponly"] is True and cookie["samesite"] == "Lax"
    session = await h.store.load(cookie.value)
    assert session is not None
    assert (session.login, session.role) == ("alice", "admin")
    assert session.github_id == dev_github_id("alice") == dev_github_id("ALICE") < 0
    assert dev_github_id("alice") != dev_github_id("bob")

    state, nonce = await _form(h)
    resp = await _submit(h, state, nonce, "bob")
    verified = await h.verify(set_cookies(resp)[SESSION_COOKIE].value)
    assert (verified.headers["X-User"], verified.headers["X-User-Role"]) == ("bob", "student")


async def test_dev_login_form_is_single_use_and_bound_to_the_browser(make_app: AppFactory) -> None:
    h = await make_app(dev_login=True, github_client_id="")
    state, nonce = await _form(h)
    assert (await _submit(h, state, None, "mallory")).status == 403  # a cross-site post has no nonce
    state, nonce = await _form(h)
    assert (await _submit(h, state, "other", "mallory")).status == 403
    state, nonce = await _form(h)
    assert (await _submit(h, "forged", nonce, "mallory")).status == 403
    state, nonce = await _form(h)
    assert (await _submit(h, state, nonce, "carl")).status == 302
    assert (await _submit(h, state, nonce, "carl")).status == 403  # replay


async def test_dev_login_refuses_invalid_names_with_the_form_again(make_app: AppFactory) -> None:
    h = await make_app(dev_login=True, github_client_id="")
    state, nonce = await _form(h)
    resp = await _submit(h, state, nonce, "<script>-")
    assert resp.status == 400
    text = await resp.text()
    assert "&lt;script&gt;-" in text and "<script>" not in text  # autoescaped
    assert 'name="state"' in text and SESSION_COOKIE not in set_cookies(resp)


async def test_dev_login_routes_do_not_exist_when_off(make_app: AppFactory) -> None:
    h = await make_app()  # dev_login defaults to false
    assert h.settings.dev_login is False
    assert (await h.client.get("/auth/dev-login")).status == 404
    assert (await h.client.post("/auth/dev-login", data={"state": "s", "login": "x"})).status == 404
    # and /auth/login goes to GitHub, never to the development form
    start = await h.client.get("/auth/login", allow_redirects=False)
    assert start.headers["Location"].startswith(h.github.url)


async def test_no_github_app_and_no_dev_login_is_a_clear_page(make_app: AppFactory) -> None:
    h = await make_app(github_client_id="")
    resp = await h.client.get("/auth/login", allow_redirects=False)
    assert resp.status == 503
    assert "not configured" in await resp.text()
