"""Running the project's sample autograders (tests/data/autograders/<language>) for real, in a
folder laid out as /autograder is in a grading Pod (docs/grading.md): the tests in `source`, the
submission read-only in `submission`, results.json read back by the platform's parser."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from userland.platform.model.gradescope import Results, parse_results

DATA = Path(__file__).resolve().parents[1] / "data"
SUBMISSIONS = DATA / "submissions"
STUDENT = "nobody"  # the account the student's code runs as here (setup.sh makes `student`)


@contextlib.contextmanager
def autograder_folder(sample: Path) -> Iterator[Path]:
    """A folder laid out as /autograder, that `nobody` may enter (tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="autograder-", dir="/tmp"))
    try:
        root.chmod(0o755)
        shutil.copytree(sample, root / "source")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_grader(root: Path, submission: str, env: dict[str, str], *, as_user: str | None = None,
               timeout: float = 120) -> Results:
    """The sample's run_autograder on `submission` (a folder of tests/data/submissions), as root
    (or all of it as `as_user`, as under `make run`); its results.json, parsed."""
    target = root / "submission"
    shutil.copytree(SUBMISSIONS / submission, target)
    for folder, _, files in os.walk(target):
        os.chmod(folder, 0o555)  # read-only, as the Pod mounts it
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
    if as_user is not None:
        entry = pwd.getpwnam(as_user)
        for folder in (root, root / "source"):
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        (root / "results").mkdir()
        os.chown(root / "results", entry.pw_uid, entry.pw_gid)
    done = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          timeout=timeout, check=False, user=as_user)
    assert done.returncode == 0, done.stdout + done.stderr
    found = parse_results((root / "results" / "results.json").read_bytes())
    assert isinstance(found, Results), found
    return found
