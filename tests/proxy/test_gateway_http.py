"""The gateway in-process against the real control plane, real Redis and real echo upstreams."""

from __future__ import annotations

import gzip
import hashlib
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from yarl import URL

from userland.platform import identity, naming
from userland.platform.kube import SERVICES, USERLANDS, KubeClient

from .conftest import (
    PUBLIC_HOST,
    PUBLIC_URL,
    SECRET,
    EchoFactory,
    GatewayFactory,
    World,
    eventually,
    routes_of,
)

IDE_HOST = "ide.test"
HTML = {"Accept": "text/html,application/xhtml+xml"}


def cookie(session: str) -> dict[str, str]:
    return {"Cookie": f"userland_session={session}"}


async def raw_get(gw: Any, path_qs: str, headers: dict[str, str]) -> Any:
    """GET with the path and query sent byte for byte (the test client would requote them)."""
    url = URL(str(gw.make_url("/")).rstrip("/") + path_qs, encoded=True)
    return await gw.session.get(url, headers=headers, allow_redirects=False)


def header_values(seen: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in seen["headers"] if k.lower() == name.lower()]


async def test_routes_by_host_to_the_users_own_environment(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    alice_echo = await echo_factory("alice-upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", alice_echo)
    gw = await gateway_factory()
    session = await sessions("alice")
    resp = await raw_get(gw, "/some/path%2Fx?a=1&b=%2F&c", {"Host": IDE_HOST, **cookie(session)})
    assert resp.status == 200
    seen = await resp.json()
    assert seen["upstream"] == "alice-upstream"
    assert seen["path_qs"] == "/some/path%2Fx?a=1&b=%2F&c"
    assert header_values(seen, "X-User") == ["alice"]
    assert identity.verify_identity("alice", header_values(seen, "X-User-Signature")[0], SECRET)
    assert header_values(seen, "X-Forwarded-Host") == [IDE_HOST]
    assert header_values(seen, "X-Forwarded-Proto") == ["http"]
    assert header_values(seen, "X-Forwarded-For") == ["127.0.0.1"]
    assert header_values(seen, "Host") == [IDE_HOST]


async def test_routes_by_path_prefix_longest_first(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    nb, gpu = await echo_factory("nb"), await echo_factory("gpu")
    await world.template("nb", prefix="/nb/")
    await world.template("gpu", prefix="/nb/gpu/")
    await world.environment("nb", "alice", nb)
    await world.environment("gpu", "alice", gpu)
    gw = await gateway_factory()
    session = await sessions("alice")
    for path, upstream in [("/nb/lab", "nb"), ("/nb/gpu/lab?q=1", "gpu"), ("/nb", "nb")]:
        resp = await gw.get(path, headers={"Host": PUBLIC_HOST, **cookie(session)})
        seen = await resp.json()
        assert (seen["upstream"], seen["path_qs"]) == (upstream, path)


SPOOF_CASES: list[list[tuple[str, str]]] = [
    [("X-User", "bob")],
    [("x_user", "bob")],
    [("X-USER", "bob")],
    [("X-User", "bob"), ("X-User", "carol")],
    [("X-Forwarded-User", "bob")],
    [("X-Forwarded-Email", "bob@example.edu")],
    [("X-User-Signature", identity.sign_identity("bob", SECRET))],
    [("X-User", "bob"), ("X-User-Signature", identity.sign_identity("bob", SECRET))],
    [("Cookie", "userland_session=forged-for-bob")],
    [("X-Forwarded-For", "10.9.9.9"), ("Forwarded", "for=10.9.9.9;host=pma.test")],
]


async def test_spoofing_attempts_reach_the_upstream_as_the_logged_in_user(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    alice_echo, bob_echo = await echo_factory("alice-upstream"), await echo_factory("bob-upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", alice_echo)
    await world.environment("vscode", "bob", bob_echo)
    gw = await gateway_factory()
    session = await sessions("alice")
    for spoof in SPOOF_CASES:
        headers: list[tuple[str, str]] = [("Host", IDE_HOST), ("Cookie", f"userland_session={session}"),
                                          ("Cookie", "app=keep"), *spoof]
        resp = await gw.get("/whoami", headers=headers)
        seen = await resp.json()
        assert seen["upstream"] == "alice-upstream", spoof
        assert header_values(seen, "X-User") == ["alice"], spoof
        signatures = header_values(seen, "X-User-Signature")
        assert len(signatures) == 1 and identity.verify_identity("alice", signatures[0], SECRET), spoof
        assert not identity.verify_identity("bob", signatures[0], SECRET)
        assert header_values(seen, "X-Forwarded-For") == ["127.0.0.1"], spoof
        assert not header_values(seen, "Forwarded") and not header_values(seen, "X-Forwarded-User")
        assert seen["cookie_header"] == ["app=keep"], spoof  # the app's cookie only, never a session
        assert "bob" not in json.dumps(seen["headers"]), spoof
    assert bob_echo.requests == []


async def test_a_student_never_reaches_another_students_environment(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    bob_echo = await echo_factory("bob-upstream")
    alice_pma = await echo_factory("alice-pma")
    await world.template("vscode", host=IDE_HOST)
    await world.template("pma", prefix="/pma/")
    await world.environment("vscode", "bob", bob_echo)  # alice has no vscode environment
    await world.environment("pma", "alice", alice_pma)
    await world.service("pma", "bob", upstream=bob_echo.url)
    await world.userland("pma", "bob")
    gw = await gateway_factory()
    alice = await sessions("alice")
    attempts = [
        ("/", {"Host": IDE_HOST}),
        ("/?user=bob", {"Host": IDE_HOST, "X-User": "bob"}),
        (f"/{naming.service_name('vscode', 'bob')}", {"Host": IDE_HOST}),
        ("/pma/", {"Host": IDE_HOST}),  # a host route owns every path on its host
        ("/pma/index.php", {"Host": PUBLIC_HOST, "X-Forwarded-User": "bob"}),
        ("/pma/", {"Host": "bob.pma.test"}),
    ]
    for path, headers in attempts:
        resp = await gw.get(path, headers={**headers, **cookie(alice), **HTML})
        body = await resp.text()
        if resp.status == 200:
            assert json.loads(body)["upstream"] == "alice-pma", (path, headers)
        else:
            assert resp.status == 403, (path, headers)
            assert "ask your instructor" in body.lower()
    assert bob_echo.requests == []


async def test_not_logged_in_browser_get_redirects_to_login_with_next(
        world: World, gateway_factory: GatewayFactory) -> None:
    await world.template("vscode", host=IDE_HOST)
    gw = await gateway_factory()
    resp = await gw.get("/project/file.py?line=3", headers={"Host": IDE_HOST, **HTML},
                        allow_redirects=False)
    assert resp.status == 302
    location = urlsplit(resp.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{PUBLIC_URL}/auth/login"
    assert parse_qs(location.query)["next"] == [f"http://{IDE_HOST}/project/file.py?line=3"]


@pytest.mark.parametrize(("method", "headers"), [
    ("GET", {"Accept": "application/json"}),
    ("POST", HTML),
    ("GET", {**HTML, "Cookie": "userland_session=not-a-session"}),
])
async def test_not_logged_in_api_requests_get_401(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory,
        method: str, headers: dict[str, str]) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    resp = await gw.request(method, "/api", headers={"Host": IDE_HOST, **headers}, allow_redirects=False)
    if "not-a-session" in headers.get("Cookie", ""):
        assert resp.status == 302  # a browser GET with a stale cookie is sent to log in again
    else:
        assert resp.status == 401
    assert echo.requests == []


async def test_redis_down_fails_closed_with_503_and_nothing_reaches_the_upstream(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    from userland.local.controlplane import free_port

    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    session = await sessions("alice")
    gw = await gateway_factory(ns_redis_url=f"redis://127.0.0.1:{free_port()}/0")
    for headers in ({"Host": IDE_HOST, **cookie(session), **HTML}, {"Host": PUBLIC_HOST, **cookie(session)}):
        resp = await gw.get("/", headers=headers, allow_redirects=False)
        assert resp.status == 503
        assert "<html" in (await resp.text()).lower()
    assert echo.requests == []


async def test_no_userland_gives_the_403_page(
        world: World, gateway_factory: GatewayFactory, sessions: Any) -> None:
    await world.template("vscode", host=IDE_HOST)
    gw = await gateway_factory()
    resp = await gw.get("/", headers={"Host": IDE_HOST, **cookie(await sessions("alice")), **HTML})
    assert resp.status == 403
    body = await resp.text()
    assert "alice" in body and "ask your instructor" in body.lower()


async def test_not_ready_shows_the_starting_page_until_ready(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        namespace: str) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.userland("vscode", "alice", ready=False)
    gw = await gateway_factory()
    headers = {"Host": IDE_HOST, **cookie(await sessions("alice")), **HTML}
    resp = await gw.get("/", headers=headers)
    assert resp.status == 503
    assert resp.headers["Retry-After"].isdigit()
    body = await resp.text()
    assert "Starting your environment" in body and 'http-equiv="refresh"' in body
    await world.set_ready("vscode", "alice", True)  # Ready, but no Service yet: still starting
    await eventually(lambda: routes_of(gw).userland(namespace, "vscode", "alice").ready)
    assert (await gw.get("/", headers=headers)).status == 503
    await world.service("vscode", "alice", upstream=None)  # local mode: no upstream annotation yet
    await eventually(lambda: routes_of(gw).service(namespace, naming.service_name("vscode", "alice")))
    assert (await gw.get("/", headers=headers)).status == 503
    await world.kube.merge_patch(  # the local runner writes the address
        SERVICES, namespace,
        naming.service_name("vscode", "alice"),
        {"metadata": {"annotations": {naming.ANNOTATION_UPSTREAM: echo.url}}})
    await eventually(lambda: routes_of(gw).service(
        namespace, naming.service_name("vscode", "alice")).upstream_annotation == echo.url)
    resp = await gw.get("/", headers=headers)
    assert resp.status == 200 and (await resp.json())["upstream"] == "upstream"


async def test_self_service_creates_the_userland_and_shows_the_starting_page(
        world: World, gateway_factory: GatewayFactory, sessions: Any, kube: KubeClient,
        namespace: str) -> None:
    await world.template("vscode", host=IDE_HOST, self_service=True)
    gw = await gateway_factory()
    resp = await gw.get("/", headers={"Host": IDE_HOST, **cookie(await sessions("Alice")), **HTML})
    assert resp.status == 503
    assert "Starting your environment" in await resp.text()
    created = await kube.get(USERLANDS, namespace, naming.userland_name("vscode", "alice"))
    assert created["spec"] == {"user": "alice", "template": "vscode", "suspended": False}
    assert created["metadata"]["labels"][naming.LABEL_USER] == "alice"
    # a second request (before or after the watch delivers it) does not fail
    resp = await gw.get("/", headers={"Host": IDE_HOST, **cookie(await sessions("alice")), **HTML})
    assert resp.status == 503


async def test_upstream_connection_refused_gives_a_502_page(
        world: World, gateway_factory: GatewayFactory, sessions: Any) -> None:
    from userland.local.controlplane import free_port

    await world.template("vscode", host=IDE_HOST)
    await world.userland("vscode", "alice")
    await world.service("vscode", "alice", upstream=f"http://127.0.0.1:{free_port()}")
    gw = await gateway_factory()
    resp = await gw.get("/", headers={"Host": IDE_HOST, **cookie(await sessions("alice")), **HTML})
    assert resp.status == 502
    body = await resp.text()
    assert "not answering" in body and "Traceback" not in body
    metrics = await gw.get("/metrics", headers={"Host": "127.0.0.1"})
    assert 'userland_gateway_upstream_errors_total{kind="refused"' in await metrics.text()


async def test_redirects_set_cookie_and_compressed_bodies_pass_unchanged(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    headers = {"Host": IDE_HOST, **cookie(await sessions("alice"))}
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
                                                  "X-User": "admin"})
    seen = await resp.json()
    assert seen["upstream"] == "web-ui" and seen["path_qs"] == "/classes?ns=x"
    assert header_values(seen, "X-User") == ["alice"]
    assert identity.verify_identity("alice", header_values(seen, "X-User-Signature")[0], SECRET)
    resp = await gw.get("/", headers={"Host": PUBLIC_HOST, "X-User": "admin", "X-User-Signature": "t=1,v1=0"})
    seen = await resp.json()
    assert header_values(seen, "X-User") == [] and header_values(seen, "X-User-Signature") == []
    # /auth/ on the platform host is the gateway's own (auth routes), not the web UI
    resp = await gw.get("/auth/verify", headers={"Host": PUBLIC_HOST})
    assert resp.status == 401
    assert len(web_ui.requests) == 2


async def test_health_and_metrics_only_on_non_template_hosts(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    echo = await echo_factory("upstream")
    web_ui = await echo_factory("web-ui")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory(web_url=web_ui.url)
    resp = await gw.get("/healthz", headers={"Host": "10.1.2.3:8080"})
    assert resp.status == 200
    session = await sessions("alice")
    resp = await gw.get("/metrics", headers={"Host": IDE_HOST, **cookie(session)})
    assert (await resp.json())["upstream"] == "upstream"
    resp = await gw.get("/metrics", headers={"Host": PUBLIC_HOST})
    assert (await resp.json())["upstream"] == "web-ui"
    resp = await gw.get("/metrics", headers={"Host": "10.1.2.3:8080"})
    text = await resp.text()
    assert 'userland_gateway_requests_total{code_class="2xx"' in text
    assert "userland_gateway_request_duration_seconds_bucket" in text
    assert "userland_gateway_websockets_active" in text
    resp = await gw.get("/anything", headers={"Host": "10.1.2.3:8080"})
    assert resp.status == 404


async def test_access_log_has_no_cookies_tokens_or_query(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    gw = await gateway_factory()
    session = await sessions("alice")
    with caplog.at_level("INFO", logger="userland.proxy.access"):
        await gw.get("/callback?code=SECRETCODE", headers={"Host": IDE_HOST, **cookie(session),
                                                           "Authorization": "Bearer SECRETTOKEN"})
    records = [r for r in caplog.records if r.name == "userland.proxy.access"]
    assert records and records[-1].__dict__["path"] == "/callback"
    assert records[-1].__dict__["user"] == "alice" and records[-1].__dict__["status"] == 200
    text = " ".join(json.dumps({k: str(v) for k, v in vars(r).items()}) for r in records)
    assert session not in text and "SECRETCODE" not in text and "SECRETTOKEN" not in text


async def test_two_gateway_replicas_serve_the_same_session(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any) -> None:
    echo = await echo_factory("upstream")
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", echo)
    first, second = await gateway_factory(), await gateway_factory()
    session = await sessions("alice")  # one login, stored only in Redis
    for gw in (first, second, first):
        seen = await (await gw.get("/", headers={"Host": IDE_HOST, **cookie(session)})).json()
        assert header_values(seen, "X-User") == ["alice"]
    assert len(echo.requests) == 3
