"""Loopback ports we choose for a process to bind a moment later (`make run`'s children, the
tests' servers), never the same one twice at once, machine-wide.

Two races, two answers:
- A port inside the kernel's ephemeral range (what binding port 0 gives) can be taken before
  the process binds it by the source port of any outgoing connection, and a long-lived one (a
  watch, a keep-alive pool) holds it for minutes: ports are chosen below that range.
- A port that is free *now* is free for every chooser until someone binds it, which takes a
  child process a second or two: `userland local` chooses its web UI's two ports and then the
  gateway's before either child has bound, and parallel test workers choose theirs at the same
  moments. Each port handed out is recorded for `RESERVED_SECONDS` in a file under the temporary
  folder, read and written under an exclusive lock, so no chooser on this machine gets it again
  meanwhile. (A CI run lost its whole stop to the web UI of `userland local` finding its port
  taken four restarts in a row, with nothing in the output but "exit status 2".)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_CHOSEN = 10000
# Long enough for any child to start and bind (a loaded machine: tens of seconds), short enough
# that a whole suite's choices (a few thousand) never crowd the 22,000 ports below the range.
RESERVED_SECONDS = 300.0
_RESERVATIONS = Path(tempfile.gettempdir()) / f"userland-ports-{os.getuid()}"


@contextlib.contextmanager
def _reservations(path: Path, now: float) -> Iterator[dict[int, float]]:
    """The ports handed out in the last `RESERVED_SECONDS` (port -> when), under an exclusive
    lock; what the caller adds is written back."""
    try:
        file = open(path, "a+", encoding="ascii")  # noqa: SIM115 (closed by the `with` below)
    except OSError:  # a temporary folder we may not write: chosen at random all the same
        yield {}
        return
    with file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        held: dict[int, float] = {}
        for line in file.read().splitlines():
            port, _, when = line.partition(" ")
            with contextlib.suppress(ValueError):
                if now - float(when) < RESERVED_SECONDS:
                    held[int(port)] = float(when)
        yield held
        file.seek(0)
        file.truncate()
        file.write("".join(f"{port} {when:.1f}\n" for port, when in held.items()))


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False  # in use (or in TIME_WAIT)
    return True


def free_port(ephemeral_range: Path = _EPHEMERAL_RANGE, lowest: int = _LOWEST_CHOSEN, *,
              reservations: Path = _RESERVATIONS) -> int:
    """A loopback port that is free now and handed to no other caller on this machine for the
    next `RESERVED_SECONDS`: at random from `lowest` up to the kernel's ephemeral range (as
    `ephemeral_range` gives it)."""
    try:
        ephemeral_low = int(ephemeral_range.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768  # Linux's default
    if ephemeral_low - lowest >= 1000:
        now = time.time()
        with _reservations(reservations, now) as held:
            for _ in range(200):
                port = lowest + secrets.randbelow(ephemeral_low - lowest)
                if port not in held and _bindable(port):
                    held[port] = now
                    return port
    # A machine whose ephemeral range starts low: the kernel's choice.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
