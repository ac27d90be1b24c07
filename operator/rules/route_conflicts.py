"""Templates whose routes collide, kept up to date from the Template watch.

The rule (which Template keeps a contested route) is platform/model/routes.py's, the same function the
gateway routes by, so what the operator reports is what the gateway does. Here it becomes:
- on each colliding Template, `Ready=False`, reason `RouteConflict`, naming the other one
  (the older one keeps the route and says so; the newer one says it is not routed);
- on the Userlands of a Template that is not routed, the same reason with words an instructor
  can pass on: their environments run, but cannot be reached until an admin fixes the routing.
A recompute returns the Templates whose verdict changed, so the controller re-checks exactly
those and their Userlands (and a fixed collision clears by itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from userland.operator.rules.status import Problem
from userland.platform.model.routes import Collision, RouteClaim, conflict_message, route_collisions

REASON = "RouteConflict"
Key = tuple[str, str]  # (namespace, name)


def _key(text: str) -> Key:
    namespace, _, name = text.partition("/")
    return (namespace, name)


class RouteConflicts:
    def __init__(self, platform_host: str | None) -> None:
        self.platform_host = platform_host
        self.collisions: dict[Key, tuple[Collision, ...]] = {}

    def recompute(self, templates: Iterable[dict[str, Any]]) -> set[Key]:
        """Re-decide from every Template object; the Templates whose collisions changed."""
        claims = [c for c in map(RouteClaim.from_object, templates) if c is not None]
        fresh = {_key(k): v for k, v in route_collisions(claims, self.platform_host).items()}
        changed = {k for k in fresh.keys() | self.collisions.keys()
                   if fresh.get(k) != self.collisions.get(k)}
        self.collisions = fresh
        return changed

    def template_problem(self, namespace: str, name: str) -> Problem | None:
        found = self.collisions.get((namespace, name))
        if not found:
            return None
        return Problem(REASON, conflict_message(found))

    def userland_problem(self, namespace: str, template: str, display_name: str) -> Problem | None:
        """For the Userlands of a Template the gateway does not route (it lost a collision)."""
        found = self.collisions.get((namespace, template), ())
        lost = [c for c in found if not c.kept]
        if not lost:
            return None
        others = ", ".join(sorted({c.other for c in lost}))
        return Problem(
            REASON,
            f"{display_name} cannot be opened: its address is also used by {others}, which keeps "
            f"it. An admin must give Template {template} another host or path (or change the "
            "other one); nothing of the student's is lost meanwhile",
        )
