"""A Gradescope-style autograder harness, written afresh for Userland's tests (docs/grading.md).

It follows the pattern that keeps a student's code from deciding its own score:

- the harness runs as one user (root in the grading container) and the student's code as another,
  a uid of this run's own that no process uses (no account needed; AUTOGRADER_STUDENT_USER may
  name an account instead): the student's code cannot write
  /autograder/results/results.json (the harness's folder) nor read /autograder/source (the tests
  and their answers, mode 0700);
- each test runs the student's code in a process of its own, with limits (CPU seconds, memory,
  processes, file size) and a time limit, and the harness compares what it printed with the
  expected answer: the student's code never sees the answer, and nothing it prints is taken as a
  result;
- after each test every process below the harness is killed and reaped (it is a child subreaper:
  a process that detaches itself still comes to it), so nothing of the student's outlives a test
  to write anything later, and nobody else's process is touched; the harness writes results.json
  last.

Where it cannot switch users (not root, as under `make run`) it runs the student's code as itself,
says so in the results' output, and the protection above is then only the process limits'.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# /autograder in a grading Pod; found from this file's place (source/harness.py), so that the same
# harness runs where the layout is elsewhere (under `make run`, in a test).
ROOT = Path(__file__).resolve().parent.parent
SOURCE, SUBMISSION, RESULTS = ROOT / "source", ROOT / "submission", ROOT / "results"
# An account to run the student's code as; unset (the default), a uid of this run's own.
STUDENT = os.environ.get("AUTOGRADER_STUDENT_USER", "")
# Where this run's own uid is drawn from: above what accounts and container images use.
FRESH_UIDS = range(200_000, 300_000)
OUTPUT_MAX = 8192
DRIVER = "import sys; sys.path.insert(0, '.'); import {module} as m; print(repr({call}))"


def student_ids() -> tuple[int, int] | None:
    """(uid, gid) to run the student's code as, or None: this harness cannot switch users."""
    if os.geteuid() != 0:
        return None
    if not STUDENT:
        return fresh_ids()
    try:
        entry = pwd.getpwnam(STUDENT)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def fresh_ids() -> tuple[int, int]:
    """A uid (and gid) that no process uses now, drawn at random. Not a shared account: the kernel
    counts RLIMIT_NPROC over every process of a uid on the node, and grading Pods on one node
    share uids (without user namespaces), so with one `student` account a fork bomb in one copy
    would use up the process limit of every other copy's tests graded beside it."""
    taken = {owner for pid in Path("/proc").iterdir() if (owner := uid_of(pid)) is not None}
    draw = random.SystemRandom()
    while True:
        uid = draw.choice(FRESH_UIDS)
        if uid not in taken:
            return uid, uid


def uid_of(entry: Path) -> int | None:
    try:
        return entry.stat().st_uid if entry.name.isdigit() else None
    except OSError:
        return None


def limits(ids: tuple[int, int] | None, case: dict[str, Any]) -> Any:
    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CPU, (int(case.get("cpu", 5)),) * 2)
        memory = int(case.get("memory_mb", 256)) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024,) * 2)
        # The process limit counts every process of the user: the student's own user has only
        # theirs; sharing this one, they get a few more than it has now.
        most = int(case.get("processes", 64)) if ids is not None else own_processes() + 32
        resource.setrlimit(resource.RLIMIT_NPROC, (most, most))
        if ids is not None:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])
    return apply


def own_processes() -> int:
    return len(processes_of(os.getuid()))


def descendants(root: int) -> list[int]:
    """Every process below `root` (this harness: as a child subreaper, it is the parent of every
    orphan the student's code leaves, however it detached itself)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        here = frontier.pop()
        children = [pid for pid, parent in parents.items() if parent == here]
        found.extend(children)
        frontier.extend(children)
    return found


def become_subreaper() -> None:
    """The student's orphans come to this harness (not to PID 1), which kills and reaps them: a
    process killed but not reaped would still count against the next test's process limit."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def processes_of(uid: int) -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if uid_of(entry) == uid]


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_student() -> None:
    """End every process the test started, and reap them: everything below this harness (never a
    process of anyone else's, whatever user it runs as)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = descendants(os.getpid())
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        reap()


def run_case(ids: tuple[int, int] | None, case: dict[str, Any]) -> dict[str, Any]:
    code = DRIVER.format(module=case["module"], call=case["call"])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp",
           "LANG": "C.UTF-8"}
    process = subprocess.Popen([sys.executable, "-I", "-c", code], cwd=SUBMISSION, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               preexec_fn=limits(ids, case))
    started = time.monotonic()
    try:
        out, _ = process.communicate(timeout=float(case.get("timeout", 2)))
        verdict = None
    except subprocess.TimeoutExpired:
        verdict = f"timed out after {case.get('timeout', 2)} s"
        out = b""
    finally:
        kill_student()
        process.wait()
    printed = out[:OUTPUT_MAX].decode(errors="replace").strip()
    answer = printed.splitlines()[-1] if printed else ""
    passed = verdict is None and process.returncode == 0 and answer == case["expected"]
    if verdict is None:
        verdict = "passed" if passed else f"expected {case['expected']}, got {answer or 'nothing'}"
    result = {"name": case["name"], "score": case["points"] if passed else 0, "max_score": case["points"],
              "status": "passed" if passed else "failed", "output": verdict,
              "visibility": case.get("visibility", "visible")}
    if not passed and printed and case.get("visibility", "visible") == "visible":
        result["output"] += "\n\n" + printed[-2000:]
    result["execution_time"] = round(time.monotonic() - started, 3)
    return result


def main() -> int:
    ids = student_ids()
    if ids is None and os.geteuid() == 0:
        print(f"refusing to run a student's code as root: there is no account {STUDENT!r}")
        return 1
    if ids is not None:
        try:
            os.chmod(SOURCE, 0o700)  # the tests' answers: not the student's to read
        except PermissionError:
            pass  # not its owner: the platform's fetch step closed it already (docs/grading.md)
    become_subreaper()
    cases = json.loads((SOURCE / "cases.json").read_text())
    tests = [run_case(ids, case) for case in cases]
    for test in tests:
        test.pop("execution_time", None)
    results: dict[str, Any] = {"tests": tests, "visibility": "visible"}
    if ids is None:
        results["output"] = ("The student's code ran as the harness's own user (this grader could not "
                             "switch users): it was not kept from the harness's files.")
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / "results.json"
    temp = RESULTS / ".results.json.tmp"
    temp.write_text(json.dumps(results, indent=1))
    os.replace(temp, target)  # last, after every process of the student's has ended
    return 0


if __name__ == "__main__":
    sys.exit(main())
