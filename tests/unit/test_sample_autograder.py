"""The project's sample autograder (tests/data/autograders/python, Gradescope's layout) run for real
on sample submissions, its results.json read by the platform's parser (platform/model/gradescope.py).

Real: the harness and the students' code run as processes here, in a folder laid out as
/autograder is in a grading Pod. The harness runs as root and the student's code as a uid of the
run's own (the documented pattern: another uid than the harness, shared with no other copy); one
case runs it as one user throughout,
as under `make run`. The attacks (a hanging submission, a fork bomb, endless output, a fake
results.json, reading the tests' answers or the environment, the network) each change only their
own score, and never raise it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.autograders import DATA, autograder_folder, run_grader, unused_uid
from userland.platform.model.gradescope import Results, parse_results, student_view

SAMPLE = DATA / "autograders" / "python"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or sys.platform != "linux",
                                reason="switching users needs root on Linux")


@pytest.fixture
def autograder() -> Iterator[Path]:
    with autograder_folder(SAMPLE) as root:
        yield root


def grade(root: Path, submission: str, *, as_user: int | None = None) -> Results:
    env = {"PATH": "/usr/bin:/bin", "AUTOGRADER_ROOT": str(root),
           "JOB_TOKEN": "a-secret-the-student-must-not-see"}
    return run_grader(root, submission, env, as_user=as_user)


def leftovers(root: Path) -> list[int]:
    """Processes still working in the autograder's folder (the student's, had any survived)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(Path(os.readlink(entry / "cwd"))).startswith(str(root)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def scores(results: Results) -> dict[str, float | None]:
    return {t.name: t.score for t in results.tests}


def test_a_right_copy_scores_full_marks(autograder: Path) -> None:
    results = grade(autograder, "right")
    assert results.score == 10
    assert all(t.status == "passed" for t in results.tests)
    assert results.output == ""  # the student's code ran as another user


def test_a_wrong_copy_loses_the_points_of_its_mistakes(autograder: Path) -> None:
    results = grade(autograder, "wrong")
    assert scores(results) == {"add(2, 3)": 2, "add(-1, 1)": 2, "multiply(4, 5)": 0, "divide(7, 2)": 0,
                               "hidden: multiply(0, 9)": 0}
    assert results.score == 4
    by_name = {t.name: t for t in results.tests}
    assert by_name["multiply(4, 5)"].output.startswith("expected 20, got 9")
    # Before the deadline the student sees the visible tests only, and no total (it would tell
    # them the others' score); after it, the after_due_date ones too; the hidden one never.
    before = student_view(results, deadline_passed=False, published=False)
    assert [t.name for t in before.tests] == ["add(2, 3)", "add(-1, 1)"] and before.score is None
    after = student_view(results, deadline_passed=True, published=True)
    assert "hidden: multiply(0, 9)" not in [t.name for t in after.tests] and after.score == 4


def test_the_student_code_as_the_harness_own_user_is_said(autograder: Path) -> None:
    """Under `make run` the grader is one user: it still grades, and says it could not separate."""
    results = grade(autograder, "right", as_user=unused_uid())
    assert results.score == 10
    assert "could not switch users" in results.output


def test_a_copy_that_hangs_scores_nothing_and_ends(autograder: Path) -> None:
    results = grade(autograder, "hang")
    assert results.score == 0
    assert all(t.output.startswith("timed out after 2") for t in results.tests)


def test_a_fork_bomb_is_bounded_and_scores_nothing(autograder: Path) -> None:
    results = grade(autograder, "forkbomb")
    assert results.score == 0
    assert not leftovers(autograder)


def test_a_fork_bomb_beside_another_copy_changes_nothing_of_its_score() -> None:
    """Two copies graded at once, as two grading Pods on one node, by graders of two courses: one
    lets a test start 200 processes, the other 64 (the default). The kernel counts the process
    limit over every process of a uid, so under one shared account the fork bomb's 200 would
    leave the other copy's tests unable to start a single one. Each run's own uid keeps them apart."""
    with autograder_folder(SAMPLE) as bomb, autograder_folder(SAMPLE) as right, ThreadPoolExecutor(1) as pool:
        cases = bomb / "source" / "cases.json"
        cases.write_text(json.dumps([{**case, "processes": 200} for case in json.loads(cases.read_text())]))
        bombing = pool.submit(grade, bomb, "forkbomb")
        deadline = time.monotonic() + 60
        while len(leftovers(bomb)) < 100:  # the bomb is at work, past the other grader's limit
            assert not bombing.done() and time.monotonic() < deadline, "the fork bomb never got going"
            time.sleep(0.01)
        assert grade(right, "right").score == 10
        assert bombing.result().score == 0


def test_endless_output_is_cut_and_scores_nothing(autograder: Path) -> None:
    results = grade(autograder, "bigoutput")
    assert results.score == 0
    assert len(results.to_json().__repr__()) < 200_000


def test_a_fake_results_json_changes_nothing(autograder: Path) -> None:
    """It prints a fake results.json, writes one where the harness would, and leaves a process to
    write it again later: the harness's folder is not the student's, and nothing of theirs survives
    a test."""
    results = grade(autograder, "cheat")
    assert results.score == 10  # its functions are right: its own score, not 1000
    assert results.tests[0].name == "add(2, 3)"
    assert not leftovers(autograder)
    again = parse_results((autograder / "results" / "results.json").read_bytes())
    assert isinstance(again, Results) and again.score == 10


def test_the_answers_and_the_environment_are_out_of_reach(autograder: Path) -> None:
    results = grade(autograder, "snoop")
    # It could not read cases.json (else multiply(4, 5) would pass) nor find the token (else add fails).
    assert scores(results)["multiply(4, 5)"] == 0
    assert scores(results)["add(2, 3)"] == 2


def test_a_network_attempt_changes_only_its_own_result(autograder: Path) -> None:
    """Here the machine may have no network at all; in a grading Pod its NetworkPolicy has none.
    Either way the submission's own score is all it could change."""
    results = grade(autograder, "network")
    assert scores(results)["multiply(4, 5)"] == 2
