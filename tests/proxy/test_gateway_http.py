"""The gateway in-process against the real control plane, real Redis and real echo upstreams."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from multidict import CIMultiDict
from yarl import URL

from tests.support import eventually
from userland.platform.clients.kube import SERVICES, USERLANDS, KubeClient
from userland.platform.model import identity, naming

from .conftest import (
    IDE_HOST,
    PUBLIC_HOST,
    PUBLIC_URL,
    SECRET,
    EchoFactory,
    GatewayFactory,
    InternalOf,
    Origins,
    World,
    origin_cookie,
    routes_of,
)

ALICE_HOST = f"alice.{IDE_HOST}"  # alice's own origin under the Template host
HTML = {"Accept": "text/html,application/xhtml+xml"}


def cookie(session: str) -> dict[str, str]:
    """The platform's session cookie (the platform host, and path routes on it)."""
    return {"Cookie": f"userland_session={session}"}


async def raw_get(gw: Any, path_qs: str, headers: dict[str, str]) -> Any:
    """GET with the path and query sent byte for byte (the test client would requote them)."""
    url = URL(str(gw.make_url("/")).rstrip("/") + path_qs, encoded=True)
    return await gw.session.get(url, headers=headers, allow_redirects=False)


def header_values(seen: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in seen["headers"] if k.lower() == name.lower()]


def env_identity(seen: dict[str, Any]) -> identity.Identity:
    """The identity an environment received, verified as an environment would."""
    headers = CIMultiDict((k, v) for k, v in seen["headers"])
    return identity.verify_identity(headers, SECRET, audience="env")


