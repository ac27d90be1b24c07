"""The gateway's decision for a Template route (proxy/rules/decision.py), as tables: facts -> outcome.

Every branch of the request path that used to be reached only over HTTP is a row here; the
HTTP tests (tests/proxy/) check that the request path answers each outcome as a page.
"""

from __future__ import annotations

import pytest

from userland.platform.model.grants import Grant
from userland.proxy.routes_cache import UserlandState
from userland.proxy.rules.decision import Admitted, Outcome, Visitor, admit, embedded_elsewhere, serve

ALICE_ORIGIN = "https://alice.ide.example.edu"
BOB_ORIGIN = "https://bob.ide.example.edu"

# (visitor, owner, here, navigation, background) -> admission
ADMIT = [
    # No session on a student's origin: a page load signs the origin in through the platform;
    # a tab's own fetch is told it is signed out; anything else (a WebSocket, curl) gets a 401.
    (None, "alice", ALICE_ORIGIN, True, False, Outcome.HANDOFF),
    (None, "alice", ALICE_ORIGIN, False, True, Outcome.SIGNED_OUT_BACKGROUND),
    (None, "alice", ALICE_ORIGIN, False, False, Outcome.LOGIN_REQUIRED),
    # No session on a path route (the platform's host): a page load goes to the login.
    (None, None, None, True, False, Outcome.LOGIN_REDIRECT),
    (None, None, None, False, True, Outcome.LOGIN_REQUIRED),
    (None, None, None, False, False, Outcome.LOGIN_REQUIRED),
    # The owner, with a session bound to this very origin.
    (Visitor("alice", ALICE_ORIGIN), "alice", ALICE_ORIGIN, True, False, Admitted("alice")),
    (Visitor("alice", ALICE_ORIGIN), "alice", ALICE_ORIGIN, False, True, Admitted("alice")),
    # Someone else on alice's origin, whatever their session is bound to.
    (Visitor("bob", BOB_ORIGIN), "alice", ALICE_ORIGIN, True, False, Outcome.NOT_YOURS),
    (Visitor("bob", ALICE_ORIGIN), "alice", ALICE_ORIGIN, False, False, Outcome.NOT_YOURS),
    # alice's own session of another origin (a copied cookie) is not one of this origin.
    (Visitor("alice", "https://alice.db.example.edu"), "alice", ALICE_ORIGIN, True, False, Outcome.NOT_YOURS),
    # A platform session (bound to no origin) is never one of an origin.
    (Visitor("alice"), "alice", ALICE_ORIGIN, True, False, Outcome.NOT_YOURS),
    # Path routes: whoever is signed in reaches their own environment (the login picks it).
    (Visitor("alice"), None, None, True, False, Admitted("alice")),
    (Visitor("bob"), None, None, False, False, Admitted("bob")),
]


@pytest.mark.parametrize(("visitor", "owner", "here", "navigation", "background", "expected"), ADMIT)
def test_admit(visitor: Visitor | None, owner: str | None, here: str | None, navigation: bool,
               background: bool, expected: object) -> None:
    assert admit(visitor, owner=owner, here=here, navigation=navigation, background=background) == expected


NOW = 1_800_000_000.0
GRANT = Grant(id="G" * 22, course="cs101", student="alice", staff="tina", role="assistant", basis="request",
              started=NOW - 60, expires=NOW + 600)
TINA = Visitor("tina", ALICE_ORIGIN, grant=GRANT)


def staff(grant: Grant = GRANT, origin: str = ALICE_ORIGIN, login: str = "tina") -> Visitor:
    return Visitor(login, origin, grant=grant)


