"""Attack review of issue 17: a platform cookie name sent twice.

A page in mallory's environment sets `userland_origin=<hers>; Domain=ide.test` (or the platform
cookie for a parent of the platform host) from script: the gateway cannot see that, and every
browser that visits her page then sends two cookies of that name to the sibling hosts. The
gateway kept the last one (aiohttp's rule), so `userland_session=<victim's>;
userland_session=<mallory's>` was served as mallory: the victim's browser worked in mallory's
account (what they typed or uploaded landed in hers), or was shown her refusal pages. Now a
request carrying a platform cookie name twice is refused with a page that says how to recover,
on every host and in both cookie modes (local http names, `__Host-` names).

What is real: the gateway (auth routes, sessions in Redis made the way logins make them, origin
sessions made by a real handoff), echo upstreams for the environments and the web UI.
tests/browser/test_cookie_shadowing.py plants the cookie from a real page in Chromium.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from .conftest import IDE_HOST, PUBLIC_HOST, EchoFactory, GatewayFactory, Origins, World

ALICE_HOST = f"alice.{IDE_HOST}"


def names(secure: bool) -> tuple[str, str]:
    prefix = "__Host-" if secure else ""
    return prefix + "userland_session", prefix + "userland_origin"


@pytest.fixture(params=[False, True], ids=["http names", "__Host- names"])
def secure(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def _setup(world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
                 secure: bool) -> tuple[Any, Any, Any, Any]:
    alice_env, mallory_env, web_ui = (await echo_factory("alice-env"), await echo_factory("mallory-env"),
                                      await echo_factory("web-ui"))
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", alice_env)
    await world.environment("vscode", "mallory", mallory_env)
    gw = await gateway_factory(web_url=web_ui.url, cookie_secure=secure)
    return gw, alice_env, mallory_env, web_ui


async def test_the_platform_cookie_twice_is_refused_never_served_as_the_planted_one(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        secure: bool) -> None:
    gw, _, _, web_ui = await _setup(world, echo_factory, gateway_factory, secure)
    session_name, _ = names(secure)
    alice, mallory = await sessions("alice"), await sessions("mallory")
    # Alone, each works.
    resp = await gw.get("/me", headers={"Host": PUBLIC_HOST, "Cookie": f"{session_name}={alice}"})
    assert ("X-User", "alice") in [tuple(h) for h in (await resp.json())["headers"]]
    # The victim's own cookie first, the planted one (newer, or with a longer path) after it;
    # before: served as mallory, the web UI told "X-User: mallory".
    for planted in (f"{session_name}={alice}; {session_name}={mallory}",
                    f"{session_name}={mallory}; app=1; {session_name}={alice}",
                    f"{session_name}={alice};  {session_name} ={mallory}"):
        resp = await gw.get("/me", headers={"Host": PUBLIC_HOST, "Cookie": planted, "Accept": "text/html"})
        assert resp.status == 400, (planted, await resp.text())
        page = await resp.text()
        assert "two sign-in cookies" in page and 'href="/auth/clear-cookies"' in page
    # Two Cookie header lines (no browser sends them; a script might) count the same.
    resp = await gw.get("/me", headers=[("Host", PUBLIC_HOST), ("Cookie", f"{session_name}={alice}"),
                                        ("Cookie", f"{session_name}={mallory}")])
    assert resp.status == 400
    assert len(web_ui.requests) == 1  # only the first, lone-cookie request reached the web UI


async def test_the_origin_cookie_twice_is_refused_on_a_students_origin(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        secure: bool) -> None:
    gw, alice_env, mallory_env, _ = await _setup(world, echo_factory, gateway_factory, secure)
    _, origin_name = names(secure)
    proto = "http"  # the test gateway's public URL (origins are on its scheme)
    alice = await origins.login("alice", f"{proto}://{ALICE_HOST}")
    mallory = await origins.login("mallory", f"{proto}://mallory.{IDE_HOST}")
    resp = await gw.get("/x", headers={"Host": ALICE_HOST, "Cookie": f"{origin_name}={alice}"})
    assert (await resp.json())["upstream"] == "alice-env"
    # Before: the planted cookie of mallory won, and alice got "Not your environment ... signed in
    # as mallory" with a link to mallory's environment.
    resp = await gw.get("/x", headers={"Host": ALICE_HOST, "Accept": "text/html",
                                       "Cookie": f"{origin_name}={alice}; {origin_name}={mallory}"})
    assert resp.status == 400
    page = await resp.text()
    assert "two sign-in cookies" in page and 'href="/__userland/clear-cookies"' in page
    assert "mallory" not in page
    # A WebSocket upgrade and an unsafe method are refused the same way.
    both = {"Host": ALICE_HOST, "Origin": f"{proto}://{ALICE_HOST}",
            "Cookie": f"{origin_name}={alice}; {origin_name}={mallory}"}
    resp = await gw.post("/save", data=b"x", headers=both)
    assert resp.status == 400
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.ws_connect("/ws", headers=both)
    assert refused.value.status == 400
    # The bare Template host does not send such a browser on either.
    resp = await gw.get("/", headers={"Host": IDE_HOST, "Cookie": f"{origin_name}=a; {origin_name}=b"},
                        allow_redirects=False)
    assert resp.status == 400
    assert len(alice_env.requests) == 1 and len(mallory_env.requests) == 0


async def test_other_cookies_and_other_spellings_pass(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    gw, alice_env, _, _ = await _setup(world, echo_factory, gateway_factory, False)
    alice = await origins.login("alice")
    for cookies in (f"userland_origin={alice}; app=1; app=2",  # the app's own cookie twice: its business
                    f"userland_origin={alice}; Userland_Origin=x",  # another name to the gateway
                    f"__Host-userland_origin=x; userland_origin={alice}",  # not read in this mode
                    f"userland_origin={alice}; userland_session=x; userland_login=y"):
        resp = await gw.get("/x", headers={"Host": ALICE_HOST, "Cookie": cookies})
        assert resp.status == 200 and (await resp.json())["upstream"] == "alice-env", cookies
    assert len(alice_env.requests) == 4


async def test_the_clearing_link_clears_only_a_browser_that_sent_a_cookie_twice(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        secure: bool) -> None:
    gw, _, _, _ = await _setup(world, echo_factory, gateway_factory, secure)
    session_name, origin_name = names(secure)
    twice = {"Cookie": f"{origin_name}=a; {origin_name}=b"}
    resp = await gw.get("/__userland/clear-cookies", headers={"Host": ALICE_HOST, **twice},
                        allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/"
    assert resp.headers["Clear-Site-Data"] == '"cookies"'
    cleared = resp.headers.getall("Set-Cookie")
    assert all("Max-Age=0" in c for c in cleared)
    if secure:  # `__Host-` cookies are host-only with Path=/: nothing else to name
        assert f"{origin_name}=; Path=/;" in " ".join(cleared)
        assert not any("Domain=" in c for c in cleared)
    else:  # the planted one may sit on any parent domain, at / or /auth/
        assert any(c.startswith(f"{origin_name}=; Domain={IDE_HOST}; Path=/;") for c in cleared)
        assert any(c.startswith(f"{session_name}=; Domain=test; Path=/auth/;") for c in cleared)
    # On the platform host, its own address (its /__userland/ is the web UI's).
    resp = await gw.get("/auth/clear-cookies", allow_redirects=False,
                        headers={"Host": PUBLIC_HOST, "Cookie": f"{session_name}=a; {session_name}=b"})
    assert resp.status == 303 and resp.headers["Clear-Site-Data"] == '"cookies"'
    # A link from elsewhere to a browser with nothing wrong clears nothing (no cross-site sign-out).
    for host, path in ((ALICE_HOST, "/__userland/clear-cookies"), (PUBLIC_HOST, "/auth/clear-cookies")):
        resp = await gw.get(path, headers={"Host": host, "Cookie": f"{session_name}=a; {origin_name}=b"},
                            allow_redirects=False)
        assert resp.status == 303 and "Clear-Site-Data" not in resp.headers
        assert "Set-Cookie" not in resp.headers
    # After clearing, the student signs in again and is served.
    alice = await origins.login("alice")
    resp = await gw.get("/x", headers={"Host": ALICE_HOST, "Cookie": f"{origin_name}={alice}"})
    assert resp.status == 200
