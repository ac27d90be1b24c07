"""Test helpers: `create_test_app()` and a step-by-step driver of the login flow.

Redirects are followed by hand and each step is asserted. The test client has no cookie jar:
every cookie a step needs is passed explicitly, so the tests see exactly what a browser would
get and send.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookies import Morsel, SimpleCookie
from typing import Any

import aiohttp
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient
from fakes.github import FakeGitHub
from yarl import URL

from tests.support import free_port
from userland.auth.routes import setup_auth
from userland.auth.rules.origins import cookie_names
from userland.platform.clients.sessions import RedisSessionStore, SessionStore
from userland.platform.model.settings import Settings

AUTH_TEST_DB = 9
# The harness's cookies are Secure unless a test says otherwise: the `__Host-` names.
SESSION_COOKIE = cookie_names(secure=True).session
NONCE_COOKIE = cookie_names(secure=True).nonce
PLAIN_SESSION_COOKIE = cookie_names(secure=False).session


def create_test_app(settings: Settings, *, redis: redis.asyncio.Redis, store: SessionStore,
                    template_hosts: Callable[[], set[str]] = lambda: set()) -> web.Application:
    app = web.Application()

    async def home(_: web.Request) -> web.Response:
        return web.Response(text="home")

    app.router.add_get("/", home)
    setup_auth(app, settings, redis=redis, store=store, template_hosts=template_hosts)
    return app


def set_cookies(response: aiohttp.ClientResponse) -> dict[str, Morsel[str]]:
    found: dict[str, Morsel[str]] = {}
    for header in response.headers.getall("Set-Cookie", []):
        jar: SimpleCookie = SimpleCookie()
        jar.load(header)
        found.update(jar)
    return found


@dataclass
class Harness:
    client: TestClient[Any, Any]
    settings: Settings
    store: SessionStore
    redis: redis.asyncio.Redis
    github: FakeGitHub
    hosts: set[str] = field(default_factory=set)

    @property
    def public_url(self) -> str:
        return self.settings.public_url

    @property
    def session_cookie(self) -> str:
        return cookie_names(self.settings.cookie_secure).session

    @property
    def nonce_cookie(self) -> str:
        return cookie_names(self.settings.cookie_secure).nonce

    async def start_login(self, next_url: str | None = "/") -> tuple[str, str]:
        """GET /auth/login: returns the authorize URL and the browser nonce cookie."""
        params = {} if next_url is None else {"next": next_url}
        resp = await self.client.get("/auth/login", params=params, allow_redirects=False)
        assert resp.status == 302, await resp.text()
        location = resp.headers["Location"]
        assert location.startswith(self.github.url + "/login/oauth/authorize?")
        nonce = set_cookies(resp)[self.nonce_cookie]
        # Secure: `__Host-` (which requires Path=/); local http: only /auth/ needs it.
        assert nonce["httponly"] and nonce["samesite"] == "Lax" and nonce["domain"] == ""
        assert nonce["path"] == ("/" if self.settings.cookie_secure else "/auth/")
        return location, nonce.value

    async def authorize(self, authorize_url: str) -> str:
        """The browser at GitHub: returns where GitHub redirects back to."""
        async with aiohttp.ClientSession() as browser, \
                browser.get(authorize_url, allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            location = resp.headers["Location"]
        assert location.startswith(self.public_url + "/auth/callback?")
        return location

    async def callback(self, callback_url: str, nonce: str | None) -> aiohttp.ClientResponse:
        headers = {"Cookie": f"{self.nonce_cookie}={nonce}"} if nonce else {}
        return await self.client.get(URL(callback_url).path_qs, headers=headers, allow_redirects=False)

    async def login(self, login: str, next_url: str = "/") -> tuple[aiohttp.ClientResponse, str]:
        """The whole flow as `login`; returns the callback response and the session cookie."""
        self.github.sign_in(login)
        authorize_url, nonce = await self.start_login(next_url)
        resp = await self.callback(await self.authorize(authorize_url), nonce)
        assert resp.status == 302, await resp.text()
        return resp, set_cookies(resp)[self.session_cookie].value

    async def verify(self, cookie_id: str | None) -> aiohttp.ClientResponse:
        headers = {"Cookie": f"{self.session_cookie}={cookie_id}"} if cookie_id else {}
        return await self.client.get("/auth/verify", headers=headers)


class AppFactory:
    def __init__(self, aiohttp_client: Any, github: FakeGitHub, redis_client: redis.asyncio.Redis) -> None:
        self._aiohttp_client = aiohttp_client
        self.github = github
        self.redis = redis_client

    def settings(self, port: int, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "github_client_id": self.github.client_id, "github_client_secret": self.github.client_secret,
            "github_url": self.github.url, "github_api_url": self.github.api_url,
            "public_url": f"http://127.0.0.1:{port}", "cookie_secure": True, "session_ttl_seconds": 3600,
        }
        values.update(overrides)
        return Settings(**values)

    async def __call__(self, *, store: SessionStore | None = None, redis: redis.asyncio.Redis | None = None,
                       hosts: set[str] | None = None, **overrides: Any) -> Harness:
        port = free_port()
        settings = self.settings(port, **overrides)
        redis_client = redis or self.redis
        store = store or RedisSessionStore(redis_client, settings.session_ttl_seconds)
        allowed = set() if hosts is None else hosts
        app = create_test_app(settings, redis=redis_client, store=store, template_hosts=lambda: set(allowed))
        client = await self._aiohttp_client(app, server_kwargs={"port": port, "host": "127.0.0.1"},
                                            cookie_jar=aiohttp.DummyCookieJar())
        return Harness(client=client, settings=settings, store=store, redis=redis_client,
                       github=self.github, hosts=allowed)
