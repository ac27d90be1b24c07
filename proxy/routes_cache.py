"""Routing data kept in memory from watches: Templates, Userlands and the students' Services.

Three Informers feed small indexes that the request path reads with plain dict lookups:
- the route table, rebuilt whenever a Template changes (Templates are few);
- Userlands by (namespace, template, user) -> what the gateway needs of their status;
- Services by (namespace, name) -> port, ClusterIP, owner labels and the local-mode upstream
  annotation.
No request ever makes an API call. Objects are trimmed to those fields before they are kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import JSON, SERVICES, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming, objects
from userland.platform.model.models import InvalidSpec, Template, parse_time
from userland.platform.model.objects import meta
from userland.platform.model.routes import conflict_message
from userland.proxy.rules.routing import RouteTable, TemplateRoute, build_routes
from userland.proxy.rules.wake_times import WakeTimes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UserlandState:
    namespace: str
    name: str
    user: str
    template: str
    ready: bool
    phase: str
    suspended: bool
    # The Ready condition's reason (Waking, Starting, ...) and the steps its Pod has reached.
    reason: str = ""
    progress: tuple[str, ...] = ()
    # When it last became Ready (epoch seconds; None when not Ready or unknown).
    ready_since: float | None = None


@dataclass(frozen=True)
class ServiceState:
    namespace: str
    name: str
    user: str
    port: int | None
    upstream_annotation: str | None
    cluster_ip: str | None = None


def userland_state(obj: JSON) -> UserlandState | None:
    md = meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, dict) or not isinstance(status, dict):
        return None
    user, template = spec.get("user"), spec.get("template")
    if not isinstance(user, str) or not isinstance(template, str) or not naming.is_valid_login(user):
        return None
    ready_condition = objects.ready_condition(status)
    ready = ready_condition.get("status") == "True" and not md.get("deletionTimestamp")
    since = parse_time(ready_condition.get("lastTransitionTime")) if ready else None
    return UserlandState(
        namespace=str(md.get("namespace") or ""),
        name=str(md.get("name") or ""),
        user=user.lower(),
        template=template,
        ready=ready,
        phase=str(status.get("phase") or "Pending"),
        suspended=bool(spec.get("suspended")),
        reason=str(ready_condition.get("reason") or ""),
        progress=tuple(str(s) for s in status.get("progress") or () if isinstance(s, str)),
        ready_since=None if since is None else since.timestamp(),
    )


def service_state(obj: JSON) -> ServiceState:
    md = meta(obj)
    ports = ((obj.get("spec") or {}).get("ports")) or []
    port = ports[0].get("port") if ports and isinstance(ports[0], dict) else None
    labels = md.get("labels") or {}
    annotations = md.get("annotations") or {}
    return ServiceState(
        namespace=str(md.get("namespace") or ""),
        name=str(md.get("name") or ""),
        user=str(labels.get(naming.LABEL_USER) or ""),
        port=port if isinstance(port, int) else None,
        upstream_annotation=annotations.get(naming.ANNOTATION_UPSTREAM),
        cluster_ip=str((obj.get("spec") or {}).get("clusterIP") or "") or None,
    )


def _trim(obj: JSON) -> JSON:
    """Keep only what the gateway reads (thousands of objects stay small)."""
    md = meta(obj)
    return {
        "metadata": {k: md[k] for k in ("name", "namespace", "resourceVersion", "labels",
                                          "annotations", "deletionTimestamp", "creationTimestamp")
                     if k in md},
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }


def _trim_service(obj: JSON) -> JSON:
    trimmed = _trim(obj)
    spec = obj.get("spec") or {}
    trimmed["spec"] = {"ports": spec.get("ports") or [], "clusterIP": spec.get("clusterIP")}
    trimmed["status"] = {}
    return trimmed


class RoutingCache:
    def __init__(self, kube: KubeClient, namespaces: Iterable[str] = (), *,
                 platform_host: str | None = None) -> None:
        namespaces = tuple(namespaces)
        # No Template may take the platform's own host (platform/model/routes.py).
        self.platform_host = platform_host
        self.templates = Informer(kube, TEMPLATES, namespaces, transform=_trim)
        self.userlands = Informer(kube, USERLANDS, namespaces, transform=_trim)
        self.services = Informer(kube, SERVICES, namespaces, transform=_trim_service,
                                 label_selector=naming.LABEL_USER)
        self.routes = RouteTable()
        self._userlands: dict[tuple[str, str, str], UserlandState] = {}
        self._by_pair: dict[tuple[str, str, str], dict[str, UserlandState]] = {}
        self._services: dict[tuple[str, str], ServiceState] = {}
        # How long wakes took lately, per Template (the waking page says it: proxy/rules/wake_times.py).
        self.wake_times = WakeTimes()
        self.templates.add_handler(self._on_template)
        self.userlands.add_handler(self._on_userland)
        self.services.add_handler(self._on_service)
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle

    async def start(self) -> None:
        for informer in (self.templates, self.userlands, self.services):
            name = f"informer-{informer.resource.plural}"
            self._tasks.append(asyncio.create_task(informer.run(), name=name))

    async def wait_synced(self) -> None:
        await asyncio.gather(self.templates.wait_synced(), self.userlands.wait_synced(),
                             self.services.wait_synced())

    @property
    def synced(self) -> bool:
        return self.templates.synced and self.userlands.synced and self.services.synced

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # -- lookups (the request path)

    def userland(self, namespace: str, template: str, user: str) -> UserlandState | None:
        return self._userlands.get((namespace, template, user))

    def service(self, namespace: str, name: str) -> ServiceState | None:
        return self._services.get((namespace, name))

    # -- index upkeep (informer handlers)

    def _on_template(self, old: JSON | None, new: JSON | None) -> None:
        routes = []
        for obj in self.templates.items():
            try:
                routes.append(TemplateRoute.from_template(
                    Template.from_object(obj), str(meta(obj).get("creationTimestamp") or "")))
            except InvalidSpec as err:
                log.warning("template ignored", extra={"template": "/".join(
                    (meta(obj).get("namespace", ""), meta(obj).get("name", ""))), "error": str(err)})
        table = build_routes(routes, self.platform_host)
        if table.routed_out != self.routes.routed_out:
            for route in table.routed_out:
                log.warning("template not routed: its route collides", extra={
                    "template": route.key, "collisions": conflict_message(table.collisions[route.key])})
        self.routes = table

    def _on_userland(self, old: JSON | None, new: JSON | None) -> None:
        before = userland_state(old) if old is not None else None
        after = userland_state(new) if new is not None else None
        if after is not None:
            self.wake_times.seen(after.namespace, after.name, after.template,
                                 was_idle=before is not None and before.phase == "Idle",
                                 idle=after.phase == "Idle", ready=after.ready, now=time.time())
        elif before is not None:
            self.wake_times.forget(before.namespace, before.name)
        keys = set()
        for obj, present in ((old, False), (new, True)):
            if obj is None or (state := userland_state(obj)) is None:
                continue
            key = (state.namespace, state.template, state.user)
            keys.add(key)
            named = self._by_pair.setdefault(key, {})
            if present:
                named[state.name] = state
            else:
                named.pop(state.name, None)
        for key in keys:
            # Two Userlands for one student and Template (`Alice` and `alice` written with
            # kubectl): the operator runs one and calls the other a Duplicate; serve the ready one.
            named = self._by_pair.get(key) or {}
            if not named:
                self._by_pair.pop(key, None)
                self._userlands.pop(key, None)
                continue
            self._userlands[key] = min(named.values(), key=lambda s: (not s.ready, s.name))

    def _on_service(self, old: JSON | None, new: JSON | None) -> None:
        if old is not None:
            state = service_state(old)
            self._services.pop((state.namespace, state.name), None)
        if new is not None:
            state = service_state(new)
            self._services[(state.namespace, state.name)] = state
