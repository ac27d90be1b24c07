"""The GitHub login flow end to end: app -> fake GitHub -> app, every redirect asserted."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlsplit

import pytest
from authflow import NONCE_COOKIE, PLAIN_SESSION_COOKIE, SESSION_COOKIE, AppFactory, set_cookies
from fakes.github import s256
from yarl import URL

from userland.platform.model.keyspace import OAUTH_STATE_PREFIX, login_binding_key, pattern, session_key


async def test_happy_login_flow(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("Alice", 1001, name="Alice A.")
    h.github.sign_in("alice")

    # 1. /auth/login sends the browser to GitHub with state, PKCE S256 challenge and scopes.
    authorize_url, nonce = await h.start_login("/after")
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorize_url).query).items()}
    assert query["client_id"] == h.github.client_id
    assert query["response_type"] == "code"
    assert query["redirect_uri"] == h.public_url + "/auth/callback"
    assert query["scope"] == "read:user"
    assert query["code_challenge_method"] == "S256"
    assert len(query["state"]) >= 32 and len(query["code_challenge"]) == 43

    # The pending login is in Redis for 10 minutes, under a hash of the state.
    keys = [k.decode() for k in await h.redis.keys(pattern(OAUTH_STATE_PREFIX))]
    assert len(keys) == 1 and query["state"] not in keys[0]
    assert 590 <= await h.redis.ttl(keys[0]) <= 600

    # 2. GitHub redirects back with code and state; 3. the callback signs in.
    callback_url = await h.authorize(authorize_url)
    resp = await h.callback(callback_url, nonce)
    assert resp.status == 302
    assert resp.headers["Location"] == "/after"
    assert await h.redis.keys(pattern(OAUTH_STATE_PREFIX)) == []  # used up

    # The token request carried the verifier that matches the challenge.
    token_request = h.github.token_requests[-1]
    assert s256(token_request["code_verifier"]) == query["code_challenge"]

    cookies = set_cookies(resp)
    session_cookie = cookies[SESSION_COOKIE]
    assert len(session_cookie.value) == 43
    assert session_cookie["httponly"] is True
    assert session_cookie["secure"] is True
    assert session_cookie["samesite"] == "Lax"
    # Secure cookies carry the __Host- prefix: host-only, Path=/, no sibling can set or shadow it.
    assert SESSION_COOKIE == "__Host-userland_session"
    assert session_cookie["domain"] == ""
    assert session_cookie["path"] == "/"
    assert int(session_cookie["max-age"]) == h.settings.session_ttl_seconds
    assert cookies[NONCE_COOKIE]["max-age"] == "0"  # the nonce cookie is removed

    # The session is in Redis under the hash of the cookie id, with the TTL.
    key = session_key(session_cookie.value)
    assert 3590 <= await h.redis.ttl(key) <= 3600
    session = await h.store.load(session_cookie.value)
    assert session is not None
    assert (session.login, session.github_id, session.role, session.name) == ("alice", 1001, "student",
                                                                              "Alice A.")
    assert len(session.csrf) >= 32

    verified = await h.verify(session_cookie.value)
    assert verified.status == 200
    assert (verified.headers["X-User"], verified.headers["X-User-Role"]) == ("alice", "student")


async def test_cookie_not_secure_when_settings_say_so(make_app: AppFactory) -> None:
    h = await make_app(cookie_secure=False)
    h.github.add_user("bob", 2)
    resp, _ = await h.login("bob")
    cookie = set_cookies(resp)[PLAIN_SESSION_COOKIE]  # local http: no __Host- (it needs Secure)
    assert SESSION_COOKIE not in set_cookies(resp)
    assert cookie["secure"] == ""
    assert cookie["domain"] == ""  # host-only, always
    assert cookie["httponly"] is True and cookie["samesite"] == "Lax"


async def test_provider_error_is_a_400_page(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("denier", 3, deny=True)
    h.github.sign_in("denier")
    authorize_url, nonce = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    assert "error=access_denied" in callback_url
    resp = await h.callback(callback_url, nonce)
    assert resp.status == 400
    assert resp.content_type == "text/html"
    assert "did not allow" in await resp.text()
    assert SESSION_COOKIE not in set_cookies(resp)


async def test_missing_state_is_a_400(make_app: AppFactory) -> None:
    h = await make_app()
    resp = await h.client.get("/auth/callback?code=abc", allow_redirects=False)
    assert resp.status == 400
    assert "Traceback" not in await resp.text()


async def test_unknown_state_is_a_403(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("eve", 5)
    h.github.sign_in("eve")
    authorize_url, nonce = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    forged = callback_url.replace("state=", "state=x")
    resp = await h.callback(forged, nonce)
    assert resp.status == 403
    assert SESSION_COOKIE not in set_cookies(resp)


async def test_expired_state_is_a_403(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("slow", 6)
    h.github.sign_in("slow")
    authorize_url, nonce = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    for key in await h.redis.keys(pattern(OAUTH_STATE_PREFIX)):
        await h.redis.expire(key, 0)  # ten minutes pass
    resp = await h.callback(callback_url, nonce)
    assert resp.status == 403
    assert "expired" in await resp.text()


async def test_replayed_state_is_a_403(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("frank", 7)
    h.github.sign_in("frank")
    authorize_url, nonce = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    first = await h.callback(callback_url, nonce)
    assert first.status == 302
    again = await h.callback(callback_url, nonce)
    assert again.status == 403
    assert SESSION_COOKIE not in set_cookies(again)


async def test_callback_in_another_browser_is_a_403(make_app: AppFactory) -> None:
    """Login CSRF: an attacker's callback URL must not sign a victim in as the attacker."""
    h = await make_app()
    h.github.add_user("attacker", 8)
    h.github.sign_in("attacker")
    authorize_url, _ = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    assert (await h.callback(callback_url, None)).status == 403  # victim has no nonce cookie
    authorize_url, _ = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    assert (await h.callback(callback_url, "someone-elses-nonce")).status == 403
    assert h.github.token_requests == []  # the code was never even exchanged