# (visitor, owner, here, namespace, now, embedded elsewhere) -> admission: staff by a help grant
ADMIT_STAFF = [
    (TINA, "alice", ALICE_ORIGIN, "cs101", NOW, False, Admitted("alice", staff=GRANT)),
    # The grant is for alice, in cs101, for tina: nothing else.
    (TINA, "bob", BOB_ORIGIN, "cs101", NOW, False, Outcome.NOT_YOURS),  # a session of alice's origin
    (staff(origin=BOB_ORIGIN), "bob", BOB_ORIGIN, "cs101", NOW, False, Outcome.NOT_YOURS),  # bob's: not by it
    (TINA, "alice", ALICE_ORIGIN, "cs202", NOW, False, Outcome.NOT_YOURS),      # another course's route here
    (staff(login="mallory"), "alice", ALICE_ORIGIN, "cs101", NOW, False, Outcome.NOT_YOURS),  # not hers
    # Its end, to the second (a cached session may be a second old).
    (TINA, "alice", ALICE_ORIGIN, "cs101", GRANT.expires - 0.001, False, Admitted("alice", staff=GRANT)),
    (TINA, "alice", ALICE_ORIGIN, "cs101", GRANT.expires, False, Outcome.GRANT_ENDED),
    (staff(GRANT.ended_at(NOW - 1, "alice", "student")), "alice", ALICE_ORIGIN, "cs101", NOW, False,
     Outcome.GRANT_ENDED),
    # Bound to a grant that is gone: ended, whatever else.
    (Visitor("tina", ALICE_ORIGIN, grant_ended=True), "alice", ALICE_ORIGIN, "cs101", NOW, False,
     Outcome.GRANT_ENDED),
    (Visitor("tina", BOB_ORIGIN, grant_ended=True), "alice", ALICE_ORIGIN, "cs101", NOW, False,
     Outcome.NOT_YOURS),
    # Another site's page in tina's browser asking for alice's environment with tina's access.
    (TINA, "alice", ALICE_ORIGIN, "cs101", NOW, True, Outcome.STAFF_EMBEDDED),
]


@pytest.mark.parametrize(("visitor", "owner", "here", "namespace", "now", "embedded", "expected"),
                         ADMIT_STAFF)
def test_admit_staff(visitor: Visitor, owner: str, here: str, namespace: str, now: float, embedded: bool,
                     expected: object) -> None:
    for navigation, background in ((True, False), (False, True), (False, False)):
        assert admit(visitor, owner=owner, here=here, navigation=navigation, background=background,
                     namespace=namespace, now=now, embedded_elsewhere=embedded) == expected


# Sec-Fetch-Site, -Mode, -Dest -> from another origin's page, and not a page load of its own
EMBEDDED = [
    (None, None, None, False),                              # no fetch metadata: not a browser that tells
    ("same-origin", "cors", "empty", False),                # the environment's own page
    ("same-origin", "websocket", "websocket", False),
    ("same-origin", "navigate", "iframe", False),           # its own frames
    ("none", "navigate", "document", False),                # typed in, a bookmark
    ("same-site", "navigate", "document", False),           # a link from the dashboard
    ("cross-site", "navigate", "document", False),
    ("same-site", "no-cors", "image", True),                # another student's page: an image
    ("same-site", "cors", "empty", True),                   # ... fetch with credentials
    ("same-site", "no-cors", "script", True),
    ("same-site", "navigate", "iframe", True),              # ... a frame (clickjacking)
    ("cross-site", "navigate", "iframe", True),
    ("same-site", "websocket", "websocket", True),
]


@pytest.mark.parametrize(("site", "mode", "dest", "expected"), EMBEDDED)
def test_embedded_elsewhere(site: str | None, mode: str | None, dest: str | None, expected: bool) -> None:
    assert embedded_elsewhere(site, mode, dest) is expected


def state(*, ready: bool = True, suspended: bool = False, phase: str = "Ready") -> UserlandState:
    return UserlandState(namespace="cs101", name="ide-alice", user="alice", template="ide", ready=ready,
                         phase=phase, suspended=suspended)


# (userland, has_address, self_service, lost_has_userland) -> outcome
SERVE = [
    (None, False, False, False, Outcome.FORBIDDEN),
    (None, False, True, False, Outcome.SELF_SERVICE),
    # Theirs lost this address to another Template: that says so, self-service or not.
    (None, False, True, True, Outcome.UNREACHABLE),
    (None, False, False, True, Outcome.UNREACHABLE),
    # Suspended wins over everything else it may also be.
    (state(suspended=True), True, False, False, Outcome.SUSPENDED),
    (state(suspended=True, ready=False, phase="Suspended"), False, False, False, Outcome.SUSPENDED),
    (state(ready=False, phase="Idle"), False, False, False, Outcome.NOT_RUNNING),
    (state(ready=False, phase="Starting"), False, False, False, Outcome.NOT_RUNNING),
    (state(ready=False, phase="Failed"), True, False, False, Outcome.NOT_RUNNING),
    # Ready, but the watch has not brought its Service yet.
    (state(), False, False, False, Outcome.STARTING),
    (state(), True, False, False, Outcome.FORWARD),
    (state(), True, True, False, Outcome.FORWARD),
]


@pytest.mark.parametrize(("userland", "has_address", "self_service", "lost", "expected"), SERVE)
def test_serve(userland: UserlandState | None, has_address: bool, self_service: bool, lost: bool,
               expected: Outcome) -> None:
    assert serve(userland, has_address=has_address, self_service=self_service,
                 lost_has_userland=lost) is expected
