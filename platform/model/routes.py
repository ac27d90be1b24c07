"""Which Template owns which route: one pure rule, used by the operator and the gateway alike.

A Template's route is a host (`ide.example.edu`: every path of every student origin under it),
a host and a path prefix, or a path prefix alone (on the platform's own host). Two Templates
*collide* when the gateway could serve only one of them:
- the same host, the same host and prefix, or the same prefix alone (prefixes compared as
  `/ide/`, so `/ide` and `/ide/` are one prefix);
- a host that is a student's address under another Template's host (`bob.ide.example.edu`
  under `ide.example.edu` is student bob's own origin there);
- a route the platform itself answers: its own host (USERLAND_PUBLIC_URL's), `/auth/` on it,
  or `/__userland/` (the gateway's own paths on every student origin).

Meanwhile the **older** Template keeps the route (creationTimestamp, then `namespace/name`,
so every gateway replica and the operator decide the same way, whatever order they saw the
Templates in), and the newer one is not served at all. The operator reports the collision on
both Templates (`Ready=False`, reason `RouteConflict`, naming the other) and on the losing
Template's Userlands; the gateway routes only the winners.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from userland.platform.model import naming
from userland.platform.model.models import InvalidSpec, Template

# Paths the gateway answers itself: `/auth/` on the platform's host, `/__userland/` on every
# student origin (auth/rules/origins.py OWN_PATH_PREFIX).
PLATFORM_AUTH_PREFIX = "/auth/"
GATEWAY_OWN_PREFIX = "/__userland/"
PLATFORM = "the platform"


def normalize_prefix(prefix: str) -> str:
    """`/ide`, `/ide/` -> `/ide/`; `/` stays `/`."""
    return prefix.rstrip("/") + "/"


@dataclass(frozen=True)
class RouteClaim:
    """What one Template asks the gateway to route to it."""

    namespace: str
    name: str
    created: str = ""  # metadata.creationTimestamp (RFC 3339 in UTC: sorts as text)
    host: str | None = None  # lowercase
    path_prefix: str | None = None  # normalized (`/ide/`)

    def __post_init__(self) -> None:
        # Compared as the gateway matches them: host in lower case, `/ide` as `/ide/`.
        if self.host:
            object.__setattr__(self, "host", self.host.lower())
        if self.path_prefix:
            object.__setattr__(self, "path_prefix", normalize_prefix(self.path_prefix))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def age_order(self) -> tuple[str, str, str]:
        """Older first; equal timestamps (one-second resolution) by namespace/name."""
        return (self.created, self.namespace, self.name)

    def describe(self) -> str:
        """The route in words: `host ide.example.edu`, `path /ide/ on host x`, `path /ide/`."""
        if self.host and self.path_prefix:
            return f"path {self.path_prefix} on host {self.host}"
        if self.host:
            return f"host {self.host}"
        return f"path {self.path_prefix}"

    @classmethod
    def from_template(cls, template: Template, created: str = "") -> RouteClaim:
        routing = template.spec.routing
        return cls(
            namespace=template.ref.namespace,
            name=template.name,
            created=created,
            host=routing.host.lower() if routing.host else None,
            path_prefix=normalize_prefix(routing.path_prefix) if routing.path_prefix else None,
        )

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> RouteClaim | None:
        """The claim of a Template object; None when it is invalid (then nothing routes it)."""
        try:
            template = Template.from_object(obj)
        except InvalidSpec:
            return None
        created = (obj.get("metadata") or {}).get("creationTimestamp")
        return cls.from_template(template, str(created or ""))


@dataclass(frozen=True)
class Collision:
    """`other` also claims `route`; `kept` says whether this Template keeps it."""

    route: str  # in words (RouteClaim.describe), as this Template claims it
    other: str  # the other Template as namespace/name, or PLATFORM
    kept: bool

    def message(self) -> str:
        if self.other == PLATFORM:
            return (f"its {self.route} is the platform's own address (sign-in and the web UI), "
                    "so the gateway never routes it here: give this Template another host or path")
        if self.kept:
            return (f"Template {self.other} also claims its {self.route}; this Template keeps it "
                    f"(it is the older one), and the students of {self.other} cannot reach their "
                    "environments until one of the two changes its routing")
        return (f"its {self.route} is already used by Template {self.other} (the older one keeps "
                "it), so the gateway does not route this Template and its students cannot reach "
                "their environments: give this Template another host or path, or change the other")


def _platform_claims(claim: RouteClaim, platform_host: str | None) -> bool:
    if claim.host and platform_host and claim.host == platform_host:
        return True
    if claim.host is None and claim.path_prefix is not None:
        return claim.path_prefix.startswith(PLATFORM_AUTH_PREFIX)
    return claim.path_prefix is not None and claim.path_prefix.startswith(GATEWAY_OWN_PREFIX)


def _student_host_of(host: str, hosts: set[str]) -> str | None:
    """The Template host under which `host` is one student's origin (`bob.<host>`), if any."""
    label, dot, rest = host.partition(".")
    if dot and rest in hosts and naming.is_valid_login(label):
        return rest
    return None