async def test_routes_by_host_to_the_users_own_environment(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    alice_echo = await echo_factory("alice-upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", alice_echo)
    gw = await gateway_factory()
    session = await origins.login("alice")
    resp = await raw_get(gw, "/some/path%2Fx?a=1&b=%2F&c", {"Host": ALICE_HOST, **origin_cookie(session)})
    assert resp.status == 200
    seen = await resp.json()
    assert seen["upstream"] == "alice-upstream"
    assert seen["path_qs"] == "/some/path%2Fx?a=1&b=%2F&c"
    assert header_values(seen, "X-User") == ["alice"]
    assert env_identity(seen).login == "alice"
    assert header_values(seen, "X-Forwarded-Host") == [ALICE_HOST]
    assert header_values(seen, "X-Forwarded-Proto") == ["http"]
    assert header_values(seen, "X-Forwarded-For") == ["127.0.0.1"]
    assert header_values(seen, "Host") == [ALICE_HOST]


async def test_routes_by_path_prefix_longest_first(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    nb, gpu = await echo_factory("nb"), await echo_factory("gpu")
    await world.template("nb", prefix="/nb/")
    await world.template("gpu", prefix="/nb/gpu/")
    await world.environment("nb", "alice", nb)
    await world.environment("gpu", "alice", gpu)
    gw = await gateway_factory(allow_path_routes=True)
    session = await sessions("alice")
    for path, upstream in [("/nb/lab", "nb"), ("/nb/gpu/lab?q=1", "gpu"), ("/nb", "nb")]:
        resp = await gw.get(path, headers={"Host": PUBLIC_HOST, **cookie(session)})
        seen = await resp.json()
        assert (seen["upstream"], seen["path_qs"]) == (upstream, path)


async def test_path_routes_are_off_unless_allowed_the_platform_host_serves_no_environment(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    nb, web_ui = await echo_factory("nb"), await echo_factory("web-ui")
    await world.template("nb", prefix="/nb/")
    await world.environment("nb", "alice", nb)
    session = await sessions("alice")
    gw = await gateway_factory(web_url=web_ui.url)
    for host in (PUBLIC_HOST, "other.test", ALICE_HOST):
        resp = await gw.get("/nb/lab", headers={"Host": host, **cookie(session), **HTML})
        if host == PUBLIC_HOST:
            assert (await resp.json())["upstream"] == "web-ui"  # the web UI, not an environment
        else:
            assert resp.status == 404
    assert nb.requests == []
    with caplog.at_level("WARNING", logger="userland.proxy.app"):
        await gateway_factory(allow_path_routes=True)
    assert any("USERLAND_ALLOW_PATH_ROUTES" in r.getMessage() for r in caplog.records)


SPOOF_CASES: list[list[tuple[str, str]]] = [
    [("X-User", "bob")],
    [("x_user", "bob")],
    [("X-USER", "bob")],
    [("X-User", "bob"), ("X-User", "carol")],
    [("X-Forwarded-User", "bob")],
    [("X-Forwarded-Email", "bob@example.edu")],
    [("X-User-Signature", identity.sign(identity.Identity("bob"), SECRET))],
    [("X-User", "bob"), ("X-User-Signature", identity.sign(identity.Identity("bob"), SECRET))],
    [("Cookie", "userland_session=forged-for-bob")],
    [("Cookie", "__Host-userland_session=x; __Host-userland_origin=y; userland_login=z")],
    [("X-Forwarded-For", "10.9.9.9"), ("Forwarded", "for=10.9.9.9;host=pma.test")],
]


async def test_spoofing_attempts_reach_the_upstream_as_the_logged_in_user(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    alice_echo, bob_echo = await echo_factory("alice-upstream"), await echo_factory("bob-upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", alice_echo)
    await world.environment("vscode", "bob", bob_echo)
    gw = await gateway_factory()
    session = await origins.login("alice")
    for spoof in SPOOF_CASES:
        headers: list[tuple[str, str]] = [("Host", ALICE_HOST), ("Cookie", f"userland_origin={session}"),
                                          ("Cookie", "app=keep"), *spoof]
        resp = await gw.get("/whoami", headers=headers)
        seen = await resp.json()
        assert seen["upstream"] == "alice-upstream", spoof
        assert header_values(seen, "X-User") == ["alice"], spoof
        signatures = header_values(seen, "X-User-Signature")
        assert len(signatures) == 1 and env_identity(seen).login == "alice", spoof
        assert header_values(seen, "X-Forwarded-For") == ["127.0.0.1"], spoof
        assert not header_values(seen, "Forwarded") and not header_values(seen, "X-Forwarded-User")
        assert seen["cookie_header"] == ["app=keep"], spoof  # the app's cookie only, never a session
        assert "bob" not in json.dumps(seen["headers"]), spoof
    assert bob_echo.requests == []


async def test_a_student_never_reaches_another_students_environment(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    bob_echo = await echo_factory("bob-upstream")
    alice_pma = await echo_factory("alice-pma")
    await world.template("vscode", host=IDE_HOST)
    await world.template("pma", host="pma.test")
    await world.environment("vscode", "bob", bob_echo)  # alice has no vscode environment
    await world.environment("pma", "alice", alice_pma)
    await world.service("pma", "bob", upstream=bob_echo.url)
    await world.userland("pma", "bob")
    gw = await gateway_factory()
    alice_ide = origin_cookie(await origins.login("alice"))
    alice_pma_cookie = origin_cookie(await origins.login("alice", "http://alice.pma.test"))
    attempts: list[tuple[str, dict[str, str], int]] = [
        ("/", {"Host": ALICE_HOST, **alice_ide}, 403),  # her own origin: no environment there
        ("/?user=bob", {"Host": ALICE_HOST, "X-User": "bob", **alice_ide}, 403),
        (f"/{naming.service_name('vscode', 'bob')}", {"Host": ALICE_HOST, **alice_ide}, 403),
        # bob's origins with alice's cookies (as if copied there): not served to her
        ("/", {"Host": f"bob.{IDE_HOST}", **alice_ide}, 403),
        ("/", {"Host": "bob.pma.test", **alice_pma_cookie}, 403),
        ("/", {"Host": "BOB.pma.test.", **alice_pma_cookie}, 403),
        # one origin's cookie on her other origin: bound to the origin it was made for
        ("/", {"Host": "alice.pma.test", **alice_ide}, 403),
        # bob's origin without a cookie: on to the platform's handoff, which knows who is asking
        ("/", {"Host": f"bob.{IDE_HOST}"}, 302),
        ("/", {"Host": "bob.pma.test", "X-Forwarded-User": "bob"}, 302),
        ("/", {"Host": "pma.test", **alice_pma_cookie}, 302),  # the bare Template host
        ("/index.php", {"Host": "alice.pma.test", **alice_pma_cookie}, 200),
    ]
    for path, headers, status in attempts:
        resp = await gw.get(path, headers={**headers, **HTML}, allow_redirects=False)
        body = await resp.text()
        assert resp.status == status, (path, headers)
        if status == 200:
            assert json.loads(body)["upstream"] == "alice-pma", (path, headers)
        elif status == 302:
            assert resp.headers["Location"].startswith(f"{PUBLIC_URL}/auth/handoff?"), (path, headers)
        elif "alice.ide.test" in headers["Host"].lower() or headers["Host"] == ALICE_HOST:
            assert "ask your instructor" in body.lower(), (path, headers)
        elif headers["Host"] == "alice.pma.test":
            assert "sign-in of another of your addresses" in body, (path, headers)
        else:
            assert "This is bob&#39;s environment" in body and "Only bob can open it" in body, (path, headers)
    assert bob_echo.requests == []


async def test_not_logged_in_browser_get_goes_to_the_handoff_with_next(
        world: World, gateway_factory: GatewayFactory) -> None:
    await world.template("vscode", host=IDE_HOST)
    gw = await gateway_factory()
    resp = await gw.get("/project/file.py?line=3", headers={"Host": ALICE_HOST, **HTML},
                        allow_redirects=False)
    assert resp.status == 302
    location = urlsplit(resp.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{PUBLIC_URL}/auth/handoff"
    assert parse_qs(location.query) == {"origin": [f"http://{ALICE_HOST}"],
                                        "next": ["/project/file.py?line=3"]}


@pytest.mark.parametrize(("method", "headers"), [
    ("GET", {"Accept": "application/json"}),
    ("POST", HTML),
    ("GET", {**HTML, "Cookie": "userland_origin=not-a-session"}),
])
async def test_not_logged_in_api_requests_get_401(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
        method: str, headers: dict[str, str]) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    resp = await gw.request(method, "/api", headers={"Host": ALICE_HOST, **headers}, allow_redirects=False)
    if "not-a-session" in headers.get("Cookie", ""):
        assert resp.status == 302  # a browser GET with a stale cookie is sent to sign in again
    else:
        assert resp.status == 401
    assert echo.requests == []


async def test_redis_down_fails_closed_with_503_and_nothing_reaches_the_upstream(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        origins: Origins) -> None:
    from userland.local.controlplane import free_port

    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    session = await sessions("alice")
    origin = await origins.login("alice")
    gw = await gateway_factory(ns_redis_url=f"redis://127.0.0.1:{free_port()}/0")
    for headers in ({"Host": ALICE_HOST, **origin_cookie(origin), **HTML},
                    {"Host": PUBLIC_HOST, **cookie(session)}):
        resp = await gw.get("/", headers=headers, allow_redirects=False)
        assert resp.status == 503
        assert "<html" in (await resp.text()).lower()
    # The handoff's two halves and the sign-out step fail closed too.
    for host, path in ((ALICE_HOST, "/__userland/handoff?code=x"),
                       (ALICE_HOST, "/__userland/signed-out?chain=x"),
                       (PUBLIC_HOST, f"/auth/handoff?origin=http://{ALICE_HOST}")):
        resp = await gw.get(path, headers={"Host": host, **cookie(session)}, allow_redirects=False)
        assert resp.status == 503, path
        assert "Set-Cookie" not in resp.headers and "Location" not in resp.headers
    assert echo.requests == []


async def test_no_userland_gives_the_403_page(
        world: World, gateway_factory: GatewayFactory, origins: Origins) -> None:
    await world.template("vscode", host=IDE_HOST)
    gw = await gateway_factory()
    alice = origin_cookie(await origins.login("alice"))
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **alice, **HTML})
    assert resp.status == 403
    body = await resp.text()
    assert "alice" in body and "ask your instructor" in body.lower()


async def test_not_ready_shows_the_starting_page_until_ready(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        namespace: str) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.userland("vscode", "alice", ready=False)
    gw = await gateway_factory()
    headers = {"Host": ALICE_HOST, **origin_cookie(await origins.login("alice")), **HTML}
    resp = await gw.get("/", headers=headers)
    # 200, not 503: a whole class arriving at once is not a failure (docs/sleep.md).
    assert resp.status == 200
    body = await resp.text()
    assert "Starting your VSCODE" in body and 'http-equiv="refresh"' in body
    # Not the app: its progress, from the Userland's status.
    assert "Finding a place to run it" in body and resp.headers["Cache-Control"] == "no-store"
    # What is not a page navigation gets a clear 503 to retry.
    api = await gw.get("/api/x", headers={"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))})
    assert api.status == 503 and api.headers["Retry-After"].isdigit()
    await world.set_ready("vscode", "alice", True)  # Ready, but no Service yet: still starting
    await eventually(lambda: routes_of(gw).userland(namespace, "vscode", "alice").ready)
    starting = await gw.get("/", headers=headers)  # the starting page (200: not an error)
    assert starting.status == 200 and "Starting your VSCODE" in await starting.text()
    await world.service("vscode", "alice", upstream=None)  # local mode: no upstream annotation yet
    await eventually(lambda: routes_of(gw).service(namespace, naming.service_name("vscode", "alice")))
    starting = await gw.get("/", headers=headers)
    assert starting.status == 200 and "Starting your VSCODE" in await starting.text()
    await world.kube.merge_patch(  # the local runner writes the address
        SERVICES, namespace,
        naming.service_name("vscode", "alice"),
        {"metadata": {"annotations": {naming.ANNOTATION_UPSTREAM: echo.url}}})
    await eventually(lambda: routes_of(gw).service(
        namespace, naming.service_name("vscode", "alice")).upstream_annotation == echo.url)
    resp = await gw.get("/", headers=headers)
    assert resp.status == 200 and (await resp.json())["upstream"] == "upstream"


async def test_self_service_creates_only_on_a_post_with_the_csrf_token_from_its_own_origin(
        world: World, gateway_factory: GatewayFactory, origins: Origins, kube: KubeClient,
        namespace: str) -> None:
    await world.template("vscode", host=IDE_HOST, self_service=True)
    gw = await gateway_factory()
    alice = origin_cookie(await origins.login("Alice"))
    name = naming.userland_name("vscode", "alice")

    async def exists() -> bool:
        return any(u["metadata"]["name"] == name for u in (await kube.list(USERLANDS, namespace))["items"])

    # The attack: a cross-site <img src="https://alice.ide.../"> (a GET) used to create it.
    for accept in ("image/avif,image/webp,*/*", HTML["Accept"]):
        resp = await gw.get("/", headers={"Host": ALICE_HOST, **alice, "Accept": accept,
                                          "Sec-Fetch-Site": "cross-site"})
        assert resp.status == 200
    page = await resp.text()
    assert not await exists()
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None and 'method="post"' in page and "Create my VSCODE" in page
    # A POST from another site, or without the token, creates nothing either.
    refused = [
        {"csrf": token.group(1), "_origin": "http://bob.ide.test"},
        {"csrf": token.group(1), "_origin": "http://evil.example"},
        {"csrf": "forged", "_origin": f"http://{ALICE_HOST}"},
        {"_origin": f"http://{ALICE_HOST}"},
    ]
    for form in refused:
        origin = form.pop("_origin")
        resp = await gw.post("/", data=form, headers={"Host": ALICE_HOST, **alice, "Origin": origin,
                                                      "Sec-Fetch-Site": "same-site"},
                             allow_redirects=False)
        assert resp.status == 403, (form, origin)
    assert not await exists()
    # The page's own button: created, then back to the page, which shows it starting.
    resp = await gw.post("/", data={"csrf": token.group(1)}, allow_redirects=False,
                         headers={"Host": ALICE_HOST, **alice, "Origin": f"http://{ALICE_HOST}",
                                  "Sec-Fetch-Site": "same-origin"})
    assert resp.status == 303 and resp.headers["Location"] == "/"
    created = await kube.get(USERLANDS, namespace, name)
    assert created["spec"] == {"user": "alice", "template": "vscode", "suspended": False}
    assert created["metadata"]["labels"][naming.LABEL_USER] == "alice"
    # A second post (before or after the watch delivers it) does not fail.
    resp = await gw.post("/", data={"csrf": token.group(1)}, allow_redirects=False,
                         headers={"Host": ALICE_HOST, **alice, "Origin": f"http://{ALICE_HOST}"})
    assert resp.status in (303, 503)
    await eventually(lambda: routes_of(gw).userland(namespace, "vscode", "alice") is not None)
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **alice, **HTML})
    assert resp.status == 200 and "Starting your VSCODE" in await resp.text()


async def test_upstream_connection_refused_gives_a_502_page(
        world: World, gateway_factory: GatewayFactory, origins: Origins, internal_of: InternalOf) -> None:
    from userland.local.controlplane import free_port

    await world.template("vscode", host=IDE_HOST)
    await world.userland("vscode", "alice")
    await world.service("vscode", "alice", upstream=f"http://127.0.0.1:{free_port()}")
    gw = await gateway_factory()
    alice = origin_cookie(await origins.login("alice"))
    resp = await gw.get("/", headers={"Host": ALICE_HOST, **alice, **HTML})
    assert resp.status == 502
    body = await resp.text()
    assert "not answering" in body and "Traceback" not in body
    metrics = await (await internal_of(gw)).get("/metrics")
    assert 'userland_gateway_upstream_errors_total{kind="refused"' in await metrics.text()


async def test_a_refusal_just_after_ready_is_still_starting_not_a_failure(
        world: World, gateway_factory: GatewayFactory, origins: Origins, kube: KubeClient,
        namespace: str) -> None:
    """On a real node the Service routes a moment after the Pod is Ready: a student opening it
    in that moment gets the starting page (it reloads itself), not "not answering"."""
    from datetime import UTC, datetime

    from userland.local.controlplane import free_port

    await world.template("vscode", host=IDE_HOST)
    name = await world.userland("vscode", "alice")
    just_now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.merge_patch(USERLANDS, namespace, name, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Available", "message": "running",
         "lastTransitionTime": just_now}]}}, subresource="status")
    await world.service("vscode", "alice", upstream=f"http://127.0.0.1:{free_port()}")
    gw = await gateway_factory()
    alice = origin_cookie(await origins.login("alice"))
    page = await gw.get("/", headers={"Host": ALICE_HOST, **alice, **HTML})
    body = await page.text()
    assert page.status == 200 and "Starting your VSCODE" in body, body[:300]
    assert 'http-equiv="refresh"' in body
    # A script's request is told to retry, not that it failed.
    api = await gw.get("/api/status", headers={"Host": ALICE_HOST, **alice})
    assert api.status == 503 and api.headers["Retry-After"]


