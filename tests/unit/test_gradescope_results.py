"""Gradescope's results.json read by the platform (platform/model/gradescope.py), against golden data.

The inputs are in tests/unit/golden/gradescope/ (full.json has every field of Gradescope's
published format); what they are read as, and what a student sees of them at each stage
(before and after their deadline, before and after publication), is the golden file
tests/unit/golden/gradescope_read.json. Regenerate with `UPDATE_GOLDEN=1` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.golden import check_golden
from userland.platform.model.gradescope import (
    RESULTS_MAX_BYTES,
    GradedTest,
    Results,
    ResultsFailure,
    parse_results,
    published_summary,
    score_words,
    shown_now,
    student_view,
)

GOLDEN = Path(__file__).parent / "golden"
INPUTS = GOLDEN / "gradescope"


def read(name: str) -> Results | ResultsFailure:
    return parse_results((INPUTS / name).read_bytes())


def test_what_each_results_file_reads_as_and_what_a_student_sees() -> None:
    found = {}
    for name in ("full.json", "summed.json", "score_only.json"):
        results = read(name)
        assert isinstance(results, Results), results
        views = {}
        for deadline_passed in (False, True):
            for published in (False, True):
                view = student_view(results, deadline_passed=deadline_passed, published=published)
                views[f"deadline_passed={deadline_passed},published={published}"] = {
                    "tests": [t.name for t in view.tests], "score": view.score, "heldBack": view.held_back}
        found[name] = {"results": results.to_json(), "studentSees": views}
    check_golden(GOLDEN / "gradescope_read.json", found)


def test_the_full_format_keeps_what_is_read() -> None:
    results = read("full.json")
    assert isinstance(results, Results)
    assert results.score == 44.0  # the top-level score wins over the tests' sum
    assert results.output_format == "simple_format"
    second = results.tests[1]
    assert second.visibility == "after_due_date" and second.output_format == "md"  # the top level's
    assert results.tests[3].number == "3"
    assert [t.passed for t in results.tests] == [True, False, False, True]
    # What the gradebook's comment may say: the tests shown once returned (not the hidden one).
    assert [t.visibility for t in results.tests].count("hidden") == 1
    shown = [t for t in results.tests if t.visibility != "hidden"]
    assert published_summary(results) == {"shown": 3, "passed": sum(1 for t in shown if t.passed)}


@pytest.mark.parametrize(("name", "words"), [
    ("nan.json", "NaN is not a number JSON allows"),
    ("no_score.json", "score is missing, and not every test has a score to add up"),
    ("score_text.json", 'score must be a number, not "10"'),
    ("score_bool.json", "score must be a number, not true"),
    ("bad_visibility.json", 'tests[0].visibility is "secret"; it must be one of hidden, after_due_date, '
                            "after_published, visible"),
    ("tests_not_list.json", "tests must be a list"),
    ("not_object.json", "it must be an object with score and/or tests"),
    ("truncated.json", "results.json is not valid JSON"),
    ("bad_format.json", 'tests[0].output_format is "pdf"'),
    ("name_list.json", "tests[0].name must be text"),
    ("not_utf8.bin", "results.json is not UTF-8 text"),
])
def test_an_invalid_results_file_says_why(name: str, words: str) -> None:
    found = read(name)
    assert isinstance(found, ResultsFailure), found
    assert found.reason == "ResultsInvalid"
    assert words in found.message


def test_no_results_file() -> None:
    found = parse_results(None)
    assert isinstance(found, ResultsFailure) and found.reason == "NoResults"
    assert "wrote no /autograder/results/results.json" in found.message


def test_over_one_megabyte_is_refused_unread() -> None:
    data = b'{"score": 1, "output": "' + b"x" * RESULTS_MAX_BYTES + b'"}'
    found = parse_results(data)
    assert isinstance(found, ResultsFailure) and found.reason == "ResultsTooLarge"
    assert "over the limit of 1 MB" in found.message
    assert isinstance(parse_results(b'{"score": 1, "output": "' + b"x" * 1000 + b'"}'), Results)


@pytest.mark.parametrize(("visibility", "deadline_passed", "published", "shown"), [
    ("visible", False, False, True),
    ("after_due_date", False, False, False),
    ("after_due_date", True, False, True),
    ("after_due_date", False, True, True),
    ("after_published", True, False, False),
    ("after_published", True, True, True),
    ("hidden", True, True, False),
])
def test_visibility_rules(visibility: str, deadline_passed: bool, published: bool, shown: bool) -> None:
    assert shown_now(visibility, deadline_passed=deadline_passed, published=published) is shown


def test_a_hidden_test_holds_the_total_back_until_published() -> None:
    results = Results(score=3, tests=(GradedTest("a", 1, 1), GradedTest("b", 2, 5, visibility="hidden")))
    before = student_view(results, deadline_passed=True, published=False)
    assert before.score is None and before.held_back == 1 and [t.name for t in before.tests] == ["a"]
    after = student_view(results, deadline_passed=True, published=True)
    assert after.score == 3 and [t.name for t in after.tests] == ["a"]


def test_score_words() -> None:
    assert score_words(7.0, 10.0) == "7/10"
    assert score_words(7.5, 10.0) == "7.5/10"
