"""A fake GitHub: a real local aiohttp server the auth code talks to over HTTP.

It lays out URLs like GitHub Enterprise Server (`/login/oauth/...` on the base URL, the REST
API under `/api/v3`), so the tests also prove the URLs come from settings. Behaviour follows
GitHub's: the token endpoint answers HTTP 200 with an `error` field for a bad code; org and
team lists need the `read:org` scope and are paginated with `Link` headers.

It checks what a real provider checks: client id and secret, that a code is used once, by the
same client, with the same redirect_uri, and the PKCE verifier against the S256 challenge
(computed here independently of authlib, so a wrong verifier really fails).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.test_utils import TestServer

API_PREFIX = "/api/v3"


@dataclass
class FakeUser:
    login: str
    id: int
    orgs: list[str] = field(default_factory=list)
    teams: list[tuple[str, str]] = field(default_factory=list)  # (org, team slug)
    name: str = ""
    deny: bool = False  # this user clicks "Cancel" on the consent page


@dataclass
class IssuedCode:
    user: FakeUser
    client_id: str
    redirect_uri: str
    challenge: str
    challenge_method: str
    scope: str


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class FakeGitHub:
    def __init__(self, client_id: str = "fake-client-id", client_secret: str = "fake-client-secret") -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.users: dict[str, FakeUser] = {}
        self.signed_in: str | None = None  # who is signed in to "github.com" in the browser
        self.codes: dict[str, IssuedCode] = {}
        self.tokens: dict[str, tuple[FakeUser, str]] = {}
        self.page_size = 100
        self.token_endpoint_status = 200  # set to 500 to make the token endpoint fail
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self.api_requests: list[str] = []
        self._server: TestServer | None = None

    # configuration
    def add_user(self, login: str, id: int, **kwargs: Any) -> FakeUser:
        user = FakeUser(login=login, id=id, **kwargs)
        self.users[login.lower()] = user
        return user

    def sign_in(self, login: str) -> None:
        self.signed_in = login.lower()

    # server
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/login/oauth/authorize", self.authorize)
        app.router.add_post("/login/oauth/access_token", self.access_token)
        app.router.add_get(API_PREFIX + "/user", self.user)
        app.router.add_get(API_PREFIX + "/user/orgs", self.user_orgs)
        app.router.add_get(API_PREFIX + "/user/teams", self.user_teams)
        return app

    async def start(self, host: str = "127.0.0.1") -> None:
        """Listen on a free port of `host` (the real-node suite uses the node's address, which
        the gateway's Pods reach)."""
        self._server = TestServer(self.app(), host=host)
        await self._server.start_server()

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return str(self._server.make_url("")).rstrip("/")

    @property
    def api_url(self) -> str:
        return self.url + API_PREFIX

    # endpoints
    async def authorize(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.authorize_requests.append(query)
        if query.get("client_id") != self.client_id or query.get("response_type") != "code":
            return web.Response(status=400, text="bad client_id or response_type")
        redirect_uri, state = query.get("redirect_uri", ""), query.get("state", "")
        if not redirect_uri:
            return web.Response(status=400, text="redirect_uri required")
        user = self.users.get(self.signed_in or "")
        if user is None:
            return web.Response(status=401, text="nobody is signed in to the fake GitHub")
        if user.deny:
            return _redirect(redirect_uri, error="access_denied",
                             error_description="The user has denied your application access.", state=state)
        code = secrets.token_hex(10)
        self.codes[code] = IssuedCode(user=user, client_id=self.client_id, redirect_uri=redirect_uri,
                                      challenge=query.get("code_challenge", ""),
                                      challenge_method=query.get("code_challenge_method", ""),
                                      scope=query.get("scope", ""))
        return _redirect(redirect_uri, code=code, state=state)

    async def access_token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_requests.append(form)
        if self.token_endpoint_status != 200:
            return web.Response(status=self.token_endpoint_status, text="<html>unicorn</html>",
                                content_type="text/html")
        if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
            return _oauth_error("incorrect_client_credentials")
        issued = self.codes.pop(form.get("code", ""), None)  # a code works once
        if issued is None or issued.client_id != form.get("client_id"):
            return _oauth_error("bad_verification_code")
        if form.get("redirect_uri") != issued.redirect_uri:
            return _oauth_error("redirect_uri_mismatch")
        verifier = form.get("code_verifier", "")
        if issued.challenge_method != "S256" or not verifier or s256(verifier) != issued.challenge:
            return _oauth_error("bad_verification_code", "PKCE verification failed")
        token = "gho_" + secrets.token_hex(16)
        self.tokens[token] = (issued.user, issued.scope)
        return web.json_response({"access_token": token, "token_type": "bearer", "scope": issued.scope})

    def _token_user(self, request: web.Request) -> tuple[FakeUser, str]:
        self.api_requests.append(request.path)
        header = request.headers.get("Authorization", "")
        kind, _, token = header.partition(" ")
        if kind.lower() not in ("bearer", "token") or token not in self.tokens:
            raise web.HTTPUnauthorized(text='{"message": "Bad credentials"}', content_type="application/json")
        return self.tokens[token]

    async def user(self, request: web.Request) -> web.Response:
        user, _ = self._token_user(request)
        return web.json_response({"login": user.login, "id": user.id, "name": user.name,
                                  "avatar_url": f"{self.url}/avatars/{user.id}"})

    def _page(self, request: web.Request, items: list[dict[str, Any]]) -> web.Response:
        page = int(request.query.get("page", "1"))
        per_page = min(int(request.query.get("per_page", "30")), self.page_size)
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            next_url = request.url.with_query({"per_page": str(per_page), "page": str(page + 1)})
            headers["Link"] = f'<{next_url}>; rel="next"'
        return web.json_response(chunk, headers=headers)

    def _require_read_org(self, scope: str) -> None:
        if "read:org" not in scope.replace(",", " ").split():
            raise web.HTTPForbidden(text='{"message": "needs read:org"}', content_type="application/json")

    async def user_orgs(self, request: web.Request) -> web.Response:
        user, scope = self._token_user(request)
        self._require_read_org(scope)
        return self._page(request, [{"login": org, "id": i} for i, org in enumerate(user.orgs)])

    async def user_teams(self, request: web.Request) -> web.Response:
        user, scope = self._token_user(request)
        self._require_read_org(scope)
        return self._page(request, [{"slug": slug, "name": slug, "organization": {"login": org}}
                                    for org, slug in user.teams])


def _redirect(redirect_uri: str, **params: str) -> web.Response:
    sep = "&" if "?" in redirect_uri else "?"
    return web.Response(status=302, headers={"Location": redirect_uri + sep + urlencode(params)})


def _oauth_error(error: str, description: str = "") -> web.Response:
    # GitHub answers token errors with HTTP 200.
    return web.json_response({"error": error, "error_description": description or error})
