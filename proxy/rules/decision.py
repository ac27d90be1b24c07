"""What the gateway does with a request for a Template route: request facts in, an outcome out.

Pure functions over plain data (no I/O, no aiohttp), in two stages, so that each branch of the
request path is a row of a table test (tests/unit/test_gateway_decision.py) rather than a case
reached only over HTTP:

1. `admit`: who is asking and whose environment they may reach. The visitor comes from a
   session, typed (`Visitor`): a platform session on the platform host's path routes, or a
   student origin's own session, bound to that origin. On an origin (`owner` given) the visitor
   must be its owner and the session must be bound to this very origin; anything else is the
   "not yours" page. No session: a page navigation on an origin goes through the platform's
   handoff, a tab's own background request is told it is signed out, the rest get a 401; on a
   path route, a navigation goes to the login and anything else gets a 401.
   A member of staff is let into the owner's environment only by a live help grant
   (platform/model/grants.py) that their origin session is bound to, for this owner, this route's
   course and this staff member; a grant that has ended (or run out) is `GRANT_ENDED`, never
   access. A staff member's request must also come from the owner's origin itself or be a
   top-level page load (`embedded_elsewhere`): another site's page in their browser cannot make
   it fetch, frame or embed the student's environment with their access.
2. `serve`: what the admitted visitor's environment can give: the environment itself
   (`FORWARD`), or the page that says why not (suspended, starting, asleep, none here).

The request path (proxy/gateway.py `handle_template`) gathers the facts (one session lookup,
dict lookups in the watched routing data) and turns the outcome into a response.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Protocol

from userland.platform.model.grants import Grant


@dataclass(frozen=True, slots=True)
class Visitor:
    """What the decision needs of a session: who, and the origin it is bound to (an origin
    session's; None for the platform's own session, which path routes use)."""

    login: str  # lowercase
    origin: str | None = None
    # A member of staff's origin session is bound to a help grant: the grant while it is live,
    # `grant_ended` once it is gone (ended, or run out: its key expired).
    grant: Grant | None = None
    grant_ended: bool = False


class UserlandFacts(Protocol):
    """What `serve` reads of a Userland (proxy/routes_cache.py's UserlandState has it)."""

    @property
    def ready(self) -> bool: ...

    @property
    def suspended(self) -> bool: ...


class Outcome(enum.Enum):
    # admit: refusals
    HANDOFF = "handoff"                      # no session on an origin, a navigation: sign the origin in
    SIGNED_OUT_BACKGROUND = "signed_out_background"  # no session, a tab's own fetch: say so to the app
    LOGIN_REQUIRED = "login_required"        # no session, anything else: 401
    LOGIN_REDIRECT = "login_redirect"        # no session on a path route, a navigation: the login
    NOT_YOURS = "not_yours"                  # someone else's origin (or a session of another origin)
    GRANT_ENDED = "grant_ended"              # staff whose help grant has ended
    STAFF_EMBEDDED = "staff_embedded"        # staff access asked for by another site's page
    # serve
    UNREACHABLE = "unreachable"              # theirs is a Template this address is not routed to
    SELF_SERVICE = "self_service"            # none yet; the Template offers one
    FORBIDDEN = "forbidden"                  # none here
    SUSPENDED = "suspended"                  # staff paused it
    NOT_RUNNING = "not_running"              # asleep, waking, starting, failed
    STARTING = "starting"                    # Ready, but its address is not known here yet
    FORWARD = "forward"                      # to the environment


@dataclass(frozen=True, slots=True)
class Admitted:
    """The visitor may reach `login`'s environment of the route (as staff, by `staff`)."""

    login: str
    staff: Grant | None = None


Admission = Admitted | Outcome


@functools.lru_cache(maxsize=4096)
def _admitted(login: str) -> Admitted:
    """An owner's admission (immutable): made once per login, not per request."""
    return Admitted(login)


def admit(visitor: Visitor | None, *, owner: str | None, here: str | None, navigation: bool,
          background: bool, namespace: str = "", now: float = 0.0,
          embedded_elsewhere: bool = False) -> Admission:
    """Stage 1. `owner`: the login an origin names (None on the platform host's path routes);
    `here`: this request's origin; `navigation`: a page load (GET/HEAD for HTML, not a
    WebSocket); `background`: a tab's own fetch or XHR (Sec-Fetch-Mode cors/same-origin/no-cors);
    `namespace`: the route's course; `embedded_elsewhere`: the request comes from another
    origin's page and is not a top-level page load (`embedded_elsewhere()`)."""
    if visitor is None:
        if owner is None:
            return Outcome.LOGIN_REDIRECT if navigation else Outcome.LOGIN_REQUIRED
        if navigation:
            return Outcome.HANDOFF
        return Outcome.SIGNED_OUT_BACKGROUND if background else Outcome.LOGIN_REQUIRED
    if owner is None:
        return _admitted(visitor.login)  # path routes: a platform session, never a grant
    # An origin session is bound to one origin: never honoured on another (even of its owner).
    if visitor.origin != here:
        return Outcome.NOT_YOURS
    if visitor.grant_ended:
        return Outcome.GRANT_ENDED
    grant = visitor.grant
    if grant is None:
        return _admitted(owner) if visitor.login == owner else Outcome.NOT_YOURS
    if grant.staff != visitor.login or grant.student != owner or grant.course != namespace:
        return Outcome.NOT_YOURS  # another student's, or another course's route on this host
    if not grant.live(now):
        return Outcome.GRANT_ENDED  # run out since the session was looked up (cached up to 1 s)
    if embedded_elsewhere:
        return Outcome.STAFF_EMBEDDED
    return Admitted(owner, staff=grant)


def embedded_elsewhere(site: str | None, mode: str | None, dest: str | None) -> bool:
    """From a request's Sec-Fetch-Site/-Mode/-Dest: sent by another origin's page, and not a
    top-level page load (a fetch, a frame, an image, a script...). Browsers that send no fetch
    metadata (and non-browser clients) are not told apart: False."""
    if site is None or site == "same-origin":
        return False
    return not (mode == "navigate" and dest == "document")


def serve(userland: UserlandFacts | None, *, has_address: bool, self_service: bool,
          lost_has_userland: bool) -> Outcome:
    """Stage 2, for the admitted login's Userland of the route (None: there is none).
    `lost_has_userland`: the login has a Userland of a Template that collided with this route
    and lost it; `has_address`: the watched Service says where the environment answers."""
    if userland is None:
        if lost_has_userland:
            return Outcome.UNREACHABLE
        return Outcome.SELF_SERVICE if self_service else Outcome.FORBIDDEN
    if userland.suspended:
        return Outcome.SUSPENDED
    if not userland.ready:
        return Outcome.NOT_RUNNING
    if not has_address:
        return Outcome.STARTING
    return Outcome.FORWARD
