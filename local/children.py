"""Child processes of `userland local`: Redis, the operator and the gateway.

Each runs in its own session (a terminal's Ctrl-C reaches only `userland local`, which stops
them in order) and dies with its parent (PR_SET_PDEATHSIG), with output in a log file.
Start them from the main thread: PR_SET_PDEATHSIG follows the thread that forked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from userland.local.controlplane import die_with_parent


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> int | None:
        """The exit status if it has ended, else None."""
        return self.process.poll()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; waits until it is gone."""
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait()
        # Whatever it left in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def spawn(name: str, argv: Sequence[str], log_dir: Path, env: Mapping[str, str] | None = None) -> Child:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as output:
        process = subprocess.Popen(
            list(argv), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env), preexec_fn=die_with_parent,
            start_new_session=True,
        )
    return Child(name, process, log_path)


def userland_command(*args: str) -> list[str]:
    """The `userland` command line in this same Python (works from a venv without activating it)."""
    return [sys.executable, "-m", "userland.cli.main", *args]
