"""The assignment store as the operator and the web UI call it (the I/O edge; HTTP, signed).

Every request is signed for its purpose (platform/model/coursework.py); answers are JSON dicts. An
assignment is named by its namespace, name and uid (a name deleted and made again is another
assignment at the store). What goes wrong is translated here, once: `StoreUnavailable` (it does
not answer, or answers 5xx: try again later), `FetchRefused` (the source cannot be fetched: a
reason and a sentence for the Assignment's status), `StoreError` for the rest, with the store's
own words when it gave some (a quota passed: 413; its disk full: 507). `state` remembers each
assignment's last answer and asks with If-None-Match, so an unchanged assignment costs the store
a 304.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp

from userland.platform.model import coursework
from userland.platform.model.coursework import Purpose

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
        self._states: dict[tuple[str, str, str], tuple[str, JSON]] = {}
        self.requests = 0  # how many requests were sent (the benchmark reports it)

    async def close(self) -> None:
        if self._owns:
            await self._session.close()

    def _signed(self, method: str, path: str, query: dict[str, str] | None = None, *,
                body: str = coursework.EMPTY_BODY, nonce: str | None = None) -> tuple[str, dict[str, str]]:
        """The URL and the signature header of one request whose body has the sha256 `body`
        (or is coursework.STREAMED, its MAC after it: `_trailed`)."""
        path_qs = path + (f"?{urlencode(query)}" if query else "")
        signature = coursework.request_signature(self.secret, self.purpose, method, path_qs, body=body,
                                                 nonce=nonce)
        self.requests += 1
        return self.url + path_qs, {coursework.SIGNATURE_HEADER: signature}

    async def _trailed(self, chunks: AsyncIterable[bytes], nonce: str) -> AsyncIterator[bytes]:
        """A streamed body, then the MAC of all of it: the store keeps nothing of a body that
        is not the one signed (a captured header sent with another body)."""
        hasher = hashlib.sha256()
        async for chunk in chunks:
            hasher.update(chunk)
            yield chunk
        yield coursework.body_trailer(self.secret, nonce, hasher.hexdigest())

    @staticmethod
    def _path(namespace: str, assignment: str, uid: str, rest: str) -> str:
        return f"/v1/a/{namespace}/{assignment}/{uid}/{rest}"

    async def _json(self, method: str, path: str, *, query: dict[str, str] | None = None,
                    body: Any = None, data: Any = None, headers: dict[str, str] | None = None,
                    timeout: float | None = None) -> tuple[int, JSON, dict[str, str]]:
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        if isinstance(data, bytes | None):
            url, signed = self._signed(method, path, query, body=hashlib.sha256(data or b"").hexdigest())
        else:  # streamed: signed with a nonce of its own, its MAC after its last byte
            nonce = secrets.token_hex(16)
            url, signed = self._signed(method, path, query, body=coursework.STREAMED, nonce=nonce)
            data = self._trailed(data, nonce)
        try:
            async with self._session.request(
                    method, url, data=data, headers={**signed, **(headers or {})},
                    timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None) as response:
                if response.status == 507:
                    words = await _message(response)
                    raise StoreError(507, words or "the assignment store's disk is full")
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

    async def live(self, namespace: str, assignments: dict[str, str]) -> JSON:
        """Tell the store every Assignment of `namespace` that exists (name: uid): the others'
        files are removed after the retention."""
        status, payload, _ = await self._json("PUT", f"/v1/n/{namespace}/live",
                                              body={"assignments": assignments})
        if status != 200:
            raise StoreError(status, f"the assignment store refused the list of assignments ({status})")
        return payload

    async def grading_failures(self, namespace: str, assignment: str, uid: str, failures: list[JSON]) -> None:
        """Record gradings that ended without a report (docs/grading.md): each a dict with template,
        login, round, version, reason and message."""
        status, _, _ = await self._json("POST", self._path(namespace, assignment, uid, "grading/failures"),
                                        body={"failures": failures})
        if status != 200:
            raise StoreError(status, f"the assignment store refused the grading failures ({status})")

    async def grading_results(self, namespace: str, assignment: str, uid: str, template: str,
                              login: str, *, check: bool = False) -> JSON | None:
        """One student's grading: {"summary", "results"} (None: not graded); with `check`, their
        last "Check my work" instead (never a grade)."""
        kind = "checks" if check else "results"
        status, payload, _ = await self._json(
            "GET", self._path(namespace, assignment, uid, f"grading/{kind}/{template}/{login}"))
        if status == 404:
            return None
        if status != 200:
            raise StoreError(status, f"the assignment store refused the grading results ({status})")
        return payload

    async def members(self, namespace: str, assignment: str, uid: str,
                      members: list[tuple[str, str]]) -> None:
        """Tell the store an assignment's current students' environments, (template, login)."""
        status, _, _ = await self._json("PUT", self._path(namespace, assignment, uid, "members"),
                                        body={"members": [list(m) for m in members]})
        if status != 200:
            raise StoreError(status, f"the assignment store refused the students ({status})")

    async def fetch(self, namespace: str, assignment: str, uid: str, *, url: str, ref: str, sub_path: str,
                    token: str = "", secret: str = "", timeout: float = 900.0) -> JSON:
        """Fetch (once) the commit `ref` names: its key at the store, commit, count, bytes, skipped."""
        status, payload, _ = await self._json(
            "POST", self._path(namespace, assignment, uid, "fetch"), timeout=timeout,
            body={"url": url, "ref": ref, "subPath": sub_path, "token": token, "secret": secret})
        if status == 422:
            raise FetchRefused(str(payload.get("reason") or "FetchFailed"), str(payload.get("message") or ""))
        if status != 200:
            raise StoreError(status, f"the assignment store refused the fetch ({status})")
        return payload

    async def check(self, namespace: str, assignment: str, *, url: str, ref: str,
                    timeout: float = 30.0) -> tuple[str, str] | None:
        """Whether the public repository `url` has `ref` (the web form asks before an Assignment
        is made): None when it has, else (reason, words) to show in the form."""
        status, payload, _ = await self._json("POST", f"/v1/a/{namespace}/{assignment}/check",
                                              body={"url": url, "ref": ref}, timeout=timeout)
        if status == 429:  # every check slot is taken: busy, said by the store
            return "Busy", str(payload.get("message") or "the platform is busy: try again in a minute")
        if status != 200:
            raise StoreError(status, f"the assignment store refused the check ({status})")
        if payload.get("ok"):
            return None
        return str(payload.get("reason") or "Unreachable"), str(payload.get("message") or "")

    async def state(self, namespace: str, assignment: str, uid: str) -> JSON:
        """Everything the store knows of an assignment (hand-out results, copies, uploads, usage)."""
        known = self._states.get((namespace, assignment, uid))
        headers = {"If-None-Match": known[0]} if known else {}
        status, payload, answered = await self._json("GET", self._path(namespace, assignment, uid, "state"),
                                                     headers=headers)
        if status == 304 and known is not None:
            return known[1]
        if status != 200:
            raise StoreError(status, f"the assignment store refused to say ({status})")
        if etag := answered.get("ETag"):
            self._states[(namespace, assignment, uid)] = (etag, payload)
        return payload

    def forget(self, namespace: str, assignment: str) -> None:
        for key in [k for k in self._states if k[:2] == (namespace, assignment)]:
            self._states.pop(key, None)

    async def open_zip(self, namespace: str, assignment: str, uid: str, *, login: str | None = None,
                       nested: bool = False) -> aiohttp.ClientResponse:
        """The streamed zip of the newest copies of the current students (every one's, or
        `login`'s): the caller reads `response.content` and releases it."""
        query = {k: v for k, v in (("login", login or ""), ("nested", "1" if nested else "")) if v}
        url, signed = self._signed("GET", self._path(namespace, assignment, uid, "collected.zip"), query)
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

    async def put_feedback(self, namespace: str, assignment: str, uid: str,
                           body: bytes | AsyncIterable[bytes], *, login: str | None = None,
                           name: str = "") -> JSON:
        """Staff's feedback: a zip with a folder per login, or (`login`) one student's zip or one
        file called `name`. {"students": {login: {files, bytes}}, "ignored": [...]}; folders of
        logins that are not the assignment's students are ignored, never kept."""
        rest = "feedback" + (f"/{login}" if login else "")
        if isinstance(body, bytes):
            body = _chunks(body)  # always streamed, as the web UI sends what it receives
        status, payload, _ = await self._json("PUT", self._path(namespace, assignment, uid, rest), data=body,
                                              query={"name": name} if name else None,
                                              headers={"Content-Type": "application/octet-stream"})
        if status in (400, 409, 413):
            raise StoreError(status, str(payload.get("message") or "the feedback could not be read"))
        if status != 200:
            raise StoreError(status, f"the assignment store refused the feedback ({status})")
        return payload


async def _message(response: aiohttp.ClientResponse) -> str:
    """The store's own words in a JSON answer ("" when it gave none)."""
    try:
        payload = await response.json()
    except (aiohttp.ContentTypeError, ValueError):
        return ""
    return str(payload.get("message") or "") if isinstance(payload, dict) else ""


async def _chunks(data: bytes, size: int = 256 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]
