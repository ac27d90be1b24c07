"""The assignment store as the operator and the web UI call it (the I/O edge; HTTP, signed).

Every request is signed for its purpose (platform/coursework.py); answers are JSON dicts. What
goes wrong is translated here, once: `StoreUnavailable` (it does not answer, or answers 5xx:
try again later), `FetchRefused` (the source cannot be fetched: a reason and a sentence for the
Assignment's status), `StoreError` for the rest. `state` remembers each assignment's last
answer and asks with If-None-Match, so an unchanged assignment costs the store a 304.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any
from urllib.parse import urlencode

import aiohttp

from userland.platform import coursework
from userland.platform.coursework import Purpose

JSON = dict[str, Any]


class StoreError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class StoreUnavailable(StoreError):
    """The store does not answer (or failed): nothing was done; try again later."""


class FetchRefused(StoreError):
    """The source cannot be had: `reason` (UnknownRef, Unauthorized, TooLarge ...) and words."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(422, message)
        self.reason = reason


class StoreClient:
    def __init__(self, url: str, secret: str, purpose: Purpose, *,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.url = url.rstrip("/")
        self.secret = secret
        self.purpose = purpose
        self._session = session or aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=900))
        self._owns = session is None
        self._states: dict[tuple[str, str], tuple[str, JSON]] = {}
        self.requests = 0  # how many requests were sent (the benchmark reports it)

    async def close(self) -> None:
        if self._owns:
            await self._session.close()

    def _signed(self, method: str, path: str,
                query: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
        path_qs = path + (f"?{urlencode(query)}" if query else "")
        signature = coursework.request_signature(self.secret, self.purpose, method, path_qs)
        self.requests += 1
        return self.url + path_qs, {coursework.SIGNATURE_HEADER: signature}

    @staticmethod
    def _path(namespace: str, assignment: str, rest: str) -> str:
        return f"/v1/a/{namespace}/{assignment}/{rest}"

    async def _json(self, method: str, path: str, *, query: dict[str, str] | None = None,
                    body: Any = None, data: Any = None, headers: dict[str, str] | None = None,
                    timeout: float | None = None) -> tuple[int, JSON, dict[str, str]]:
        url, signed = self._signed(method, path, query)
        try:
            async with self._session.request(
                    method, url, json=body, data=data, headers={**signed, **(headers or {})},
                    timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None) as response:
                if response.status >= 500:
                    raise StoreUnavailable(response.status,
                                           f"the assignment store failed ({response.status})")
                payload: JSON = {}
                if response.status != 304 and response.content_type == "application/json":
                    payload = await response.json()
                return response.status, payload, dict(response.headers)
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise StoreUnavailable(0, f"the assignment store does not answer ({type(err).__name__})") \
                from None

    async def fetch(self, namespace: str, assignment: str, *, url: str, ref: str, sub_path: str,
                    token: str = "", secret: str = "", timeout: float = 900.0) -> JSON:
        """Fetch (once) the commit `ref` names: its key at the store, commit, count, bytes, skipped."""
        status, payload, _ = await self._json(
            "POST", self._path(namespace, assignment, "fetch"), timeout=timeout,
            body={"url": url, "ref": ref, "subPath": sub_path, "token": token, "secret": secret})
        if status == 422:
            raise FetchRefused(str(payload.get("reason") or "FetchFailed"), str(payload.get("message") or ""))
        if status != 200:
            raise StoreError(status, f"the assignment store refused the fetch ({status})")
        return payload

    async def state(self, namespace: str, assignment: str) -> JSON:
        """Everything the store knows of an assignment (hand-out results, copies, uploads)."""
        known = self._states.get((namespace, assignment))
        headers = {"If-None-Match": known[0]} if known else {}
        status, payload, answered = await self._json("GET", self._path(namespace, assignment, "state"),
                                                     headers=headers)
        if status == 304 and known is not None:
            return known[1]
        if status != 200:
            raise StoreError(status, f"the assignment store refused to say ({status})")
        if etag := answered.get("ETag"):
            self._states[(namespace, assignment)] = (etag, payload)
        return payload

    def forget(self, namespace: str, assignment: str) -> None:
        self._states.pop((namespace, assignment), None)

    async def open_zip(self, namespace: str, assignment: str, *, login: str | None = None,
                       nested: bool = False) -> aiohttp.ClientResponse:
        """The streamed zip of the newest copies (every student's, or `login`'s): the caller reads
        `response.content` and releases it."""
        query = {k: v for k, v in (("login", login or ""), ("nested", "1" if nested else "")) if v}
        url, signed = self._signed("GET", self._path(namespace, assignment, "collected.zip"), query)
        try:
            response = await self._session.get(url, headers=signed)
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise StoreUnavailable(0, f"the assignment store does not answer ({type(err).__name__})") \
                from None
        if response.status != 200:
            response.release()
            raise StoreUnavailable(response.status,
                                   f"the assignment store refused the zip ({response.status})")
        return response

    async def put_feedback(self, namespace: str, assignment: str, body: bytes | AsyncIterable[bytes], *,
                           login: str | None = None, name: str = "") -> JSON:
        """Staff's feedback: a zip with a folder per login, or (`login`) one student's zip or one
        file called `name`. {"students": {login: {files, bytes}}, "ignored": [...]}."""
        rest = "feedback" + (f"/{login}" if login else "")
        status, payload, _ = await self._json("PUT", self._path(namespace, assignment, rest), data=body,
                                              query={"name": name} if name else None,
                                              headers={"Content-Type": "application/octet-stream"})
        if status == 400:
            raise StoreError(400, str(payload.get("message") or "the feedback could not be read"))
        if status != 200:
            raise StoreError(status, f"the assignment store refused the feedback ({status})")
        return payload
