"""Running the project's sample autograders (tests/data/autograders/<language>) for real, in a
folder laid out as /autograder is in a grading Pod (docs/grading.md): the tests in `source`, the
submission read-only in `submission`, results.json read back by the platform's parser."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from userland.platform.model.gradescope import Results, parse_results

DATA = Path(__file__).resolve().parents[1] / "data"
SUBMISSIONS = DATA / "submissions"


def unused_uid() -> int:
    """A uid no process on this machine uses now. The samples run a student's code as a uid of
    each run's own; a test that runs a whole grader as one non-root user (as under `make run`)
    takes one too, not a shared account such as `nobody`: the process limit (RLIMIT_NPROC,
    `ulimit -u`) counts every process of a uid, so tests beside it would use up its limit."""
    taken = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit():
                taken.add(entry.stat().st_uid)
    draw = random.SystemRandom()
    while (uid := draw.randrange(300_000, 400_000)) in taken:
        pass
    return uid


@contextlib.contextmanager
def autograder_folder(sample: Path) -> Iterator[Path]:
    """A folder laid out as /autograder, that any user may enter (tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="autograder-", dir="/tmp"))
    try:
        root.chmod(0o755)
        shutil.copytree(sample, root / "source")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_grader(root: Path, submission: str, env: dict[str, str], *, as_user: int | None = None,
               timeout: float = 120) -> Results:
    """The sample's run_autograder on `submission` (a folder of tests/data/submissions), as root
    (or all of it as the uid `as_user`, as under `make run`); its results.json, parsed."""
    target = root / "submission"
    shutil.copytree(SUBMISSIONS / submission, target)
    for folder, _, files in os.walk(target):
        os.chmod(folder, 0o555)  # read-only, as the Pod mounts it
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
    if as_user is not None:
        for folder in (root, root / "source"):
            os.chown(folder, as_user, as_user)
        (root / "results").mkdir()
        os.chown(root / "results", as_user, as_user)
    done = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          timeout=timeout, check=False, user=as_user, group=as_user,
                          extra_groups=[] if as_user is not None else None)
    assert done.returncode == 0, done.stdout + done.stderr
    found = parse_results((root / "results" / "results.json").read_bytes())
    assert isinstance(found, Results), found
    return found