async def test_a_nonce_cookie_tossed_from_a_sibling_host_cannot_finish_a_login(make_app: AppFactory) -> None:
    """Login CSRF by cookie tossing: mallory starts a login in her own browser and keeps its
    nonce and GitHub's callback URL. Her environment (`mallory.ide.example.edu`, same site as
    the platform) sets `userland_login=<nonce>; Domain=example.edu; Path=/auth/` in a victim's
    browser and sends it to the callback, which then carries that cookie. With Secure cookies the
    nonce cookie is `__Host-userland_login` (Path=/, no Domain), which no sibling can set, and a
    cookie under any other name is not read. Before: the victim was signed in as mallory."""
    h = await make_app()
    assert NONCE_COOKIE == "__Host-userland_login"
    h.github.add_user("mallory", 9)
    h.github.sign_in("mallory")
    for tossed in ("userland_login", "__Secure-userland_login"):
        authorize_url, nonce = await h.start_login()
        callback_url = await h.authorize(authorize_url)
        resp = await h.client.get(URL(callback_url).path_qs, headers={"Cookie": f"{tossed}={nonce}"},
                                  allow_redirects=False)
        assert resp.status == 403, tossed
        assert SESSION_COOKIE not in set_cookies(resp)
    assert h.github.token_requests == []


