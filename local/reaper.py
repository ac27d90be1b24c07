"""`python -m userland.local.reaper LEDGER`: the local runner's last word.

Started by the runner with a pipe on stdin whose writing end only the runner holds. When the
pipe closes (the runner ended: cleanly, or by SIGHUP, SIGKILL or a crash, which a program's
PR_SET_PDEATHSIG does not cover for what it forked), it stops every container the ledger still
names (local/process_tree.py) and exits. After a clean stop the ledger is empty: it just exits.
In a session of its own, ignoring Ctrl-C and hang-ups, so it outlives what ends the runner.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from userland.local.process_tree import Confinement


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m userland.local.reaper LEDGER", file=sys.stderr)
        return 2
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s reaper %(message)s")
    sys.stdin.buffer.read()  # until the runner's end of the pipe closes
    left = Confinement(Path(argv[1]), None).sweep()
    if left:
        logging.warning("the runner ended without stopping %d container(s): stopped them", left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
