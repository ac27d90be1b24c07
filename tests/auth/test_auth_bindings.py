"""A login is bound to its first GitHub id; admins can see and clear a binding."""

from __future__ import annotations

import re

from authflow import SESSION_COOKIE, AppFactory, Harness
from fakes.github import FakeUser

from userland.platform.model.keyspace import login_binding_key

BINDING_KEY = login_binding_key("dora")


async def _session_csrf(h: Harness, cookie: str) -> str:
    session = await h.store.load(cookie)
    assert session is not None
    return session.csrf


def _cookie(cookie: str) -> dict[str, str]:
    return {"Cookie": f"{SESSION_COOKIE}={cookie}"}


async def test_a_renamed_login_taken_by_another_account_is_refused_then_released(
        make_app: AppFactory) -> None:
    h = await make_app(admins=("boss",))
    h.github.add_user("Dora", 100)
    h.github.add_user("boss", 1)
    await h.login("dora")
    assert await h.redis.hgetall(BINDING_KEY) == {b"github_id": b"100", b"bound_at": await h.redis.hget(
        BINDING_KEY, "bound_at")}

    # Dora renames away; a different account (id 200) registers the name "dora".
    h.github.users["dora"] = FakeUser(login="dora", id=200)
    h.github.sign_in("dora")
    authorize_url, nonce = await h.start_login()
    resp = await h.callback(await h.authorize(authorize_url), nonce)
    assert resp.status == 403
    assert "different GitHub account" in await resp.text()
    assert SESSION_COOKIE not in resp.headers.get("Set-Cookie", "")

    # An admin sees the binding ...
    _, admin_cookie = await h.login("boss")
    seen = await h.client.get("/auth/admin/bindings/Dora", headers=_cookie(admin_cookie))
    assert seen.status == 200
    body = await seen.json()
    assert (body["login"], body["github_id"]) == ("dora", 100)

    # ... and clears it with the CSRF token of their session.
    csrf = await _session_csrf(h, admin_cookie)
    cleared = await h.client.post("/auth/admin/bindings/dora/clear", data={"csrf": csrf},
                                  headers=_cookie(admin_cookie))
    assert cleared.status == 200
    assert "no longer bound" in await cleared.text()
    assert await h.redis.exists(BINDING_KEY) == 0
    missing = await h.client.get("/auth/admin/bindings/dora", headers=_cookie(admin_cookie))
    assert missing.status == 404 and (await missing.json())["github_id"] is None

    # Now the new owner of the name can sign in, and is bound.
    resp, cookie = await h.login("dora")
    assert (await h.verify(cookie)).headers["X-User"] == "dora"
    assert await h.redis.hget(BINDING_KEY, "github_id") == b"200"


async def test_same_account_logs_in_again_fine(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("dora", 100)
    await h.login("dora")
    await h.login("DORA")
    assert await h.redis.hget(BINDING_KEY, "github_id") == b"100"


async def test_binding_admin_routes_need_an_admin_and_the_csrf_token(make_app: AppFactory) -> None:
    h = await make_app(admins=("boss",), instructors=("teach",))
    for login, github_id in (("boss", 1), ("teach", 2), ("dora", 100)):
        h.github.add_user(login, github_id)
    await h.login("dora")
    _, teacher = await h.login("teach")
    _, boss = await h.login("boss")

    # nobody signed in, or not an admin: 403
    assert (await h.client.get("/auth/admin/bindings/dora")).status == 403
    assert (await h.client.get("/auth/admin/bindings/dora", headers=_cookie(teacher))).status == 403
    teacher_csrf = await _session_csrf(h, teacher)
    resp = await h.client.post("/auth/admin/bindings/dora/clear", data={"csrf": teacher_csrf},
                               headers=_cookie(teacher))
    assert resp.status == 403
    resp = await h.client.post("/auth/admin/bindings/dora/clear", data={"csrf": "x"})
    assert resp.status == 403

    # an admin without (or with another session's) CSRF token: 403
    for data in ({}, {"csrf": ""}, {"csrf": teacher_csrf}):
        resp = await h.client.post("/auth/admin/bindings/dora/clear", data=data, headers=_cookie(boss))
        assert resp.status == 403
        assert resp.content_type == "text/html"
    assert await h.redis.hget(BINDING_KEY, "github_id") == b"100"

    # invalid login names are a 400
    bad = await h.client.get("/auth/admin/bindings/-bad-", headers=_cookie(boss))
    assert bad.status == 400


async def test_an_admins_browser_gets_a_page_with_the_release_form(make_app: AppFactory) -> None:
    """The web UI's admin page sends its look-up here: a browser gets a page saying whose the
    name is, with the form that releases it (the gateway session's own CSRF token), not JSON
    that no page can act on."""
    h = await make_app(admins=("boss",))
    h.github.add_user("dora", 100)
    h.github.add_user("boss", 1)
    await h.login("dora")
    _, boss = await h.login("boss")
    html = {"Accept": "text/html,application/xhtml+xml", **_cookie(boss)}
    resp = await h.client.get("/auth/admin/bindings/Dora", headers=html)
    page = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html", page
    assert "dora" in page and "100" in page
    form = re.search(r'<form method="post" action="([^"]+)">\s*'
                     r'<input type="hidden" name="csrf" value="([^"]+)">', page)
    assert form is not None, page
    assert form.group(1) == "/auth/admin/bindings/dora/clear"
    assert form.group(2) == await _session_csrf(h, boss)
    released = await h.client.post(form.group(1), data={"csrf": form.group(2)},
                                   headers={**_cookie(boss), "Origin": h.public_url})
    assert released.status == 200 and "no longer bound" in await released.text()
    assert await h.redis.hget(BINDING_KEY, "github_id") is None
    # Unbound now: the page says so, with nothing to release.
    again = await (await h.client.get("/auth/admin/bindings/dora", headers=html)).text()
    assert "not bound" in again and "<form" not in again
    # Scripts keep their JSON.
    data = await (await h.client.get("/auth/admin/bindings/dora", headers=_cookie(boss))).json()
    assert data == {"login": "dora", "github_id": None}
