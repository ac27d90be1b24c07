"""An informer: a watched, in-memory copy of one kind of object.

It lists, then watches from the list's resourceVersion; it resumes each watch from the last
version it saw (bookmarks included), relists on 410 Gone, and backs off on errors. Handlers
are called with (old, new) for every change; either is None for an add or a delete. A relist
reports the differences it finds, so no change is lost while a watch was down.
Objects are stored after `transform` (trim what no one reads, such as managedFields).
With `compact=True` each object is kept as its compact JSON text (a third to a fifth of the
memory of the dicts) and decoded on every read, so readers also get a private copy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

from userland.platform.kube import JSON, Gone, KubeClient, KubeError, Resource

log = logging.getLogger(__name__)

Handler = Callable[[JSON | None, JSON | None], None]
Key = tuple[str, str]


def object_key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def drop_managed_fields(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespaces: Iterable[str] = (),
        *,
        label_selector: str | None = None,
        transform: Callable[[JSON], JSON] = drop_managed_fields,
        watch_timeout: int = 300,
        compact: bool = False,
    ) -> None:
        self.client = client
        self.resource = resource
        # No namespaces: one cluster-wide watch.
        self.namespaces: tuple[str | None, ...] = tuple(namespaces) or (None,)
        self.label_selector = label_selector
        self.transform = transform
        self.watch_timeout = watch_timeout
        self.compact = compact
        # Values are dicts, or JSON text when compact: use get()/put()/items(), not this.
        self.store: dict[Key, Any] = {}
        self.handlers: list[Handler] = []
        self._synced = {ns: asyncio.Event() for ns in self.namespaces}
        self.healthy = True
        self.relists = 0

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    def _decode(self, value: Any) -> JSON:
        return json.loads(value) if self.compact else value  # type: ignore[no-any-return]

    def _encode(self, obj: JSON) -> Any:
        return json.dumps(obj, separators=(",", ":")) if self.compact else obj

    def get(self, namespace: str, name: str) -> JSON | None:
        value = self.store.get((namespace, name))
        return None if value is None else self._decode(value)

    def items(self) -> list[JSON]:
        return [self._decode(v) for v in self.store.values()]

    def object_keys(self) -> list[Key]:
        return list(self.store)

    def put(self, obj: JSON) -> None:
        """Record an object this process just wrote (read-your-writes, before its event)."""
        obj = self._typed(obj)
        self.store[object_key(obj)] = self._encode(obj)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(event.wait() for event in self._synced.values()))

    @property
    def synced(self) -> bool:
        return all(event.is_set() for event in self._synced.values())

    async def run(self, resume_from: str = "") -> None:
        """List and watch until cancelled. `resume_from` starts by watching from that
        resourceVersion instead of listing (a restarted watch; tests use it to meet 410)."""
        await asyncio.gather(*(self._run_namespace(ns, resume_from) for ns in self.namespaces))

    def _emit(self, old: JSON | None, new: JSON | None) -> None:
        for handler in self.handlers:
            try:
                handler(old, new)
            except Exception:  # a handler bug must not stop the watch
                log.exception("informer handler failed", extra={"kind": self.resource.kind})

    def _typed(self, raw: JSON) -> JSON:
        """The object with its `apiVersion` and `kind`: a list's items come without them (a
        watch event's object has them), and a copy made from a list must compare equal to the
        same object read any other way (the operator compares children with what it wants)."""
        raw.setdefault("apiVersion", self.resource.api_version)
        raw.setdefault("kind", self.resource.kind)
        return self.transform(raw)

    def _apply(self, event_type: str, raw: JSON) -> None:
        obj = self._typed(raw)
        key = object_key(obj)
        previous = self.store.get(key)
        old = None if previous is None else self._decode(previous)
        if event_type == "DELETED":
            if self.store.pop(key, None) is not None:
                self._emit(old, None)
            return
        self.store[key] = self._encode(obj)
        self._emit(old, obj)

    def _replace(self, namespace: str | None, items: list[JSON]) -> None:
        fresh = {object_key(o): o for o in map(self._typed, items)}
        stale = [k for k in self.store if (namespace is None or k[0] == namespace) and k not in fresh]
        for key in stale:
            self._emit(self._decode(self.store.pop(key)), None)
        for key, obj in fresh.items():
            previous = self.store.get(key)
            old = None if previous is None else self._decode(previous)
            self.store[key] = self._encode(obj)
            if old is None or _version(old) != _version(obj):
                self._emit(old, obj)

    async def _run_namespace(self, namespace: str | None, version: str = "") -> None:
        backoff = 0.5
        while True:
            try:
                if not version:
                    listing = await self.client.list(
                        self.resource, namespace, label_selector=self.label_selector
                    )
                    self.relists += 1
                    self._replace(namespace, listing["items"])
                    version = str(listing["metadata"].get("resourceVersion", ""))
                    self._synced[namespace].set()
                async for event in self.client.watch(
                    self.resource,
                    namespace,
                    version,
                    label_selector=self.label_selector,
                    timeout_seconds=self.watch_timeout,
                ):
                    obj: JSON = event.get("object") or {}
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") != "BOOKMARK":
                        self._apply(str(event.get("type")), obj)
                self.healthy = True
                backoff = 0.5
            except Gone:
                log.info("watch expired, relisting", extra={"kind": self.resource.kind})
                version = ""
            except asyncio.CancelledError:
                raise
            except (KubeError, ValueError) as err:
                self.healthy = False
                log.warning(
                    "watch failed, retrying",
                    extra={"kind": self.resource.kind, "error": str(err), "retry_in": round(backoff, 2)},
                )
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 30.0)


def _version(obj: JSON) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")