async def test_redirects_set_cookie_and_compressed_bodies_pass_unchanged(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    headers = {"Host": ALICE_HOST, **origin_cookie(await origins.login("alice"))}
    resp = await gw.get("/redirect", headers=headers, allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"] == "/somewhere/else?x=1&y=%2F"
    resp = await gw.get("/set-cookie", headers=headers)
    assert resp.headers.getall("Set-Cookie") == ["app_a=1; Path=/", "app_b=2; Path=/; HttpOnly"]
    body = gzip.compress(b"hello " * 1000)
    resp = await gw.post("/upload", data=body, headers={**headers, "Content-Encoding": "gzip",
                                                         "Content-Type": "application/x-thing"})
    seen = await resp.json()
    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert header_values(seen, "Content-Encoding") == ["gzip"]
    assert header_values(seen, "Content-Type") == ["application/x-thing"]


async def test_platform_host_forwards_to_the_web_ui_with_signed_identity(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    web_ui = await echo_factory("web-ui")
    gw = await gateway_factory(web_url=web_ui.url)
    resp = await gw.get("/classes?ns=x", headers={"Host": PUBLIC_HOST, **cookie(await sessions("alice")),
                                                  "X-User": "admin", "X-User-Role": "admin"})
    seen = await resp.json()
    assert seen["upstream"] == "web-ui" and seen["path_qs"] == "/classes?ns=x"
    assert header_values(seen, "X-User") == ["alice"]
    assert header_values(seen, "X-User-Role") == ["student"]
    headers = CIMultiDict((k, v) for k, v in seen["headers"])
    web_identity = identity.verify_identity(headers, SECRET, audience="web")
    assert (web_identity.login, web_identity.role) == ("alice", "student")
    # what the web UI receives is signed for the web UI only, never usable as an environment's
    with pytest.raises(identity.IdentityRejected):
        identity.verify_identity(headers, SECRET, audience="env")
    resp = await gw.get("/", headers={"Host": PUBLIC_HOST, "X-User": "admin", "X-User-Signature": "t=1,v1=0"})
    seen = await resp.json()
    assert header_values(seen, "X-User") == [] and header_values(seen, "X-User-Signature") == []
    # /auth/ on the platform host is the gateway's own (auth routes), not the web UI; forward-auth
    # is not among them (the internal listener serves it)
    resp = await gw.get("/auth/verify", headers={"Host": PUBLIC_HOST})
    assert resp.status == 404
    resp = await gw.get("/auth/logout", headers={"Host": PUBLIC_HOST})
    assert resp.status == 200 and "not signed in" in await resp.text()
    assert len(web_ui.requests) == 2


async def test_health_metrics_and_forward_auth_only_on_the_internal_listener(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        internal_of: InternalOf) -> None:
    echo = await echo_factory("upstream")
    web_ui = await echo_factory("web-ui")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory(web_url=web_ui.url)
    internal = await internal_of(gw)
    assert (await internal.get("/healthz")).status == 200
    session = await origins.login("alice")
    resp = await gw.get("/metrics", headers={"Host": ALICE_HOST, **origin_cookie(session)})
    assert (await resp.json())["upstream"] == "upstream"
    resp = await gw.get("/metrics", headers={"Host": PUBLIC_HOST})
    assert (await resp.json())["upstream"] == "web-ui"
    text = await (await internal.get("/metrics")).text()
    assert 'userland_gateway_requests_total{code_class="2xx"' in text
    assert "userland_gateway_request_duration_seconds_bucket" in text
    assert "userland_gateway_websockets_active" in text
    assert (await internal.get("/anything")).status == 404
    # The internal listener answers whatever the Host (it is the boundary itself); forward-auth
    # reads the platform cookie there.
    for host in ("10.1.2.3", "userland-gateway.userland-system.svc", PUBLIC_HOST, "evil.example"):
        assert (await internal.get("/metrics", headers={"Host": host})).status == 200, host
        assert (await internal.get("/auth/verify", headers={"Host": host})).status == 401, host
    # The public listener never serves them: not for internal-looking hosts (the pod address, a
    # Service name, no dots), not for unknown public names (a DNS-rebinding attacker's), not for
    # Template hosts.
    for host in ("10.1.2.3", "10.1.2.3:8080", "[fd00::1]:8080", "localhost", "gateway", "userland-gateway",
                 "userland-gateway.userland-system.svc", "userland-gateway.userland-system.svc.cluster.local",
                 "evil.example", "userland.test.evil.example", IDE_HOST):
        for path in ("/metrics", "/healthz", "/auth/login", "/auth/verify", "/auth/handoff?origin=x"):
            resp = await gw.get(path, headers={"Host": host}, allow_redirects=False)
            assert resp.status in (302, 404), (host, path)
            if resp.status == 302:  # the bare Template host only sends students to their origin
                assert host == IDE_HOST and "/auth/handoff?" in resp.headers["Location"]
    # On a student's origin every path is the environment's (the gateway's are /__userland/ only).
    resp = await gw.get("/auth/login", headers={"Host": ALICE_HOST, **origin_cookie(session)})
    assert (await resp.json())["upstream"] == "upstream"


async def test_access_log_has_no_cookies_tokens_or_query(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins,
        caplog: pytest.LogCaptureFixture) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    session = await origins.login("alice")
    with caplog.at_level("INFO", logger="userland.proxy.access"):
        await gw.get("/callback?code=SECRETCODE", headers={"Host": ALICE_HOST, **origin_cookie(session),
                                                           "Authorization": "Bearer SECRETTOKEN"})
    records = [r for r in caplog.records if r.name == "userland.proxy.access"]
    assert records and records[-1].__dict__["path"] == "/callback"
    assert records[-1].__dict__["user"] == "alice" and records[-1].__dict__["status"] == 200
    text = " ".join(json.dumps({k: str(v) for k, v in vars(r).items()}) for r in records)
    assert session not in text and "SECRETCODE" not in text and "SECRETTOKEN" not in text


async def test_two_gateway_replicas_serve_the_same_session(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, origins: Origins) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    first, second = await gateway_factory(), await gateway_factory()
    session = await origins.login("alice")  # one login, stored only in Redis
    for gw in (first, second, first):
        seen = await (await gw.get("/", headers={"Host": ALICE_HOST, **origin_cookie(session)})).json()
        assert header_values(seen, "X-User") == ["alice"]
    assert len(echo.requests) == 3
