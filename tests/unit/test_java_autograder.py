"""The project's Java sample autograder (tests/data/autograders/java: Gradescope's Java sample's
structure, written afresh, plain Java instead of JUnit) run for real with this machine's javac and
java on a right, a wrong and a broken submission; its results.json read by the platform's parser.

As tests/unit/test_sample_autograder.py: a folder laid out as /autograder, the harness as root and
the student's code compiled and run as a uid of the run's own (another uid than the harness); one
case runs it all as one user, as under `make run`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.autograders import DATA, autograder_folder, run_grader, unused_uid
from userland.platform.model.gradescope import Results, student_view

SAMPLE = DATA / "autograders" / "java"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or sys.platform != "linux",
                       reason="switching users needs root on Linux"),
    pytest.mark.skipif(not (shutil.which("javac") and shutil.which("java") and shutil.which("setpriv")),
                       reason="needs a JDK and setpriv"),
]


@pytest.fixture
def autograder() -> Iterator[Path]:
    with autograder_folder(SAMPLE) as root:
        yield root


def grade(root: Path, submission: str, *, as_user: int | None = None) -> Results:
    env = {"PATH": "/usr/bin:/bin"}
    return run_grader(root, submission, env, as_user=as_user, timeout=300)


def test_a_right_copy_scores_full_marks_and_the_answers_stay_the_harnesss(autograder: Path) -> None:
    results = grade(autograder, "java-right")
    assert results.score == 10 and all(t.status == "passed" for t in results.tests)
    assert results.output == ""  # the student's code ran as another user
    assert (autograder / "source").stat().st_mode & 0o777 == 0o700  # cases.tsv: not the student's to read


def test_a_wrong_copy_loses_the_points_of_its_mistakes(autograder: Path) -> None:
    results = grade(autograder, "java-wrong")
    assert {t.name: t.score for t in results.tests} == {
        "add(2, 3)": 2, "add(-1, 1)": 2, "multiply(4, 5)": 0, "divide(7, 2)": 0, "hidden: multiply(0, 9)": 0}
    assert results.score == 4
    by_name = {t.name: t for t in results.tests}
    assert by_name["divide(7, 2)"].output == "expected 3.5, got 3.0"
    before = student_view(results, deadline_passed=False, published=False)
    assert [t.name for t in before.tests] == ["add(2, 3)", "add(-1, 1)"] and before.score is None


def test_a_copy_that_does_not_compile_scores_nothing_and_says_why(autograder: Path) -> None:
    results = grade(autograder, "java-broken")
    assert results.score == 0
    assert all(t.output.startswith("the code does not compile") for t in results.tests)
    assert "';' expected" in results.tests[0].output


def test_the_student_code_as_the_harness_own_user_is_said(autograder: Path) -> None:
    results = grade(autograder, "java-right", as_user=unused_uid())
    assert results.score == 10
    assert "could not switch users" in results.output
