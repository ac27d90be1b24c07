"""The Kubernetes I/O edge: one small JSON client shared by every component.

platform/clients/kubeconfig.py finds the API server and credentials (in-cluster, or a kubeconfig,
with kubernetes-asyncio's loader for the exotic cases); requests go over one pooled aiohttp
session as plain JSON dicts, much cheaper than generated model classes at thousands of objects.
API errors are translated here, once, into the exceptions below; callers see nothing else.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from userland.platform.clients.kubeconfig import ClusterAccess, cluster_access
from userland.platform.model import naming
from userland.platform.model.api_errors import explain_decode_error, readable
from userland.platform.model.telemetry import KubeStats

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


TEMPLATES = Resource(naming.GROUP, naming.VERSION, "templates", "Template")
USERLANDS = Resource(naming.GROUP, naming.VERSION, "userlands", "Userland")
ASSIGNMENTS = Resource(naming.GROUP, naming.VERSION, "assignments", "Assignment")
COURSE_REQUESTS = Resource(naming.GROUP, naming.VERSION, "courserequests", "CourseRequest")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
SERVICES = Resource("", "v1", "services", "Service")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")


_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _kind(resource: Resource, subresource: str | None) -> str:
    return resource.kind + (f"/{subresource}" if subresource else "")


class KubeError(Exception):
    """Any failed API request. `status` is the HTTP status (0 when none came back)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message


class TemporaryError(KubeError):
    """Worth retrying later: connection trouble, 429, 5xx, conflicts."""


class PermanentError(KubeError):
    """Retrying the same request will fail the same way (400, 403, 422 ...)."""


class NotFound(PermanentError):
    pass


class AlreadyExists(TemporaryError):
    """409 on create: the object is there (treat as success after re-reading)."""


class Conflict(TemporaryError):
    """409 on update: the resourceVersion moved on; re-read and retry."""


class Gone(TemporaryError):
    """410: the watch's resourceVersion is too old; relist."""


class WatchStalled(TemporaryError):
    """A watch sent nothing for longer than it may stay quiet: the connection is held open
    but delivers nothing (the caller relists)."""


class Invalid(PermanentError):
    """400/422: the API server refused the object; `message` is its own explanation (a 400's
    decoder trace made readable, platform/model/api_errors.py). For such a 400, `field` is the path
    in the object that was sent (`[]` where the server does not say which item) and `value`
    the offending value as JSON, when known."""

    def __init__(self, status: int, reason: str, message: str, *, field: str | None = None,
                 value: str | None = None) -> None:
        super().__init__(status, reason, message)
        self.field = field
        self.value = value


def _error_for(status: int, body: bytes) -> KubeError:
    try:
        status_obj = json.loads(body)
        reason = str(status_obj.get("reason", ""))
        message = str(status_obj.get("message", ""))
    except ValueError:
        reason, message = "", body[:500].decode(errors="replace")
    if status == 404:
        return NotFound(status, reason or "NotFound", message)
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(status, reason, message)
    if status == 410:
        return Gone(status, reason or "Expired", message)
    if status in (400, 422):  # 400: a body the server cannot even decode
        decoded = explain_decode_error(message) if status == 400 else None
        if decoded is not None:
            return Invalid(status, reason or "BadRequest", decoded.message, field=decoded.field,
                           value=decoded.value)
        return Invalid(status, reason or "Invalid", readable(message) if status == 400 else message)
    if status == 429 or status >= 500:
        return TemporaryError(status, reason, message)
    return PermanentError(status, reason, message)


