"""A throwaway redis-server on a free loopback port, for tests and benchmarks.

It keeps nothing on disk and is stopped by its pid when the context ends. (`userland local`
supervises its Redis as a child process instead, so it dies with the command.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from userland.local.ports import free_port


@contextlib.contextmanager
def redis_server(state: Path, extra_args: Sequence[str] = ()) -> Iterator[str]:
    """Start redis-server with its pid file and log in `state`; yield its URL (database 0).
    `extra_args` are more redis-server options (such as `--maxmemory 4mb`)."""
    port = free_port()
    pidfile = state / "redis.pid"
    subprocess.run(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--daemonize", "yes", "--pidfile", str(pidfile),
         "--dir", str(state), "--logfile", str(state / "redis.log"), *extra_args],
        check=True,
    )
    for _ in range(100):
        if pidfile.exists():
            break
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGTERM)
