"""The routing table: which Template a request is for, and where its upstream is.

Pure functions over plain data, so they are tested with golden tables and cost nothing per
request beyond a dict lookup and a short scan of the path-prefix routes.

Rules (documented in the gateway's README section of design.md):
- A Template with `routing.host` (and no pathPrefix) owns every path on that host.
- A Template with `routing.pathPrefix` (and no host) owns that prefix on every host that no
  host-only Template owns (the platform's own host included).
  `/ide/` matches `/ide`, `/ide/` and `/ide/x`, never `/ideas`.
- A Template with both owns that prefix on that host only.
- The most specific route wins: host+prefix, then host, then the longest prefix. Two Templates
  claiming the same route (say in two namespaces) resolve deterministically to the first by
  `namespace/name`; the table builder reports the others as conflicts so they can be logged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from userland.platform.models import Template


@dataclass(frozen=True)
class TemplateRoute:
    namespace: str
    template: str
    port: int
    host: str | None = None
    path_prefix: str | None = None
    self_service: bool = False
    display_name: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.template}"

    @classmethod
    def from_template(cls, template: Template) -> TemplateRoute:
        routing = template.spec.routing
        return cls(
            namespace=template.ref.namespace,
            template=template.name,
            port=template.spec.port,
            host=routing.host.lower() if routing.host else None,
            path_prefix=_normalize_prefix(routing.path_prefix) if routing.path_prefix else None,
            self_service=template.spec.self_service,
            display_name=template.spec.display_name or template.name,
        )


def _normalize_prefix(prefix: str) -> str:
    """`/ide`, `/ide/` -> `/ide/`; `/` stays `/`."""
    return prefix.rstrip("/") + "/"


@dataclass(frozen=True)
class RouteTable:
    """Routes indexed for lookup. Build with `build_routes`."""

    # host -> the route owning all its paths
    by_host: Mapping[str, TemplateRoute] = field(default_factory=dict)
    # host -> its prefix routes, longest prefix first
    host_prefixes: Mapping[str, tuple[TemplateRoute, ...]] = field(default_factory=dict)
    # prefix routes for any host, longest prefix first
    prefixes: tuple[TemplateRoute, ...] = ()
    # routes that lost to another Template claiming the same host/prefix
    conflicts: tuple[tuple[TemplateRoute, TemplateRoute], ...] = ()

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(self.by_host) | frozenset(self.host_prefixes)


def build_routes(templates: Iterable[TemplateRoute]) -> RouteTable:
    by_host: dict[str, TemplateRoute] = {}
    host_prefixes: dict[str, dict[str, TemplateRoute]] = {}
    prefixes: dict[str, TemplateRoute] = {}
    conflicts: list[tuple[TemplateRoute, TemplateRoute]] = []

    def claim(table: dict[str, TemplateRoute], key: str, route: TemplateRoute) -> None:
        if key in table:
            conflicts.append((table[key], route))
        else:
            table[key] = route

    for route in sorted(templates, key=lambda r: (r.namespace, r.template)):
        if route.host and route.path_prefix:
            claim(host_prefixes.setdefault(route.host, {}), route.path_prefix, route)
        elif route.host:
            claim(by_host, route.host, route)
        elif route.path_prefix:
            claim(prefixes, route.path_prefix, route)

    def longest_first(routes: Mapping[str, TemplateRoute]) -> tuple[TemplateRoute, ...]:
        return tuple(routes[p] for p in sorted(routes, key=len, reverse=True))

    return RouteTable(
        by_host=by_host,
        host_prefixes={h: longest_first(p) for h, p in host_prefixes.items()},
        prefixes=longest_first(prefixes),
        conflicts=tuple(conflicts),
    )


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


def upstream_url(mode: Literal["dns", "local"], *, service: str, namespace: str, port: int,
                 cluster_domain: str, annotation: str | None) -> str | None:
    """Base URL of a student's environment (no trailing slash), or None when not known yet.

    `dns`: the Service's cluster DNS name. `local`: the address the local runner wrote in the
    Service's `userland.dev/upstream` annotation (ignored in dns mode: in a cluster anyone able
    to annotate a Service must not be able to redirect traffic with it).
    """
    if mode == "local":
        if not annotation or not annotation.startswith(("http://", "https://")):
            return None
        return annotation.rstrip("/")
    return f"http://{service}.{namespace}.svc.{cluster_domain}:{port}"
