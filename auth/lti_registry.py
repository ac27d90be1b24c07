"""The LMS registrations the gateway accepts launches from, and their key sets.

A watch of the LtiRegistration objects in the LTI namespace, kept in memory (a launch never
costs an API request); each object is checked when it changes (the model's rules, then its
platform's key set fetched) and, every `RECHECK_SECONDS`, again when it does not work, and its
Ready condition written (auth/rules/lti_registrations.py; nothing is written when nothing
changed). Two objects with one (issuer, client id): the older one is used, the newer says why not.

Key sets are cached per URL for `KEYS_TTL_SECONDS`; a token whose `kid` is not in the cached
set fetches it again (a platform's own rotation), at most once per `REFETCH_SECONDS` per URL,
so a flood of tokens with made-up kids costs the platform nothing. Key sets are fetched with a
short timeout and a size cap: a slow or huge answer is a failed fetch, never a hung launch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from userland.auth.rules import lti_registrations as status_rules
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import KubeClient, KubeError, Resource
from userland.platform.model import naming
from userland.platform.model.lti import KIND, PLURAL, InvalidRegistration, LtiRegistration

log = logging.getLogger(__name__)

LTI_REGISTRATIONS = Resource(naming.GROUP, naming.VERSION, PLURAL, KIND)
KEYS_TTL_SECONDS = 600.0
REFETCH_SECONDS = 30.0
RECHECK_SECONDS = 300.0
FETCH_TIMEOUT = aiohttp.ClientTimeout(total=10, connect=5)
MAX_KEY_SET_BYTES = 256 * 1024


class KeySetUnavailable(Exception):
    """The platform's key set could not be read; the message says why (no secrets in it)."""


@dataclass
class _CachedKeys:
    keys: dict[str, Any]
    fetched: float


class KeySets:
    """Platforms' key sets by URL, cached."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self._cache: dict[str, _CachedKeys] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def fetch(self, url: str) -> dict[str, Any]:
        try:
            async with self.http.get(url, headers={"Accept": "application/json"}, allow_redirects=False,
                                     timeout=FETCH_TIMEOUT) as resp:
                if resp.status != 200:
                    raise KeySetUnavailable(f"it answered HTTP {resp.status}")
                body = await resp.content.read(MAX_KEY_SET_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KeySetUnavailable(f"no answer ({type(exc).__name__})") from None
        if len(body) > MAX_KEY_SET_BYTES:
            raise KeySetUnavailable("its answer is too large for a key set")
        try:
            keys = json.loads(body)
        except ValueError:
            raise KeySetUnavailable("its answer is not JSON") from None
        if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
            raise KeySetUnavailable("its answer has no \"keys\" list")
        return keys

    async def refresh(self, url: str) -> dict[str, Any]:
        """Fetch the key set at `url` now (a registration's check), and cache it."""
        keys = await self.fetch(url)
        self._cache[url] = _CachedKeys(keys, time.monotonic())
        return keys

    async def get(self, url: str, *, kid: str | None = None, now: float | None = None) -> dict[str, Any]:
        """The key set at `url`: cached, fetched again when stale or when it lacks `kid`."""
        now = time.monotonic() if now is None else now
        lock = self._locks.setdefault(url, asyncio.Lock())
        async with lock:
            cached = self._cache.get(url)
            if cached is not None:
                fresh = now - cached.fetched < KEYS_TTL_SECONDS
                known = kid is None or any(isinstance(k, dict) and k.get("kid") == kid
                                           for k in cached.keys["keys"])
                if fresh and (known or now - cached.fetched < REFETCH_SECONDS):
                    return cached.keys
            keys = await self.fetch(url)
            self._cache[url] = _CachedKeys(keys, now)
            return keys


class Registrations:
    """The registrations of the LTI namespace, from a watch; `find` is what a launch asks."""

    def __init__(self, kube: KubeClient, namespace: str, key_sets: KeySets) -> None:
        self.kube = kube
        self.namespace = namespace
        self.key_sets = key_sets
        self.informer = Informer(kube, LTI_REGISTRATIONS, (namespace,))
        self._dirty: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.informer.add_handler(self._changed)

    def _changed(self, _old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            meta = new.get("metadata") or {}
            self._dirty.put_nowait((str(meta.get("namespace", "")), str(meta.get("name", ""))))

    def _ordered(self) -> list[dict[str, Any]]:
        def age(obj: Mapping[str, Any]) -> tuple[str, str]:
            meta = obj.get("metadata") or {}
            return (str(meta.get("creationTimestamp", "")), str(meta.get("name", "")))
        return sorted(self.informer.items(), key=age)

    def _resolve(self) -> tuple[list[LtiRegistration], dict[str, status_rules.Outcome]]:
        """The usable registrations (the first of each key), and the outcome of those that are not."""
        usable: dict[tuple[str, str], LtiRegistration] = {}
        refused: dict[str, status_rules.Outcome] = {}
        for obj in self._ordered():
            name = str((obj.get("metadata") or {}).get("name", ""))
            try:
                registration = LtiRegistration.from_object(obj)
            except InvalidRegistration as exc:
                refused[name] = status_rules.invalid(str(exc))
                continue
            first = usable.get(registration.key)
            if first is not None:
                refused[name] = status_rules.duplicate(first.name)
                continue
            usable[registration.key] = registration
        return list(usable.values()), refused

    def all(self) -> list[LtiRegistration]:
        return self._resolve()[0]

    async def check(self, name: str) -> None:
        """Check one registration and write its status when it changed."""
        obj = self.informer.get(self.namespace, name)
        if obj is None:
            return
        usable, refused = self._resolve()
        outcome = refused.get(name)
        if outcome is None:
            registration = next(r for r in usable if r.name == name)
            try:
                keys = await self.key_sets.refresh(registration.key_set_url)
                outcome = status_rules.key_set_fetched(len(keys["keys"]), registration.key_set_url)
            except KeySetUnavailable as exc:
                outcome = status_rules.key_set_failed(registration.key_set_url, str(exc))
        patch = status_rules.status_patch(obj, outcome)
        if patch is None:
            return
        try:
            written = await self.kube.merge_patch(LTI_REGISTRATIONS, self.namespace, name, patch,
                                                  subresource="status")
            self.informer.put(written)
        except KubeError as exc:
            log.warning("could not write an LtiRegistration's status",
                        extra={"event": "lti.status_failed", "registration": name, "error": str(exc)[:200]})
            return
        log.info("LtiRegistration checked", extra={"event": "lti.registration_checked", "registration": name,
                                                   "ready": outcome.ready, "reason": outcome.reason})

    async def run(self) -> None:
        """Watch and check until cancelled."""
        watch = asyncio.create_task(self.informer.run())
        recheck = asyncio.create_task(self._recheck())
        try:
            while True:
                _namespace, name = await self._dirty.get()
                try:
                    await self.check(name)
                except Exception:  # one registration's surprise must not stop the others'
                    log.exception("LtiRegistration check failed", extra={"registration": name})
        finally:
            for task in (watch, recheck):
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(watch, recheck, return_exceptions=True)

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_SECONDS)
            for obj in self.informer.items():
                conditions = (obj.get("status") or {}).get("conditions") or []
                if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                    self._dirty.put_nowait((self.namespace, str((obj.get("metadata") or {}).get("name", ""))))
