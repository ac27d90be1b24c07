"""A small GitHub OAuth2 client over aiohttp, built on authlib's protocol helpers.

Authlib 1.9 has no aiohttp integration, so this module uses its pieces that do no I/O
(`prepare_grant_uri`, `prepare_token_request`, `create_s256_code_challenge`, `OAuth2Token`)
and does the HTTP itself. All URLs derive from settings (`github_url`, `github_api_url`), so
GitHub Enterprise Server works the same way. Failures become two exceptions: `OAuthRejected`
(the provider refused the code: the user should try again, a 400) and `GitHubUnavailable`
(network errors, 5xx, malformed answers: a 502). Tokens never appear in exceptions or logs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import aiohttp
from authlib.oauth2.rfc6749 import OAuth2Token
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri, prepare_token_request
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from userland.platform.model.settings import Settings

log = logging.getLogger(__name__)

API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
# Enough for anyone's orgs and teams; stops a misbehaving server from looping us forever.
_MAX_PAGES = 10


class OAuthRejected(Exception):
    """The token endpoint refused the code (bad, expired or used code, wrong verifier)."""

    def __init__(self, error: str, description: str = "") -> None:
        super().__init__(error)
        self.error = error
        self.description = description


class GitHubUnavailable(Exception):
    """GitHub could not be reached or answered something unusable."""


@dataclass(frozen=True)
class GitHubUser:
    login: str
    id: int
    name: str = ""
    avatar_url: str = ""


def user_agent() -> str:
    return "userland-auth"


class GitHubOAuth:
    def __init__(self, settings: Settings, http: aiohttp.ClientSession) -> None:
        self.settings = settings
        self.http = http
        self.authorize_endpoint = f"{settings.github_url}/login/oauth/authorize"
        self.token_endpoint = f"{settings.github_url}/login/oauth/access_token"
        self.api = settings.github_api_url

    def authorization_url(self, *, state: str, verifier: str, redirect_uri: str,
                          scopes: list[str]) -> str:
        uri: str = prepare_grant_uri(
            self.authorize_endpoint, client_id=self.settings.github_client_id, response_type="code",
            redirect_uri=redirect_uri, scope=scopes, state=state,
            code_challenge=create_s256_code_challenge(verifier), code_challenge_method="S256",
            allow_signup="false",
        )
        return uri

    async def exchange_code(self, *, code: str, verifier: str, redirect_uri: str) -> str:
        """Trade an authorization code (and the PKCE verifier) for an access token."""
        body = prepare_token_request(
            "authorization_code", code=code, redirect_uri=redirect_uri, code_verifier=verifier,
            client_id=self.settings.github_client_id, client_secret=self.settings.github_client_secret,
        )
        headers = {"Accept": "application/json", "User-Agent": user_agent(),
                   "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8"}
        try:
            async with self.http.post(self.token_endpoint, data=body, headers=headers) as resp:
                status = resp.status
                try:
                    payload: Any = await resp.json(content_type=None)
                except ValueError:
                    payload = None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise GitHubUnavailable(f"token endpoint unreachable: {type(exc).__name__}") from None
        if status >= 500 or not isinstance(payload, dict):
            raise GitHubUnavailable(f"token endpoint answered HTTP {status}")
        # GitHub reports a bad code with HTTP 200 and an `error` field.
        if "error" in payload:
            raise OAuthRejected(str(payload["error"]), str(payload.get("error_description") or ""))
        token = OAuth2Token.from_dict(payload)
        access_token = token.get("access_token")
        if status != 200 or not isinstance(access_token, str) or not access_token:
            raise GitHubUnavailable(f"token endpoint answered HTTP {status} without a token")
        return access_token

    async def _get(self, path: str, token: str) -> tuple[Any, str | None]:
        """GET an API path (or absolute `next` URL); returns the JSON and the next page's URL."""
        url = path if path.startswith(("http://", "https://")) else f"{self.api}{path}"
        headers = {**API_HEADERS, "Authorization": f"Bearer {token}", "User-Agent": user_agent()}
        try:
            async with self.http.get(url, headers=headers) as resp:
                if resp.status != 200:
                    raise GitHubUnavailable(f"GET {path.split('?')[0]} answered HTTP {resp.status}")
                data = await resp.json(content_type=None)
                next_link = resp.links["next"].get("url") if "next" in resp.links else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise GitHubUnavailable(f"GET {path.split('?')[0]} failed: {type(exc).__name__}") from None
        if next_link and not str(next_link).startswith(self.api + "/"):
            # Never send the token to a host the settings did not name.
            raise GitHubUnavailable(f"GET {path.split('?')[0]} linked to another host")
        return data, (str(next_link) if next_link else None)

    async def _get_all(self, path: str, token: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        url: str | None = f"{path}?per_page=100"
        for _ in range(_MAX_PAGES):
            if url is None:
                break
            data, url = await self._get(url, token)
            if not isinstance(data, list):
                raise GitHubUnavailable(f"GET {path} did not answer a list")
            items.extend(item for item in data if isinstance(item, dict))
        return items

    async def user(self, token: str) -> GitHubUser:
        data, _ = await self._get("/user", token)
        try:
            login, user_id = data["login"], data["id"]
            if not isinstance(login, str) or not isinstance(user_id, int) or isinstance(user_id, bool):
                raise TypeError
        except (KeyError, TypeError):
            raise GitHubUnavailable("GET /user answered no login and id") from None
        return GitHubUser(login=login, id=user_id, name=str(data.get("name") or ""),
                          avatar_url=str(data.get("avatar_url") or ""))

    async def orgs(self, token: str) -> frozenset[str]:
        """The user's organizations (lowercased logins)."""
        return frozenset(str(org["login"]).lower() for org in await self._get_all("/user/orgs", token)
                         if "login" in org)

    async def teams(self, token: str) -> frozenset[str]:
        """The user's teams as lowercased `org/slug`."""
        found = set()
        for team in await self._get_all("/user/teams", token):
            org = team.get("organization")
            if isinstance(org, dict) and "login" in org and "slug" in team:
                found.add(f"{org['login']}/{team['slug']}".lower())
        return frozenset(found)