async def test_bad_code_is_a_400_page(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("gina", 9)
    h.github.sign_in("gina")
    authorize_url, nonce = await h.start_login("/x")
    callback_url = await h.authorize(authorize_url)
    bad = callback_url.replace("code=", "code=0")
    resp = await h.callback(bad, nonce)
    assert resp.status == 400
    text = await resp.text()
    assert "try again" in text and "/auth/login?next=%2Fx" in text
    assert h.github.token_requests[-1]["code"].startswith("0")


async def test_pkce_verifier_is_checked_by_the_provider(make_app: AppFactory) -> None:
    """A code issued for another challenge (a stolen code) cannot be redeemed with our verifier."""
    h = await make_app()
    h.github.add_user("hank", 10)
    h.github.sign_in("hank")
    authorize_url, nonce = await h.start_login()
    query = parse_qs(urlsplit(authorize_url).query)
    tampered = authorize_url.replace(query["code_challenge"][0], s256("x" * 64))
    resp = await h.callback(await h.authorize(tampered), nonce)
    assert resp.status == 400
    assert SESSION_COOKIE not in set_cookies(resp)
    assert h.github.tokens == {}


async def test_token_endpoint_failure_is_a_502_page(make_app: AppFactory) -> None:
    h = await make_app()
    h.github.add_user("ivy", 11)
    h.github.sign_in("ivy")
    h.github.token_endpoint_status = 500
    authorize_url, nonce = await h.start_login()
    resp = await h.callback(await h.authorize(authorize_url), nonce)
    assert resp.status == 502
    assert "GitHub" in await resp.text()


async def test_wrong_client_secret_is_refused_not_a_traceback(make_app: AppFactory) -> None:
    h = await make_app(github_client_secret="wrong")
    h.github.add_user("jo", 12)
    h.github.sign_in("jo")
    authorize_url, nonce = await h.start_login()
    resp = await h.callback(await h.authorize(authorize_url), nonce)
    assert resp.status == 400
    assert h.github.tokens == {}


async def test_user_not_in_an_allowed_org_gets_a_403_page(make_app: AppFactory) -> None:
    h = await make_app(allowed_orgs=("school",))
    h.github.add_user("outsider", 13, orgs=["other-org"])
    h.github.add_user("Member", 14, orgs=["other-org", "School"])
    h.github.sign_in("outsider")
    authorize_url, nonce = await h.start_login()
    assert "read%3Aorg" in authorize_url or "read:org" in parse_qs(urlsplit(authorize_url).query)["scope"][0]
    resp = await h.callback(await h.authorize(authorize_url), nonce)
    assert resp.status == 403
    assert "not a member" in await resp.text()
    assert SESSION_COOKIE not in set_cookies(resp)

    resp, cookie = await h.login("member")
    assert resp.status == 302
    assert (await h.verify(cookie)).headers["X-User"] == "member"


async def test_org_list_is_read_across_pages(make_app: AppFactory) -> None:
    h = await make_app(allowed_orgs=("school",))
    h.github.page_size = 2
    h.github.add_user("many", 15, orgs=["a", "b", "c", "d", "school"])
    resp, _ = await h.login("many")
    assert resp.status == 302
    assert h.github.api_requests.count("/api/v3/user/orgs") == 3


async def test_roles_from_logins_and_org_teams(make_app: AppFactory) -> None:
    h = await make_app(admins=("root",), instructors=("school/teachers",))
    h.github.add_user("Root", 20)
    h.github.add_user("teach", 21, teams=[("School", "Teachers")])
    h.github.add_user("kid", 22, orgs=["school"], teams=[("school", "students")])
    expected = {"root": "admin", "teach": "instructor", "kid": "student"}
    for login, role in expected.items():
        _, cookie = await h.login(login)
        verified = await h.verify(cookie)
        assert (verified.headers["X-User"], verified.headers["X-User-Role"]) == (login, role)
    # read:org was requested (teams need it; the fake refuses /user/teams without it)
    assert all("read:org" in r["scope"] for r in h.github.authorize_requests)


async def test_logins_are_case_insensitive(make_app: AppFactory) -> None:
    h = await make_app(admins=("mixedcase",))
    h.github.add_user("MiXeDCase", 30)
    _, cookie = await h.login("mixedcase")
    session = await h.store.load(cookie)
    assert session is not None and (session.login, session.role) == ("mixedcase", "admin")
    assert await h.redis.hget(login_binding_key("mixedcase"), "github_id") == b"30"


async def test_next_url_is_validated_at_the_callback(make_app: AppFactory) -> None:
    h = await make_app(hosts={"ide.gateway.test"})
    h.github.add_user("kim", 40)
    for target, expected in [("https://evil.com/", "/"), ("//evil.com", "/"),
                             ("https://ide.gateway.test/lab", "https://ide.gateway.test/lab"),
                             ("https://kim.ide.gateway.test/lab", "https://kim.ide.gateway.test/lab"),
                             ("https://pma.example.test/", "/"),
                             ("/deep/link?x=1", "/deep/link?x=1")]:
        resp, _ = await h.login("kim", next_url=target)
        assert resp.headers["Location"] == expected, target


async def test_login_started_on_another_host_moves_to_the_public_host(make_app: AppFactory) -> None:
    h = await make_app(hosts={"ide.gateway.test"})
    resp = await h.client.get("/auth/login", params={"next": "https://ide.gateway.test/"},
                              headers={"Host": "ide.gateway.test"}, allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == (h.public_url + "/auth/login?next=https%3A%2F%2Fide.gateway.test%2F")


async def test_logs_carry_no_secrets(make_app: AppFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="userland")
    h = await make_app()
    h.github.add_user("quiet", 50)
    h.github.sign_in("quiet")
    authorize_url, nonce = await h.start_login()
    callback_url = await h.authorize(authorize_url)
    resp = await h.callback(callback_url, nonce)
    cookie = set_cookies(resp)[SESSION_COOKIE].value
    query = parse_qs(urlsplit(callback_url).query)
    secrets = [query["code"][0], query["state"][0], nonce, cookie, *h.github.tokens]
    records = [r for r in caplog.records if r.name.startswith("userland")]
    assert any(getattr(r, "event", "") == "login.succeeded" and getattr(r, "login", "") == "quiet"
               for r in records)
    for record in records:
        text = record.getMessage() + repr(vars(record))
        for secret in secrets:
            assert secret not in text
