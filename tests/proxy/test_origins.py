"""Per-student origins through the in-process gateway: the handoff that signs an origin in, who
may have which origin, sign-out through every origin, cross-site requests, and the headers of
the gateway's own pages. Real control plane, Redis and echo upstreams (see conftest.py)."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis.asyncio

from userland.platform.model.keyspace import (
    HANDOFF_PREFIX,
    INVALIDATION_CHANNEL,
    handoff_key,
    origin_session_key,
    pattern,
)
from userland.proxy.pages import CONTENT_SECURITY_POLICY

from .conftest import (
    IDE_HOST,
    PUBLIC_HOST,
    PUBLIC_URL,
    EchoFactory,
    GatewayFactory,
    World,
)

ALICE = f"http://alice.{IDE_HOST}"
HTML = {"Accept": "text/html"}
CLEARED = '"cache", "cookies", "storage", "executionContexts"'


def platform(cookie: str) -> dict[str, str]:
    return {"Host": PUBLIC_HOST, "Cookie": f"userland_session={cookie}"}


def location(resp: Any) -> tuple[str, dict[str, str]]:
    """(scheme://host/path, query) of a redirect."""
    parts = urlsplit(resp.headers["Location"])
    return f"{parts.scheme}://{parts.netloc}{parts.path}", {k: v[0] for k, v in parse_qs(parts.query).items()}


def host_of(url: str) -> str:
    return urlsplit(url).netloc


async def follow_handoff(gw: Any, platform_cookie: str, origin: str, path: str = "/lab?x=1") -> Any:
    """A browser on `origin` without its cookie, signed in on the platform: the handoff's
    redirects one by one; returns the response of `/__userland/handoff` on the origin."""
    first = await gw.get(path, headers={"Host": host_of(origin), **HTML}, allow_redirects=False)
    assert first.status == 302
    url, query = location(first)
    assert url == f"{PUBLIC_URL}/auth/handoff" and query == {"origin": origin, "next": path}
    second = await gw.get(first.headers["Location"].removeprefix(PUBLIC_URL),
                          headers=platform(platform_cookie), allow_redirects=False)
    assert second.status == 302, await second.text()
    url, query = location(second)
    assert url.startswith("http://") and url.endswith("/__userland/handoff"), url
    return await gw.get(second.headers["Location"].split(host_of(url), 1)[1],
                        headers={"Host": host_of(url)}, allow_redirects=False)


@pytest.fixture
async def setup(world: World, echo_factory: EchoFactory) -> tuple[Any, Any]:
    alice_env, bob_env = await echo_factory("alice-env"), await echo_factory("bob-env")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", alice_env)
    await world.environment("vscode", "bob", bob_env)
    return alice_env, bob_env


async def test_handoff_gives_the_origin_its_own_cookie_and_the_code_works_once(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory, sessions: Any, redis_url: str) -> None:
    _, bob_env = setup
    gw = await gateway_factory()
    alice = await sessions("alice")
    done = await follow_handoff(gw, alice, ALICE)
    assert done.status == 302 and done.headers["Location"] == "/lab?x=1"
    cookie = done.cookies["userland_origin"]
    assert cookie["httponly"] and cookie["path"] == "/" and cookie["samesite"] == "Lax"
    assert cookie["domain"] == ""  # host-only: no other origin ever gets it
    resp = await gw.get("/lab?x=1", headers={"Host": f"alice.{IDE_HOST}",
                                             "Cookie": f"userland_origin={cookie.value}"})
    assert (await resp.json())["upstream"] == "alice-env"
    # The platform's cookie on the student's origin is worth nothing (and never sent upstream).
    resp = await gw.get("/", headers={"Host": f"alice.{IDE_HOST}", "Cookie": f"userland_session={alice}"})
    assert resp.status == 401

    # A code is single-use, lives 60 s at most, and only works on the origin it was made for.
    client = redis.asyncio.from_url(redis_url)
    try:
        issued = await gw.get("/auth/handoff", params={"origin": ALICE, "next": "/"},
                              headers=platform(alice), allow_redirects=False)
        code = location(issued)[1]["code"]
        # Stored under its hash (other tests' codes may still be live: look up this one).
        keys = [k.decode() for k in await client.keys(pattern(HANDOFF_PREFIX))]
        key = handoff_key(code)
        assert key in keys and not any(code in k for k in keys)
        assert 0 < await client.ttl(key) <= 60
        elsewhere = await gw.get("/__userland/handoff", params={"code": code, "next": "/"},
                                 headers={"Host": f"bob.{IDE_HOST}"}, allow_redirects=False)
        assert elsewhere.status == 403 and "userland_origin" not in elsewhere.cookies
        # ... and that attempt used it up.
        again = await gw.get("/__userland/handoff", params={"code": code, "next": "/"},
                             headers={"Host": f"alice.{IDE_HOST}"}, allow_redirects=False)
        assert again.status == 403 and "expired" in await again.text()
        for bad in ("", "x" * 43, "x" * 5000):
            resp = await gw.get("/__userland/handoff", params={"code": bad},
                                headers={"Host": f"alice.{IDE_HOST}"}, allow_redirects=False)
            assert resp.status == 403
    finally:
        await client.aclose()
    assert bob_env.requests == []


async def test_secure_cookies_use_the_host_prefix(setup: tuple[Any, Any], gateway_factory: GatewayFactory,
                                                  sessions: Any) -> None:
    gw = await gateway_factory(cookie_secure=True)
    alice = await sessions("alice")
    issued = await gw.get("/auth/handoff", params={"origin": ALICE, "next": "/"},
                          headers={"Host": PUBLIC_HOST, "Cookie": f"__Host-userland_session={alice}"},
                          allow_redirects=False)
    code = location(issued)[1]["code"]
    done = await gw.get("/__userland/handoff", params={"code": code, "next": "/"},
                        headers={"Host": f"alice.{IDE_HOST}"}, allow_redirects=False)
    cookie = done.cookies["__Host-userland_origin"]
    assert cookie["secure"] and cookie["path"] == "/" and cookie["domain"] == ""
    resp = await gw.get("/", headers={"Host": f"alice.{IDE_HOST}",
                                      "Cookie": f"__Host-userland_origin={cookie.value}"})
    assert (await resp.json())["upstream"] == "alice-env"


async def test_someone_elses_origin_is_a_403_with_a_link_to_ones_own(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory, sessions: Any) -> None:
    _, bob_env = setup
    gw = await gateway_factory()
    bob = await sessions("bob")
    resp = await gw.get("/auth/handoff", params={"origin": ALICE, "next": "/"}, headers=platform(bob),
                        allow_redirects=False)
    assert resp.status == 403
    body = await resp.text()
    # It says whose it is (staff reach it from the class dashboard's link, too).
    assert f'href="http://bob.{IDE_HOST}/"' in body and "Only alice can open it" in body
    assert "code" not in resp.headers.get("Location", "")
    # The bare Template host means "mine": bob's own origin.
    bare = await gw.get("/somewhere", headers={"Host": IDE_HOST}, allow_redirects=False)
    assert location(bare) == (f"{PUBLIC_URL}/auth/handoff",
                              {"origin": f"http://{IDE_HOST}", "next": "/somewhere"})
    mine = await gw.get(bare.headers["Location"].removeprefix(PUBLIC_URL), headers=platform(bob),
                        allow_redirects=False)
    url, query = location(mine)
    assert url == f"http://bob.{IDE_HOST}/__userland/handoff" and query["next"] == "/somewhere"
    assert bob_env.requests == []


@pytest.mark.parametrize("origin", [
    "http://evil.example", f"https://alice.{IDE_HOST}", f"http://alice.{IDE_HOST}:8443",
    f"http://a.b.{IDE_HOST}", f"http://-x.{IDE_HOST}", "http://userland.test", "", "javascript:x",
    f"http://alice.{IDE_HOST}/path", f"http://user@alice.{IDE_HOST}",
])
async def test_handoff_only_for_origins_this_platform_serves(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory, sessions: Any, origin: str) -> None:
    gw = await gateway_factory()
    resp = await gw.get("/auth/handoff", params={"origin": origin, "next": "/"},
                        headers=platform(await sessions("alice")), allow_redirects=False)
    assert resp.status == 400 and "Location" not in resp.headers


@pytest.mark.parametrize(("next_path", "lands"), [
    ("//evil.example/x", "/"), ("https://evil.example/", "/"), ("/\\evil.example", "/"),
    ("/ok/path?q=1", "/ok/path?q=1"),
])
async def test_handoff_next_stays_on_the_origin(setup: tuple[Any, Any], gateway_factory: GatewayFactory,
                                                sessions: Any, next_path: str, lands: str) -> None:
    gw = await gateway_factory()
    issued = await gw.get("/auth/handoff", params={"origin": ALICE, "next": next_path},
                          headers=platform(await sessions("alice")), allow_redirects=False)
    code = location(issued)[1]["code"]
    done = await gw.get("/__userland/handoff", params={"code": code, "next": next_path},
                        headers={"Host": f"alice.{IDE_HOST}"}, allow_redirects=False)
    assert done.headers["Location"] == lands


async def test_signed_out_on_the_platform_the_handoff_asks_for_a_login_first(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory) -> None:
    gw = await gateway_factory()
    resp = await gw.get("/auth/handoff", params={"origin": ALICE, "next": "/x"},
                        headers={"Host": PUBLIC_HOST}, allow_redirects=False)
    url, query = location(resp)
    assert url == ":///auth/login"  # a path on the platform host (no scheme, no host)
    assert query["next"].startswith("/auth/handoff?") and "alice.ide.test" in query["next"]


async def test_sign_out_ends_every_origin_and_clears_each_in_turn(
        setup: tuple[Any, Any], world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
        sessions: Any, redis_url: str) -> None:
    await world.template("pma", host="pma.test")
    await world.environment("pma", "alice", await echo_factory("alice-pma"))
    gw = await gateway_factory()
    alice = await sessions("alice")
    cookies = {}
    for origin in (ALICE, "http://alice.pma.test"):
        done = await follow_handoff(gw, alice, origin)
        cookies[origin] = done.cookies["userland_origin"].value
    bob = await sessions("bob")
    bob_origin = (await follow_handoff(gw, bob, f"http://bob.{IDE_HOST}")).cookies["userland_origin"].value

    form = await gw.get("/auth/logout", headers=platform(alice))
    csrf = re.search(r'name="csrf" value="([^"]+)"', await form.text())
    assert csrf is not None
    # Cross-site sign-out attempts are refused before the token is even looked at.
    for origin in (ALICE, "http://evil.example", "null"):
        resp = await gw.post("/auth/logout", data={"csrf": csrf.group(1)},
                             headers={**platform(alice), "Origin": origin}, allow_redirects=False)
        assert resp.status == 403
    resp = await gw.post("/auth/logout", data={"csrf": csrf.group(1)},
                         headers={**platform(alice), "Origin": PUBLIC_URL, "Sec-Fetch-Site": "same-origin"},
                         allow_redirects=False)
    assert resp.status == 303
    # Server side, at once: every origin of that login is gone (bob's is not).
    for origin, cookie in cookies.items():
        gone = await gw.get("/", headers={"Host": host_of(origin), "Cookie": f"userland_origin={cookie}"})
        assert gone.status == 401, origin
    client = redis.asyncio.from_url(redis_url)
    try:
        def key(cookie: str) -> str:
            return origin_session_key(hashlib.sha256(cookie.encode()).hexdigest())

        assert [await client.exists(key(c)) for c in cookies.values()] == [0, 0]
        assert await client.exists(key(bob_origin)) == 1
    finally:
        await client.aclose()
    still = await gw.get("/", headers={"Host": f"bob.{IDE_HOST}", "Cookie": f"userland_origin={bob_origin}"})
    assert (await still.json())["upstream"] == "bob-env"

    # Then the browser visits each of alice's origins, which clear their data, and ends home.
    visited = []
    url = resp.headers["Location"]
    while url.startswith("http://") and "/__userland/signed-out" in url:
        host = host_of(url)
        step = await gw.get(url.split(host, 1)[1], headers={"Host": host}, allow_redirects=False)
        assert step.status == 302 and step.headers["Clear-Site-Data"] == CLEARED, url
        assert step.cookies["userland_origin"]["max-age"] == "0"
        visited.append(host)
        url = step.headers["Location"]
    assert sorted(visited) == ["alice.ide.test", "alice.pma.test"]
    assert url.startswith(f"{PUBLIC_URL}/auth/signed-out?chain=")
    last = await gw.get(url.removeprefix(PUBLIC_URL), headers={"Host": PUBLIC_HOST}, allow_redirects=False)
    assert last.status == 302 and last.headers["Location"] == "/"
    assert last.headers["Clear-Site-Data"] == CLEARED
    # The chain is used up: replaying a step clears nothing.
    replay = await gw.get(url.removeprefix(PUBLIC_URL), headers={"Host": PUBLIC_HOST}, allow_redirects=False)
    assert "Clear-Site-Data" not in replay.headers


async def test_signed_out_endpoint_without_a_real_sign_out_clears_nothing(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory) -> None:
    """The attack: a link to alice.ide.../__userland/signed-out would wipe her environment's
    storage; only a live sign-out chain naming that origin clears anything."""
    gw = await gateway_factory()
    for query in ("", "?chain=made-up&step=0", "?chain=&step=x"):
        resp = await gw.get(f"/__userland/signed-out{query}", headers={"Host": f"alice.{IDE_HOST}"},
                            allow_redirects=False)
        assert resp.status == 200 and "Clear-Site-Data" not in resp.headers
        assert "Set-Cookie" not in resp.headers
    resp = await gw.get("/auth/signed-out?chain=made-up", headers={"Host": PUBLIC_HOST},
                        allow_redirects=False)
    assert resp.status == 302 and "Clear-Site-Data" not in resp.headers


async def test_the_gateways_own_prefix_never_reaches_the_environment(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory, origins: Any) -> None:
    alice_env, _ = setup
    gw = await gateway_factory()
    cookie = {"Cookie": f"userland_origin={await origins.login('alice')}"}
    for method, path in (("GET", "/__userland/"), ("GET", "/__userland/anything"),
                         ("POST", "/__userland/handoff"), ("HEAD", "/__userland/handoff?code=x")):
        resp = await gw.request(method, path, headers={"Host": f"alice.{IDE_HOST}", **cookie})
        assert resp.status in (404, 405)
    assert alice_env.requests == []


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "PROPFIND"])
async def test_unsafe_methods_only_from_the_requests_own_origin(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory, origins: Any, method: str) -> None:
    alice_env, _ = setup
    gw = await gateway_factory()
    alice = {"Host": f"alice.{IDE_HOST}", "Cookie": f"userland_origin={await origins.login('alice')}"}
    for headers in ({"Origin": f"http://bob.{IDE_HOST}"}, {"Origin": "http://evil.example"},
                    {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        resp = await gw.request(method, "/api/files", data=b"x", headers={**alice, **headers})
        assert resp.status == 403, headers
        assert "another site" in await resp.text()
    assert alice_env.requests == []
    # Her own pages, and clients that are no browser (no Origin, no Sec-Fetch-Site), pass.
    for headers in ({"Origin": ALICE, "Sec-Fetch-Site": "same-origin"}, {}):
        resp = await gw.request(method, "/api/files", data=b"x", headers={**alice, **headers})
        assert (await resp.json())["method"] == method
    # A CORS preflight carries the other site's Origin: the environment answers it.
    resp = await gw.options("/api/files", headers={**alice, "Origin": "http://evil.example"})
    assert (await resp.json())["method"] == "OPTIONS"


def style_hash(page: str) -> str:
    block = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert block is not None
    return "'sha256-" + base64.b64encode(hashlib.sha256(block.group(1).encode()).digest()).decode() + "'"


async def test_the_gateways_own_pages_carry_strict_headers_environments_do_not(
        setup: tuple[Any, Any], echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Any,
        sessions: Any) -> None:
    web_ui = await echo_factory("web-ui")
    gw = await gateway_factory(web_url=web_ui.url)
    alice = {"Host": f"alice.{IDE_HOST}", "Cookie": f"userland_origin={await origins.login('alice')}"}
    own = [
        await gw.get("/", headers={"Host": "evil.example"}),  # 404 page
        await gw.get("/", headers={"Host": IDE_HOST}, allow_redirects=False),  # redirect
        await gw.get("/", headers={"Host": f"carol.{IDE_HOST}", **HTML}, allow_redirects=False),
        await gw.get("/auth/logout", headers={"Host": PUBLIC_HOST}),  # an auth page
        await gw.get("/auth/handoff?origin=x", headers={"Host": PUBLIC_HOST}),  # an auth error page
        await gw.post("/", headers={**alice, "Origin": "http://evil.example"}),  # the 403 refusal
        await gw.get("/__userland/signed-out", headers={"Host": f"alice.{IDE_HOST}"}),
    ]
    for resp in own:
        assert resp.headers["X-Frame-Options"] == "DENY", resp.url
        assert resp.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Referrer-Policy"] == "same-origin"
    csp = CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script-src" not in csp
    for resp in (own[0], own[3]):  # both kinds of page: their stylesheet is the one the policy allows
        page = await resp.text()
        assert style_hash(page) in csp and "<script" not in page
    web_cookie = {"Cookie": f"userland_session={await sessions('x')}"}
    forwarded = [await gw.get("/", headers=alice),
                 await gw.get("/", headers={"Host": PUBLIC_HOST, **web_cookie})]
    for resp in forwarded:
        assert (await resp.json())["upstream"] in ("alice-env", "web-ui")
        for name in ("X-Frame-Options", "Content-Security-Policy", "Referrer-Policy"):
            assert name not in resp.headers


async def test_sign_out_announces_each_origin_session_it_ends(
        setup: tuple[Any, Any], gateway_factory: GatewayFactory, sessions: Any, redis_url: str) -> None:
    """Other gateway replicas cache lookups: they learn at once which origin sessions ended."""
    gw = await gateway_factory()
    alice = await sessions("alice")
    origin_cookie = (await follow_handoff(gw, alice, ALICE)).cookies["userland_origin"].value
    client = redis.asyncio.from_url(redis_url)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(INVALIDATION_CHANNEL)
        form = await gw.get("/auth/logout", headers=platform(alice))
        csrf = re.search(r'name="csrf" value="([^"]+)"', await form.text())
        assert csrf is not None
        await gw.post("/auth/logout", data={"csrf": csrf.group(1)}, headers=platform(alice),
                      allow_redirects=False)
        digest = hashlib.sha256(origin_cookie.encode()).hexdigest()
        announced: list[str] = []
        for _ in range(20):  # (the platform session may be announced on the channel too)
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if message is not None:
                announced.append(message["data"].decode())
            if digest in announced:
                break
        assert digest in announced
        assert origin_cookie not in str(announced)  # the digest only, never the cookie
    finally:
        await pubsub.aclose()
        await client.aclose()
