"""The tool's token client and the bearer-token calls of LTI Advantage services (the I/O edge).

`TokenClient.token(credentials, scopes)` returns a cached token or asks the registration's token
URL for one (platform/model/lti_services_token.py builds the request and reads the answer).
What it guarantees:

- the client assertion goes to the registration's token URL and nowhere else: no redirect is
  followed, and the URL must be https (plain http only on loopback);
- one request at a time per (token URL, client id, scopes): callers waiting for the same token
  share the first caller's answer, token or error, instead of each asking; other keys (another
  registration, other scopes) never wait for it;
- a token endpoint that is slow or answers garbage gives a `TokenError` within `timeout`
  seconds (connecting and reading included) and with at most MAX_TOKEN_RESPONSE_BYTES read;
- the token and the assertion are never logged; a log line names the endpoint and the scopes.

`TokenClient.call(...)` sends one service request with the token: a 401 drops the cached token
and asks once more with a new one (a platform may revoke tokens early). Service URLs come from
the platform's signed launch claims; they too must be https (or loopback), and no redirect is
followed, so the bearer token never leaves for a host the platform did not name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from userland.platform.model.lti_services_token import (
    MAX_TOKEN_RESPONSE_BYTES,
    AccessToken,
    CacheKey,
    ServiceCredentials,
    TokenCache,
    TokenError,
    cache_key,
    check_scopes,
    check_url,
    parse_token_response,
    token_request_form,
)

log = logging.getLogger("userland.lti.services")

DEFAULT_TIMEOUT_SECONDS = 10.0
# A service answer (one roster page, one line item list) larger than this is refused.
MAX_SERVICE_RESPONSE_BYTES = 8 * 1024 * 1024


class ServiceError(Exception):
    """A service call failed. str() is a sentence staff can act on; `retryable` says whether
    trying later may help (the LMS down or slow) or not (a refusal, a malformed answer)."""

    def __init__(self, message: str, *, retryable: bool, status: int = 0) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


@dataclass(frozen=True)
class ServiceResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes
    link: tuple[str, ...]  # every Link header the answer carried


async def _read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None when it is longer than `limit` (the rest is never read)."""
    if response.content_length is not None and response.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(65_536):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class TokenClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._seconds = timeout
        self._clock = clock
        self._cache = TokenCache()
        self._asking: dict[CacheKey, asyncio.Future[AccessToken]] = {}
        self.token_requests = 0  # how many times a token endpoint was asked (tests, benchmarks)
        self.service_requests = 0

    async def token(self, credentials: ServiceCredentials, scopes: Iterable[str]) -> AccessToken:
        asked = check_scopes(scopes)
        key = cache_key(credentials, asked)
        cached = self._cache.get(key, self._clock())
        if cached is not None:
            return cached
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._ask_and_keep(key, credentials, asked))
            self._asking[key] = asking
            asking.add_done_callback(lambda done: self._finished(key, done))
        # Every caller waits for the one request, and gets its token or its error: a token
        # endpoint that is down costs one timeout, not one per caller. A caller cancelled
        # while waiting does not cancel the request the others wait for.
        return await asyncio.shield(asking)

    async def _ask_and_keep(
        self, key: CacheKey, credentials: ServiceCredentials, asked: frozenset[str]
    ) -> AccessToken:
        token = await self._ask(credentials, asked)
        self._cache.put(key, token)
        return token

    def _finished(self, key: CacheKey, done: asyncio.Future[AccessToken]) -> None:
        if self._asking.get(key) is done:
            del self._asking[key]
        if not done.cancelled():
            done.exception()  # retrieved here too, so nobody waiting is no warning

    def forget(self, credentials: ServiceCredentials, scopes: Iterable[str]) -> None:
        self._cache.forget(cache_key(credentials, frozenset(scopes)))

    async def _ask(self, credentials: ServiceCredentials, asked: frozenset[str]) -> AccessToken:
        where = credentials.token_url
        try:
            check_url(where, "the registration's token URL")
        except ValueError as err:
            raise TokenError(f"{str(err)[:1].upper()}{str(err)[1:]}.", retryable=False) from None
        # The assertion's iat/exp are wall-clock times the platform checks; the cache counts a
        # token's life on `clock` (monotonic: a wall clock set back or forward cannot stretch it).
        form = token_request_form(credentials, asked, now=time.time(), jti=secrets.token_urlsafe(24))
        self.token_requests += 1
        started = time.monotonic()
        try:
            async with self._session.post(
                where,
                data=form,
                allow_redirects=False,
                timeout=self._timeout,
                headers={"Accept": "application/json"},
            ) as response:
                if 300 <= response.status < 400:
                    raise TokenError(
                        f"The LMS's token endpoint ({where}) answered with a redirect "
                        f"(HTTP {response.status}); Userland sends its credentials only to "
                        "the registration's token URL. Check that URL.",
                        retryable=False,
                    )
                body = await _read_bounded(response, MAX_TOKEN_RESPONSE_BYTES)
                status = response.status
        except TimeoutError:
            raise TokenError(
                f"The LMS's token endpoint ({where}) did not answer within {self._seconds:g} "
                "seconds; Userland will try again.",
                retryable=True,
            ) from None
        except aiohttp.ClientError as err:
            raise TokenError(
                f"The LMS's token endpoint ({where}) could not be reached "
                f"({type(err).__name__}); Userland will try again.",
                retryable=True,
            ) from None
        if body is None:
            raise TokenError(
                f"The LMS's token endpoint ({where}) answered with more than "
                f"{MAX_TOKEN_RESPONSE_BYTES} bytes, which is not a token. Check the "
                "registration's token URL.",
                retryable=True,
            )
        try:
            token = parse_token_response(status, body, asked=asked, now=self._clock(), where=where)
        except TokenError as err:
            log.warning(
                "LTI token request failed", extra={"token_url": where, "status": status, "reason": str(err)}
            )
            raise
        log.info(
            "LTI token obtained",
            extra={
                "token_url": where,
                "client_id": credentials.client_id,
                "scopes": " ".join(sorted(asked)),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return token

    async def call(
        self,
        credentials: ServiceCredentials,
        scopes: Iterable[str],
        method: str,
        url: str,
        *,
        accept: str,
        json_body: Any = None,
        content_type: str = "",
        max_bytes: int = MAX_SERVICE_RESPONSE_BYTES,
    ) -> ServiceResponse:
        """One service request with a bearer token for `scopes`; a 401 is retried once with a
        new token. Raises TokenError (no token) or ServiceError (no answer, or a refusal)."""
        asked = check_scopes(scopes)
        try:
            check_url(url, "the LMS's service URL")
        except ValueError as err:
            raise ServiceError(f"{str(err)[:1].upper()}{str(err)[1:]}.", retryable=False) from None
        for attempt in (1, 2):
            token = await self.token(credentials, asked)
            response = await self._send(
                token,
                method,
                url,
                accept=accept,
                json_body=json_body,
                content_type=content_type,
                max_bytes=max_bytes,
            )
            if response.status == 401 and attempt == 1:
                self.forget(credentials, asked)
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(
        self,
        token: AccessToken,
        method: str,
        url: str,
        *,
        accept: str,
        json_body: Any,
        content_type: str,
        max_bytes: int,
    ) -> ServiceResponse:
        headers = {"Authorization": f"Bearer {token.value}", "Accept": accept}
        data: bytes | None = None
        if json_body is not None:
            data = json.dumps(json_body).encode()
            headers["Content-Type"] = content_type or "application/json"
        self.service_requests += 1
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, allow_redirects=False, timeout=self._timeout
            ) as response:
                if 300 <= response.status < 400:
                    raise ServiceError(
                        f"The LMS answered {method} {url} with a redirect (HTTP "
                        f"{response.status}); Userland does not follow it with its token.",
                        retryable=False,
                        status=response.status,
                    )
                body = await _read_bounded(response, max_bytes)
                links = tuple(response.headers.getall("Link", ()))
                status = response.status
                answer_headers = {name: value for name, value in response.headers.items()}
        except TimeoutError:
            raise ServiceError(
                f"The LMS did not answer {method} {url} within {self._seconds:g} seconds.", retryable=True
            ) from None
        except aiohttp.ClientError as err:
            raise ServiceError(
                f"The LMS could not be reached at {url} ({type(err).__name__}).", retryable=True
            ) from None
        if body is None:
            raise ServiceError(
                f"The LMS answered {method} {url} with more than {max_bytes} bytes; Userland reads no more.",
                retryable=False,
                status=status,
            )
        return ServiceResponse(status=status, headers=answer_headers, body=body, link=links)
