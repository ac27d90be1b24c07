"""The routing table: which Template a request is for, and where its upstream is.

Pure functions over plain data, so they are tested with golden tables and cost nothing per
request beyond a dict lookup and a short scan of the path-prefix routes.

Rules (documented in the gateway's README section of design.md):
- A Template with `routing.host` (and no pathPrefix) owns every path on that host, which means
  every path of every student's origin under it (`alice.<host>`, see auth/rules/origins.py); the
  bare host only sends a student on to their own origin.
- A Template with `routing.pathPrefix` (and no host) owns that prefix on the platform's own host,
  and only when USERLAND_ALLOW_PATH_ROUTES is on (every student then shares one origin).
  `/ide/` matches `/ide`, `/ide/` and `/ide/x`, never `/ideas`.
- A Template with both owns that prefix on that host only.
- The most specific route wins: host+prefix, then host, then the longest prefix. Two Templates
  claiming the same route (say in two namespaces) are a collision: the older one keeps it and
  the newer one is not routed at all (platform/model/routes.py decides, for the operator too, which
  reports it on both Templates' status).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from userland.platform.model.models import Activity, Template
from userland.platform.model.routes import Collision, RouteClaim, normalize_prefix, route_collisions
from userland.platform.model.storage_words import Storage


@dataclass(frozen=True)
class TemplateRoute:
    namespace: str
    template: str
    port: int
    host: str | None = None
    path_prefix: str | None = None
    self_service: bool = False
    display_name: str = ""
    created: str = ""  # the Template's creationTimestamp: the older of two colliding routes wins
    # What is not use of an environment (proxy/activity.py), and its idleTimeout (None: never).
    activity: Activity = field(default_factory=Activity)
    idle_timeout_seconds: int | None = None
    # What its environments keep (platform/model/storage_words.py): the waking and paused pages say it.
    storage: Storage = "none"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.template}"

    @property
    def claim(self) -> RouteClaim:
        return RouteClaim(self.namespace, self.template, self.created, self.host, self.path_prefix)

    @classmethod
    def from_template(cls, template: Template, created: str = "") -> TemplateRoute:
        routing = template.spec.routing
        return cls(
            namespace=template.ref.namespace,
            template=template.name,
            port=template.spec.port,
            host=routing.host.lower() if routing.host else None,
            path_prefix=normalize_prefix(routing.path_prefix) if routing.path_prefix else None,
            self_service=template.spec.self_service,
            display_name=template.spec.display_name or template.name,
            created=created,
            activity=template.spec.activity,
            idle_timeout_seconds=template.spec.idle_timeout_seconds,
            storage=("none" if template.spec.storage is None
                     else "delete" if template.spec.storage.reclaim_policy == "Delete" else "retain"),
        )


@dataclass(frozen=True)
class RouteTable:
    """Routes indexed for lookup. Build with `build_routes`."""

    # host -> the route owning all its paths
    by_host: Mapping[str, TemplateRoute] = field(default_factory=dict)
    # host -> its prefix routes, longest prefix first
    host_prefixes: Mapping[str, tuple[TemplateRoute, ...]] = field(default_factory=dict)
    # prefix routes for any host, longest prefix first
    prefixes: tuple[TemplateRoute, ...] = ()
    # routes not served: they collide with an older Template's (or the platform's own)
    routed_out: tuple[TemplateRoute, ...] = ()
    # every colliding Template (namespace/name) with its collisions, winners included
    collisions: Mapping[str, tuple[Collision, ...]] = field(default_factory=dict)

    @functools.cached_property
    def hosts(self) -> frozenset[str]:
        # Asked twice per request: computed once per table (tables are rebuilt, never changed).
        return frozenset(self.by_host) | frozenset(self.host_prefixes)


def build_routes(templates: Iterable[TemplateRoute], platform_host: str | None = None) -> RouteTable:
    """The table of the routes that collide with nothing older (platform/model/routes.py's rule).
    `platform_host`: the platform's own host, which no Template may take."""
    routes = list(templates)
    collisions = route_collisions((r.claim for r in routes), platform_host)
    lost = {key for key, found in collisions.items() if any(not c.kept for c in found)}
    by_host: dict[str, TemplateRoute] = {}
    host_prefixes: dict[str, dict[str, TemplateRoute]] = {}
    prefixes: dict[str, TemplateRoute] = {}
    for route in routes:
        if route.key in lost:
            continue
        if route.host and route.path_prefix:
            host_prefixes.setdefault(route.host, {})[route.path_prefix] = route
        elif route.host:
            by_host[route.host] = route
        elif route.path_prefix:
            prefixes[route.path_prefix] = route

    def longest_first(routes: Mapping[str, TemplateRoute]) -> tuple[TemplateRoute, ...]:
        return tuple(routes[p] for p in sorted(routes, key=len, reverse=True))

    return RouteTable(
        by_host=by_host,
        host_prefixes={h: longest_first(p) for h, p in host_prefixes.items()},
        prefixes=longest_first(prefixes),
        routed_out=tuple(sorted((r for r in routes if r.key in lost), key=lambda r: r.key)),
        collisions=collisions,
    )


def lost_to(route: TemplateRoute, table: RouteTable) -> tuple[TemplateRoute, ...]:
    """The routes not served because `route` (which is) collides with them."""
    return tuple(r for r in table.routed_out
                 if any(c.other == route.key for c in table.collisions.get(r.key, ())))


def request_host(host_header: str | None) -> str:
    """The Host header without port and trailing dot, lowercased (`[::1]:80` -> `[::1]`)."""
    host = (host_header or "").strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end >= 0 else host
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return host.rstrip(".")


def _prefix_matches(prefix: str, path: str) -> bool:
    return path.startswith(prefix) or path == prefix[:-1]


def _first_prefix(routes: Iterable[TemplateRoute], path: str) -> TemplateRoute | None:
    for route in routes:
        assert route.path_prefix is not None
        if _prefix_matches(route.path_prefix, path):
            return route
    return None


def route_for(host: str, path: str, table: RouteTable) -> TemplateRoute | None:
    """The Template route for a request's host (as from `request_host`) and path, or None."""
    if host in table.host_prefixes:
        route = _first_prefix(table.host_prefixes[host], path)
        if route is not None:
            return route
    route = table.by_host.get(host)
    if route is not None:
        return route
    return _first_prefix(table.prefixes, path)


def host_route_for(template_host: str, path: str, table: RouteTable) -> TemplateRoute | None:
    """The route of a student's origin under `template_host` (never a prefix-only route)."""
    if template_host in table.host_prefixes:
        route = _first_prefix(table.host_prefixes[template_host], path)
        if route is not None:
            return route
    return table.by_host.get(template_host)


def host_namespaces(template_host: str, table: RouteTable) -> tuple[str, ...]:
    """The namespaces (courses) whose Templates a host serves, sorted: a help grant of one of
    them may open a student's origin under that host (each request is still checked against its
    own route's namespace)."""
    routes = (*table.host_prefixes.get(template_host, ()),
              *((table.by_host[template_host],) if template_host in table.by_host else ()))
    return tuple(sorted({r.namespace for r in routes}))


def prefix_route_for(path: str, table: RouteTable) -> TemplateRoute | None:
    """A prefix-only route (the platform's host, when path routes are allowed)."""
    return _first_prefix(table.prefixes, path)


UpstreamMode = Literal["clusterip", "dns", "local"]


@functools.lru_cache(maxsize=8192)  # per request otherwise; pure, and its inputs change rarely
def upstream_url(mode: UpstreamMode, *, service: str, namespace: str, port: int,
                 cluster_domain: str, annotation: str | None, cluster_ip: str | None = None) -> str | None:
    """Base URL of a student's environment (no trailing slash), or None when not known yet.

    `clusterip`: the Service's ClusterIP, which the gateway already holds from its watch: no
    DNS lookup per connection, and no dependency on cluster DNS (a Service without one, a
    headless Service, falls back to its DNS name). `dns`: the Service's cluster DNS name.
    `local`: the address the local runner wrote in the Service's `userland.dev/upstream`
    annotation (ignored otherwise: in a cluster anyone able to annotate a Service must not be
    able to redirect traffic with it; spec.clusterIP is set by the API server and immutable).
    """
    if mode == "local":
        if not annotation or not annotation.startswith(("http://", "https://")):
            return None
        return annotation.rstrip("/")
    if mode == "clusterip" and cluster_ip:
        try:
            address = ipaddress.ip_address(cluster_ip)
        except ValueError:
            pass  # "None" (headless): only DNS knows the Pods
        else:
            host = f"[{address}]" if address.version == 6 else str(address)
            return f"http://{host}:{port}"
    return f"http://{service}.{namespace}.svc.{cluster_domain}:{port}"