def route_collisions(claims: Iterable[RouteClaim], platform_host: str | None = None
                     ) -> dict[str, tuple[Collision, ...]]:
    """Every colliding Template (by namespace/name) with its collisions, oldest winning.

    A Template missing from the result collides with nothing. One that has any collision it
    did not keep (`kept` False) is not routed at all, even where it would not collide.
    """
    ordered = sorted(claims, key=lambda c: c.age_order)
    found: dict[str, list[Collision]] = {}

    def collide(older: RouteClaim, newer: RouteClaim, route_older: str, route_newer: str) -> None:
        found.setdefault(older.key, []).append(Collision(route_older, newer.key, kept=True))
        found.setdefault(newer.key, []).append(Collision(route_newer, older.key, kept=False))

    owners: dict[tuple[str | None, str | None], RouteClaim] = {}
    routed: list[RouteClaim] = []
    for claim in ordered:
        if _platform_claims(claim, platform_host):
            found.setdefault(claim.key, []).append(Collision(claim.describe(), PLATFORM, kept=False))
            continue
        slot = (claim.host, claim.path_prefix)
        older = owners.get(slot)
        if older is not None:
            collide(older, claim, claim.describe(), claim.describe())
            continue
        owners[slot] = claim
        routed.append(claim)
    # A host one login deeper than another Template's host is that login's student origin.
    by_host = {c.host: c for c in routed if c.host}
    hosts = set(by_host)
    for claim in routed:
        if claim.host is None or (parent_host := _student_host_of(claim.host, hosts)) is None:
            continue
        parent = by_host[parent_host]
        student = claim.host.partition(".")[0]
        older, newer = sorted((parent, claim), key=lambda c: c.age_order)
        what = {parent.key: f"host {parent_host} (whose student {student} has the address "
                            f"{claim.host})",
                claim.key: f"host {claim.host} (the address of student {student} under host "
                           f"{parent_host})"}
        collide(older, newer, what[older.key], what[newer.key])
    return {key: tuple(collisions) for key, collisions in found.items()}


def routed_out(collisions: dict[str, tuple[Collision, ...]]) -> frozenset[str]:
    """Templates (namespace/name) the gateway does not route: they lost a collision."""
    return frozenset(key for key, found in collisions.items() if any(not c.kept for c in found))


def conflict_message(collisions: Iterable[Collision]) -> str:
    return "; ".join(c.message() for c in collisions)


def platform_host_of(public_url: str) -> str | None:
    """The platform's own host name (lowercase, no port) from USERLAND_PUBLIC_URL."""
    try:
        host = urlsplit(public_url).hostname
    except ValueError:
        return None
    return host.rstrip(".").lower() if host else None
