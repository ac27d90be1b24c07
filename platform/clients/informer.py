"""An informer: a watched, in-memory copy of one kind of object, with indexes.

It lists, then watches from the list's resourceVersion; it resumes each watch from the last
version it saw (bookmarks included), relists on 410 Gone, and backs off on errors. Handlers
are called with (old, new) for every change; either is None for an add or a delete. A relist
reports the differences it finds, so no change is lost while a watch was down. A change this
process wrote and `put()` stored first reaches the watch as no change at all (the cache holds
it already): a handler that must see it registers with `own_writes=True` and is called by
`put()` too (the operator's count of a scheduled Template's sleeping environments is one).
Objects are stored after `transform` (trim what no one reads, such as managedFields).
With `compact=True` each object is kept as its compact JSON text (a third to a fifth of the
memory of the dicts) and decoded on every read, so readers also get a private copy.

Indexes, as client-go's indexers: `add_index(name, func)` names a function from an object to
the values it is found under (any hashable: `(namespace, template)`); `by_index(name, value)`
returns the objects stored under a value, `index_keys` their keys. Indexes are updated before
handlers run, so a handler already finds the new object by its new values.

Two ways a cache can go quietly stale are closed here:

- **A write's response older than the watch.** `put()` records an object this process just
  wrote (read-your-writes), but the response of a write can reach us after the watch already
  delivered a newer version of that object (another writer, such as the deployment controller
  writing status a moment after our update). Storing it then would roll the cache back, and
  the watch never says that version again: the copy stays old until the object next changes
  (for a sleeping environment: never). So `put()` keeps whichever is newer, comparing
  resourceVersions as integers (as client-go's mutation cache does: etcd's revisions), and
  does not bring back an object the watch has already reported deleted.
- **A watch that stops delivering without closing** (a half-open connection, a proxy that
  stalls): the API server sends nothing on a quiet watch until its timeout (no periodic
  bookmarks in 1.20), so a watch that says nothing for `watch_timeout + stall_grace` seconds
  (75 by default) is stalled: the informer drops it and relists, within that bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from userland.platform.clients.kube import JSON, Gone, KubeClient, KubeError, Resource, WatchStalled
from userland.platform.model.telemetry import WatchStats

log = logging.getLogger(__name__)

Handler = Callable[[JSON | None, JSON | None], None]
Key = tuple[str, str]
IndexFunc = Callable[[JSON], Iterable[Hashable]]
# Seconds past a watch's own timeout with no byte from the server before it counts as stalled.
STALL_GRACE = 15.0
# Deleted objects remembered (by key), so a late write response cannot bring one back.
TOMBSTONES = 10_000


def object_key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def drop_managed_fields(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def version_number(obj: JSON | None) -> int | None:
    """The object's resourceVersion as an integer (None when it is not one: resourceVersions
    are opaque to clients, but every API server backed by etcd gives its revision)."""
    text = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else None


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespaces: Iterable[str] = (),
        *,
        label_selector: str | None = None,
        transform: Callable[[JSON], JSON] = drop_managed_fields,
        watch_timeout: int = 60,
        stall_grace: float = STALL_GRACE,
        compact: bool = False,
    ) -> None:
        self.client = client
        self.resource = resource
        # No namespaces: one cluster-wide watch.
        self.namespaces: tuple[str | None, ...] = tuple(namespaces) or (None,)
        self.label_selector = label_selector
        self.transform = transform
        self.watch_timeout = watch_timeout
        self.stall_grace = stall_grace
        self.compact = compact
        # Values are dicts, or JSON text when compact: use get()/put()/items(), not this.
        self.store: dict[Key, Any] = {}
        self.handlers: list[Handler] = []
        # Handlers that also see this process's own writes (`put`), not only the watch's.
        self.write_handlers: list[Handler] = []
        self._synced = {ns: asyncio.Event() for ns in self.namespaces}
        self.healthy = True
        # Why each watch ended and how often the store was listed afresh (for /metrics).
        self.watch_stats = WatchStats()
        # Writes whose response was older than what the cache already had (kept out).
        self.stale_puts = 0
        self._versions: dict[Key, int] = {}
        self._tombstones: OrderedDict[Key, int] = OrderedDict()
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[Hashable, set[Key]]] = {}
        self._indexed: dict[Key, dict[str, frozenset[Hashable]]] = {}

    @property
    def relists(self) -> int:
        return self.watch_stats.relists

    @property
    def stalls(self) -> int:
        return self.watch_stats.restarts["stalled"]

    def add_handler(self, handler: Handler, *, own_writes: bool = False) -> None:
        """`handler(old, new)` on every change the watch delivers; with `own_writes`, also on
        every change `put()` stores (a write of this process). A change stored by `put()`
        reaches the watch with the cache already holding it (old equals new), so a handler that
        must see every transition, ours included, asks for `own_writes`: it then sees each
        transition once, from whichever came first."""
        self.handlers.append(handler)
        if own_writes:
            self.write_handlers.append(handler)

    # ----- indexes -----

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Index every object (those stored already, and all to come) by `func(obj)`."""
        self._index_funcs[name] = func
        self._indices[name] = {}
        for key in self.store:
            self._index(key, self.get(*key))

    def index_values(self, name: str, obj: JSON | None) -> frozenset[Hashable]:
        """The values `obj` is (or would be) indexed under; none for None."""
        if obj is None:
            return frozenset()
        try:
            return frozenset(self._index_funcs[name](obj))
        except Exception:  # an index function must not stop the watch; the object is unindexed
            log.exception("index function failed", extra={"kind": self.resource.kind, "index": name})
            return frozenset()

    def index_keys(self, name: str, value: Hashable) -> list[Key]:
        return sorted(self._indices[name].get(value, ()))

    def by_index(self, name: str, value: Hashable) -> list[JSON]:
        return [obj for key in self.index_keys(name, value) if (obj := self.get(*key)) is not None]

    def indexed_values(self, name: str) -> list[Hashable]:
        """Every value some stored object is indexed under (such as every student with a Userland)."""
        return [value for value, members in self._indices[name].items() if members]

    def _index(self, key: Key, obj: JSON | None) -> None:
        if not self._index_funcs:
            return
        before = self._indexed.pop(key, {})
        after = {name: self.index_values(name, obj) for name in self._index_funcs}
        for name, values in after.items():
            index = self._indices[name]
            for value in before.get(name, frozenset()) - values:
                members = index.get(value)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del index[value]
            for value in values:
                index.setdefault(value, set()).add(key)
        if obj is not None and any(after.values()):
            self._indexed[key] = after

    # ----- the store -----

    def _decode(self, value: Any) -> JSON:
        return json.loads(value) if self.compact else value  # type: ignore[no-any-return]

    def _encode(self, obj: JSON) -> Any:
        return json.dumps(obj, separators=(",", ":")) if self.compact else obj

    def _set(self, key: Key, obj: JSON) -> None:
        self.store[key] = self._encode(obj)
        number = version_number(obj)
        if number is None:
            self._versions.pop(key, None)
        else:
            self._versions[key] = number
        self._tombstones.pop(key, None)
        self._index(key, obj)

    def _pop(self, key: Key, deleted_at: int | None = None) -> JSON | None:
        value = self.store.pop(key, None)
        known = self._versions.pop(key, None)
        last = deleted_at if deleted_at is not None else known
        if last is not None:
            self._tombstones[key] = last
            self._tombstones.move_to_end(key)
            while len(self._tombstones) > TOMBSTONES:
                self._tombstones.popitem(last=False)
        self._index(key, None)
        return None if value is None else self._decode(value)

    def get(self, namespace: str, name: str) -> JSON | None:
        value = self.store.get((namespace, name))
        return None if value is None else self._decode(value)

    def items(self) -> list[JSON]:
        return [self._decode(v) for v in self.store.values()]

    def object_keys(self) -> list[Key]:
        return list(self.store)

    def put(self, obj: JSON) -> bool:
        """Record an object this process just wrote (read-your-writes, before its event).

        False, and nothing stored, when the cache already holds a newer version of it (the
        watch got there first) or the watch has reported it deleted since."""
        obj = self._typed(obj)
        key = object_key(obj)
        incoming = version_number(obj)
        known = self._versions.get(key, self._tombstones.get(key))
        if incoming is not None and known is not None and incoming < known:
            self.stale_puts += 1
            log.info("kept the newer cached copy", extra={
                "kind": self.resource.kind, "object": "/".join(key), "written": incoming, "cached": known})
            return False
        previous = self.store.get(key)
        self._set(key, obj)
        if self.write_handlers:
            old = None if previous is None else self._decode(previous)
            self._emit(old, self._decode(self.store[key]), self.write_handlers)
        return True

    async def wait_synced(self) -> None:
        await asyncio.gather(*(event.wait() for event in self._synced.values()))

    @property
    def synced(self) -> bool:
        return all(event.is_set() for event in self._synced.values())

    async def run(self, resume_from: str = "") -> None:
        """List and watch until cancelled. `resume_from` starts by watching from that
        resourceVersion instead of listing (a restarted watch; tests use it to meet 410)."""
        await asyncio.gather(*(self._run_namespace(ns, resume_from) for ns in self.namespaces))

    def _emit(self, old: JSON | None, new: JSON | None, handlers: list[Handler] | None = None) -> None:
        for handler in self.handlers if handlers is None else handlers:
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
        if event_type == "DELETED":
            if key in self.store:
                self._emit(self._pop(key, version_number(obj)), None)
            return
        previous = self.store.get(key)
        old = None if previous is None else self._decode(previous)
        self._set(key, obj)
        self._emit(old, obj)

    def _replace(self, namespace: str | None, items: list[JSON]) -> None:
        fresh = {object_key(o): o for o in map(self._typed, items)}
        stale = [k for k in self.store if (namespace is None or k[0] == namespace) and k not in fresh]
        for key in stale:
            self._emit(self._pop(key), None)
        for key, obj in fresh.items():
            previous = self.store.get(key)
            old = None if previous is None else self._decode(previous)
            self._set(key, obj)
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
                    self.watch_stats.relists += 1
                    self._replace(namespace, listing["items"])
                    version = str(listing["metadata"].get("resourceVersion", ""))
                    self._synced[namespace].set()
                    self.healthy = True
                # Spread the watches' ends, so many informers do not all re-watch at once.
                timeout = max(1, round(self.watch_timeout * random.uniform(0.8, 1.0)))
                async for event in self.client.watch(
                    self.resource,
                    namespace,
                    version,
                    label_selector=self.label_selector,
                    timeout_seconds=timeout,
                    stall_seconds=self.watch_timeout + self.stall_grace,
                ):
                    obj: JSON = event.get("object") or {}
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") != "BOOKMARK":
                        self._apply(str(event.get("type")), obj)
                self.healthy = True
                self.watch_stats.restarts["timeout"] += 1
                backoff = 0.5
            except Gone:
                log.info("watch expired, relisting", extra={"kind": self.resource.kind})
                self.watch_stats.restarts["expired"] += 1
                version = ""
            except WatchStalled as err:
                # Whatever it held back is unknown: start afresh from a list.
                self.watch_stats.restarts["stalled"] += 1
                self.healthy = False
                log.warning("watch stalled, relisting", extra={"kind": self.resource.kind, "error": str(err)})
                version = ""
            except asyncio.CancelledError:
                raise
            except (KubeError, ValueError) as err:
                self.watch_stats.restarts["error"] += 1
                self.healthy = False
                log.warning(
                    "watch failed, retrying",
                    extra={"kind": self.resource.kind, "error": str(err), "retry_in": round(backoff, 2)},
                )
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 30.0)


def _version(obj: JSON) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")
