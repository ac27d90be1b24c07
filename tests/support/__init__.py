"""What tests share: one way to wait, one way to find a port, and the helpers several test
folders use (object bodies, the `userland local` command seen from outside).

- `eventually(check)`: wait until a condition an observable event makes true holds; never a
  fixed sleep before asserting that something did NOT happen (wait for the event that says
  the code looked, or drive its clock).
- `MUST_COMPLETE` (`MUST_COMPLETE_MS` for Playwright): the timeout for work that must complete
  (a safety net, not a speed claim).
- `free_port()`: a free loopback port (tests never use fixed ports).
- `objects`: Template and Userland bodies as the API takes them.
- `make_run`: the `userland local` command from outside (its banner, a browser that resolves
  `*.localhost`, the processes it leaves).

Test files import from here, never from each other.
"""

from tests.support.ports import free_port
from tests.support.waiting import MUST_COMPLETE, MUST_COMPLETE_MS, eventually, eventually_sync

__all__ = ["MUST_COMPLETE", "MUST_COMPLETE_MS", "eventually", "eventually_sync", "free_port"]
