"""One build of the control plane at a time per cache (scripts/build-control-plane.sh): a second
build started meanwhile (`make control-plane` beside a test's fixture) unpacks the source over
the first's and fails it half-way (most likely what failed a new machine's setup). The second
now waits for the first, then finds the binaries built and builds nothing.

Real: the script, bash and flock. The "first build" is this test holding the lock, so no
Kubernetes is built here.
"""

from __future__ import annotations

import fcntl
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-control-plane.sh"


def test_a_second_build_waits_for_the_first_and_builds_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "bin").mkdir(parents=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a first build, under way
        second = subprocess.Popen(["bash", str(SCRIPT), str(cache), "kube-scheduler"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert second.poll() is None, second.communicate()  # waiting, not building beside it
        binary = cache / "bin" / "kube-scheduler"
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    out, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert out.strip() == str(cache / "bin")
    assert "building" not in err and not (cache / "build").exists()  # nothing fetched or unpacked