class KubeClient:
    """JSON requests to the API server over one pooled connection set, and watches over
    connections of their own.

    A watch holds its connection for minutes: watches drawn from the requests' bounded pool took
    it over once there were as many as the pool (the operator watches 7 kinds per namespace:
    at 8 namespaces its lists and writes waited for a connection until they timed out). So
    watches have their own, unbounded connector (one connection each, as many as there are
    watches), and `pool_size` bounds only concurrent requests. An idle pooled connection is kept
    `keepalive_timeout` seconds (aiohttp's 15 by default): less than an informer's stall bound
    (75 s), so a relist after a stall never goes out over a connection that sat idle through it.

    `writes` counts mutating requests by verb and kind, for benchmarks and tests; `stats` counts
    every request by verb, kind and answer, with its latency (platform/model/telemetry.py), for the
    components' /metrics.
    """

    def __init__(self, access: ClusterAccess, *, pool_size: int = 64,
                 keepalive_timeout: float = 15.0) -> None:
        self._host = access.host
        self._authorization = access.authorization
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool_size, ssl=access.ssl_context,
                                           keepalive_timeout=keepalive_timeout),
            read_bufsize=2**21,
        )
        self._watch_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=access.ssl_context),
            # Watch lines can hold large objects (etcd allows 1.5 MiB).
            read_bufsize=2**21,
        )
        self.writes: Counter[tuple[str, str]] = Counter()
        self.stats = KubeStats()

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, pool_size: int = 64) -> KubeClient:
        return cls(await cluster_access(kubeconfig), pool_size=pool_size)

    async def close(self) -> None:
        await self._session.close()
        await self._watch_session.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if (authorization := await self._authorization()) is not None:
            headers["Authorization"] = authorization
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
        verb: str = "",
        kind: str = "",
    ) -> JSON:
        """One request. `verb` (Kubernetes' own: get, list, create ...; by default from the
        method) and `kind` (the resource's, `Userland/status` for a subresource) only label it
        in `stats`."""
        url = self._host + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        verb = verb or _VERBS.get(method, method.lower())
        status = 0
        started = time.perf_counter()
        try:
            async with self._session.request(
                method,
                url,
                data=data,
                headers=await self._headers(content_type),
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                status = response.status
                payload = await response.read()
                if response.status >= 400:
                    raise _error_for(response.status, payload)
                result: JSON = json.loads(payload) if payload else {}
                return result
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            status = 0  # the answer (if any) never arrived whole
            raise TemporaryError(0, "Unreachable", f"{method} {path}: {err!r}") from None
        finally:
            self.stats.record(verb, kind or "other", status, time.perf_counter() - started)

    def _count(self, verb: str, resource: Resource, subresource: str | None = None) -> None:
        self.writes[(verb, _kind(resource, subresource))] += 1

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        return await self.request("GET", resource.path(namespace, name), kind=resource.kind)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 500,
    ) -> JSON:
        """All items (following `continue` pages) with the list's resourceVersion.

        A continue token names the etcd revision of the first page; once etcd has compacted
        past it (every 5 minutes by default) the next page is refused with 410 Expired. Then,
        like client-go's pager, the whole list is asked for again in one unpaginated request:
        the pages already read are dropped, so the result is one consistent snapshot.
        """
        items: list[JSON] = []
        query: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            try:
                page = await self.request("GET", resource.path(namespace), query=query, timeout=120,
                                          verb="list", kind=resource.kind)
            except Gone:
                if "continue" not in query:
                    raise
                full = {"labelSelector": label_selector} if label_selector else None
                page = await self.request("GET", resource.path(namespace), query=full, timeout=300,
                                          verb="list", kind=resource.kind)
                return {"items": page.get("items") or [], "metadata": page.get("metadata") or {}}
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return {"items": items, "metadata": page.get("metadata") or {}}
            query["continue"] = cont

    async def create(
        self, resource: Resource, namespace: str | None, body: JSON, *, dry_run: bool = False
    ) -> JSON:
        query = {"dryRun": "All"} if dry_run else None
        if not dry_run:
            self._count("create", resource)
        return await self.request("POST", resource.path(namespace), body=body, query=query,
                                  kind=resource.kind)

    async def merge_patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: JSON,
        *,
        subresource: str | None = None,
    ) -> JSON:
        self._count("patch", resource, subresource)
        return await self.request(
            "PATCH", resource.path(namespace, name, subresource), body=patch, content_type=MERGE_PATCH,
            kind=_kind(resource, subresource),
        )

    async def replace(self, resource: Resource, namespace: str | None, name: str, body: JSON) -> JSON:
        self._count("update", resource)
        return await self.request("PUT", resource.path(namespace, name), body=body, kind=resource.kind)

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, propagation: str | None = None
    ) -> JSON:
        self._count("delete", resource)
        body = {"propagationPolicy": propagation} if propagation else None
        return await self.request("DELETE", resource.path(namespace, name), body=body, kind=resource.kind)

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        stall_seconds: float | None = None,
    ) -> AsyncIterator[JSON]:
        """Yield watch events from `resource_version` until the server ends the watch.

        Raises Gone when the version is too old (the caller relists), WatchStalled when no
        byte came for `stall_seconds` (default: the timeout and 30 s more), and TemporaryError
        for other connection trouble. BOOKMARK events are yielded so callers can advance.
        """
        quiet = float(stall_seconds) if stall_seconds is not None else timeout_seconds + 30.0
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        url = self._host + resource.path(namespace) + "?" + urlencode(query)
        answered = False
        try:
            async with self._watch_session.get(
                url,
                headers=await self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=quiet),
            ) as response:
                answered = True
                self.stats.record("watch", resource.kind, response.status, None)
                if response.status >= 400:
                    raise _error_for(response.status, await response.read())
                async for line in response.content:
                    if not line.strip():
                        continue
                    event: JSON = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise _error_for(int(status.get("code") or 500), json.dumps(status).encode())
                    yield event
        except aiohttp.SocketTimeoutError:
            raise WatchStalled(0, "Stalled", f"watch {resource.plural}: nothing for {quiet:g} s") from None
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            if not answered:
                self.stats.record("watch", resource.kind, 0, None)
            raise TemporaryError(0, "Unreachable", f"watch {resource.plural}: {err!r}") from None
