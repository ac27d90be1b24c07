"""A worker Pod's memory with forged hand-out records in its batch (issue 25), measured (by hand):

  .venv/bin/python bench/worker_memory_bench.py [--students 20] [--forged 2] [--before 9de7596]

The worker runs as its Pod does (`coursework.worker.main` in a process of its own, told its job
in USERLAND_JOB, against the assignment store on loopback with a source from the git server on
loopback), once with the code of this tree ("after") and once with the code of `--before` (a
git ref, taken with `git archive`: "before"; by default the last commit of main before issue
25's bounds). A batch of `--students` students, `--forged` of
them with a 16 MiB forged `.userland-handout.json` of `{}` entries in their folder (and, for the
feedback run, in their `feedback/`), the others with nothing. Each run prints the worker's peak
RSS (the kernel's ru_maxrss of that process) against the worker Pod's memory limit (512 MiB,
operator/rules/assignment/pods.py), and a baseline of the same batch with no forged record.
Results: bench/results/worker_memory.json.

Since the store keys each assignment by its uid (issue 25, the store's part), a worker of a
`--before` older than that asks paths the store no longer serves: its "before" run fails at the
store (its first download), so the figures recorded in bench/results/worker_memory.json are the
"before" of record; "after" runs as before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.coursework import (  # noqa: E402
    ASG,
    NS,
    STORE_SECRET,
    UID,
    git_server,
    job,
    store_server,
    volumes,
)
from userland.coursework.trees import Limits  # noqa: E402
from userland.platform.clients.store_client import StoreClient  # noqa: E402
from userland.platform.model.assignments import MANIFEST_NAME  # noqa: E402
from userland.platform.model.coursework import job_token  # noqa: E402

MIB = 1024 * 1024
POD_LIMIT_MIB = 512
# main before issue 25 (the worker that parsed a record before checking its seal).
BEFORE = "9de7596"
RECORD = 16 * MIB - 64
# The worker as its Pod runs it, reporting its own peak RSS and which code it ran.
CHILD = """
import json, resource, sys
from userland.coursework import worker
code = worker.main()
print(json.dumps({"maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "code": worker.__file__, "exit": code}))
"""
PACKAGES = ("platform", "operator", "auth", "proxy", "web", "cli", "local", "coursework")


def forged_record() -> bytes:
    head, tail = b'{"files": [', b"{}]}"
    return head + b"{}," * ((RECORD - len(head) - len(tail)) // 3) + tail


def code_of(ref: str, into: Path) -> Path:
    """A folder to put first on PYTHONPATH so that `userland.*` is `ref`'s code (its top-level
    folders, mapped as pyproject.toml maps them)."""
    tree = into / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shim = into / "path"
    (shim / "userland").mkdir(parents=True)
    for package in PACKAGES:
        (shim / "userland" / package).symlink_to(tree / package)
    return shim


def run_worker(the_job: Any, store: str, scratch: Path, pythonpath: Path | None) -> dict[str, Any]:
    env = {**os.environ, "USERLAND_JOB": the_job.to_json(), "USERLAND_JOB_TOKEN":
           job_token(STORE_SECRET, the_job.scope), "USERLAND_STORE_URL": store, "TMPDIR": str(scratch),
           "USERLAND_LOG_LEVEL": "WARNING"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    else:
        env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the worker did not report (exit {done.returncode}): {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(lines[-1])
    return report


async def batch(root: Path, kind: str, students: int, forged: int,
                code: dict[str, Path | None]) -> dict[str, Any]:
    """One batch of `kind` for each version of the code: the worker's peak RSS and its results."""
    found: dict[str, Any] = {}
    limits = Limits(1000, 10**8)
    async with git_server(root / "git") as git, \
            store_server(root / "store", source_limits=limits, copy_limits=limits,
                         git_urls=(str(git.url) + "/",)) as store:
        commit = git.repo("bench", {f"src/file{i}.py": f"print({i})\n" for i in range(20)})
        operator = StoreClient(store, STORE_SECRET, "operator")
        try:
            fetched = await operator.fetch(NS, ASG, UID, url=git.url_of("bench"), ref="main", sub_path="")
            for version, pythonpath in code.items():
                folder = root / f"{kind}-{version}"
                logins = [f"s{i:03d}" for i in range(students)]
                members = volumes(folder, *logins, folder="week1/feedback")
                for member in members[:forged]:
                    where = Path(member.mount) / "week1" / ("feedback" if kind == "feedback" else "")
                    (where / MANIFEST_NAME).write_bytes(forged_record())
                if kind == "handout":
                    the_job = job("handout", members, source=fetched["key"], commit=commit)
                else:
                    the_job = job("feedback", members,
                                  feedback={login: ("A", "well done", f"d{login}") for login in logins})
                scratch = folder / "scratch"
                scratch.mkdir()
                report = await asyncio.to_thread(run_worker, the_job, store, scratch, pythonpath)
                state = await operator.state(NS, ASG, UID)
                results = state["handout" if kind == "handout" else "feedbackReturned"]
                report["results"] = {s: sum(1 for r in results.values() if r["state"] == s)
                                     for s in {r["state"] for r in results.values()}}
                found[version] = report
        finally:
            await operator.close()
    return found


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="worker-memory-") as temp:
        root = Path(temp)
        before = code_of(args.before, root / "before-code")
        code: dict[str, Path | None] = {"before": before, "after": None}
        figures: dict[str, Any] = {"students": args.students, "forged": args.forged, "before": args.before,
                                   "record_bytes": RECORD, "pod_limit_mib": POD_LIMIT_MIB}
        for kind in ("handout", "feedback"):
            figures[kind] = await batch(root / kind, kind, args.students, args.forged, code)
            figures[f"{kind}_without_forged"] = await batch(root / f"{kind}-clean", kind, args.students, 0,
                                                            {"after": None})
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--forged", type=int, default=2)
    parser.add_argument("--before", default=BEFORE, help="the git ref of the code measured as 'before'")
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    print(f"{'batch':<28}{'version':<8}{'peak RSS':>10}{'of the Pod':>12}  results")
    for kind in ("handout", "feedback", "handout_without_forged", "feedback_without_forged"):
        for version, report in figures[kind].items():
            rss = report["maxrss_mib"]
            print(f"{kind:<28}{version:<8}{rss:>7.0f} MiB{rss / POD_LIMIT_MIB:>11.0%}  {report['results']}"
                  f"  ({Path(report['code']).parent.parent})")
    out = REPO / "bench" / "results" / "worker_memory.json"
    out.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
