"""The gateway's decision for a Template route (proxy/decision.py), as tables: facts -> outcome.

Every branch of the request path that used to be reached only over HTTP is a row here; the
HTTP tests (tests/proxy/) check that the request path answers each outcome as a page.
"""

from __future__ import annotations

import pytest

from userland.proxy.decision import Admitted, Outcome, Visitor, admit, serve
from userland.proxy.routes_cache import UserlandState

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
