"""Gradescope's results.json: read, checked, and what a student may see of it (docs/grading.md).

`parse_results(data)` takes the bytes a grader wrote at `/autograder/results/results.json` (or
None: it wrote none) and returns `Results` or a `ResultsFailure` whose words a teacher can act
on: no file, more than 1 MB, not JSON, not Gradescope's shape. Nothing a grader writes can
crash a reader: every field is checked for its type, numbers must be finite (Python's json would
take NaN and Infinity), and the names and outputs are text.

`student_view` applies the visibility rules: `visible` always, `after_due_date` once the
student's own deadline has passed, `after_published` once staff return the results, `hidden`
never (its points still count). The total is shown to the student only when no test's result is
held back from them at that moment, or once published: a total would otherwise tell them the
score of the tests they cannot see.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

RESULTS_MAX_BYTES = 1024 * 1024
TESTS_MAX = 2000
NAME_MAX = 1000
Visibility = Literal["hidden", "after_due_date", "after_published", "visible"]
VISIBILITIES: tuple[Visibility, ...] = ("hidden", "after_due_date", "after_published", "visible")
OUTPUT_FORMATS = ("text", "html", "simple_format", "md", "ansi")
STATUSES = ("passed", "failed")
FailureReason = Literal["NoResults", "ResultsTooLarge", "ResultsInvalid", "TimedOut", "OutOfMemory",
                        "GraderFailed"]


@dataclass(frozen=True)
class ResultsFailure:
    reason: FailureReason
    message: str


@dataclass(frozen=True)
class GradedTest:
    name: str
    score: float | None = None
    max_score: float | None = None
    status: str = ""  # passed, failed, or "" (judged by score)
    output: str = ""
    output_format: str = "text"
    visibility: Visibility = "visible"
    number: str = ""

    @property
    def passed(self) -> bool | None:
        if self.status:
            return self.status == "passed"
        if self.score is not None and self.max_score is not None:
            return self.score >= self.max_score
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "visibility": self.visibility}
        for key, value in (("score", self.score), ("max_score", self.max_score), ("status", self.status),
                           ("output", self.output), ("number", self.number)):
            if value not in (None, ""):
                out[key] = value
        if self.output_format != "text":
            out["output_format"] = self.output_format
        return out


@dataclass(frozen=True)
class Results:
    score: float
    tests: tuple[GradedTest, ...] = ()
    output: str = ""
    output_format: str = "text"
    execution_time: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Gradescope's shape again, only the fields read (what the store keeps)."""
        out: dict[str, Any] = {"score": self.score, "tests": [t.to_json() for t in self.tests]}
        if self.output:
            out["output"] = self.output
        if self.output_format != "text":
            out["output_format"] = self.output_format
        if self.execution_time is not None:
            out["execution_time"] = self.execution_time
        return out


class _Invalid(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _Invalid(f"{name} is not a number JSON allows")


def _number(value: Any, where: str, *, required: bool = False) -> float | None:
    if value is None:
        if required:
            raise _Invalid(f"{where} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Invalid(f"{where} must be a number, not {json.dumps(value)[:40]}")
    return float(value)


def _text(value: Any, where: str, *, most: int | None = None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Invalid(f"{where} must be text")
    if most is not None and len(value) > most:
        raise _Invalid(f"{where} is longer than {most} characters")
    return value


def _choice(value: Any, where: str, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in allowed:
        raise _Invalid(f"{where} is {json.dumps(value)[:40]}; it must be one of {', '.join(allowed)}")
    return str(value)


def _test(item: Any, index: int, default_visibility: str, default_format: str) -> GradedTest:
    where = f"tests[{index}]"
    if not isinstance(item, dict):
        raise _Invalid(f"{where} must be an object")
    number = item.get("number")
    return GradedTest(
        name=_text(item.get("name"), f"{where}.name", most=NAME_MAX) or f"Test {index + 1}",
        score=_number(item.get("score"), f"{where}.score"),
        max_score=_number(item.get("max_score"), f"{where}.max_score"),
        status=_choice(item.get("status"), f"{where}.status", STATUSES, ""),
        output=_text(item.get("output"), f"{where}.output"),
        output_format=_choice(item.get("output_format"), f"{where}.output_format", OUTPUT_FORMATS,
                              default_format),
        visibility=_choice(item.get("visibility"), f"{where}.visibility", VISIBILITIES,  # type: ignore[arg-type]
                           default_visibility),
        number=str(number) if isinstance(number, int | float | str) and not isinstance(number, bool) else "",
    )


def parse_results(data: bytes | None) -> Results | ResultsFailure:
    """results.json's bytes (None: the grader wrote none) as Results, or why they are not."""
    if data is None:
        return ResultsFailure("NoResults", "The grader wrote no /autograder/results/results.json: check "
                              "that run_autograder writes it (its output, in the grading log, says why)")
    if len(data) > RESULTS_MAX_BYTES:
        return ResultsFailure("ResultsTooLarge", f"results.json is {len(data):,} bytes, over the limit of "
                              f"1 MB ({RESULTS_MAX_BYTES:,} bytes): shorten the tests' output")
    try:
        parsed = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        return ResultsFailure("ResultsInvalid", "results.json is not UTF-8 text")
    except _Invalid as err:
        return ResultsFailure("ResultsInvalid", f"results.json is invalid: {err}")
    except ValueError as err:
        return ResultsFailure("ResultsInvalid", f"results.json is not valid JSON: {err}")
    try:
        return _results(parsed)
    except _Invalid as err:
        return ResultsFailure("ResultsInvalid", f"results.json is invalid: {err}")


def _results(parsed: Any) -> Results:
    if not isinstance(parsed, dict):
        raise _Invalid("it must be an object with score and/or tests")
    visibility = _choice(parsed.get("visibility"), "visibility", VISIBILITIES, "visible")
    test_format = _choice(parsed.get("test_output_format"), "test_output_format", OUTPUT_FORMATS, "text")
    tests_value = parsed.get("tests", [])
    if not isinstance(tests_value, list):
        raise _Invalid("tests must be a list")
    if len(tests_value) > TESTS_MAX:
        raise _Invalid(f"it has {len(tests_value)} tests; at most {TESTS_MAX}")
    tests = tuple(_test(item, i, visibility, test_format) for i, item in enumerate(tests_value))
    score = _number(parsed.get("score"), "score")
    if score is None:
        if not tests or any(t.score is None for t in tests):
            raise _Invalid("score is missing, and not every test has a score to add up")
        score = sum(t.score or 0.0 for t in tests)
    time_taken = _number(parsed.get("execution_time"), "execution_time")
    return Results(score=score, tests=tests, output=_text(parsed.get("output"), "output"),
                   output_format=_choice(parsed.get("output_format"), "output_format", OUTPUT_FORMATS,
                                         "text"),
                   execution_time=time_taken)


def shown_now(visibility: str, *, deadline_passed: bool, published: bool) -> bool:
    """Whether a test of this visibility is shown to the student now."""
    if visibility == "visible":
        return True
    if visibility == "after_due_date":
        return deadline_passed or published
    if visibility == "after_published":
        return published
    return False  # hidden: never


@dataclass(frozen=True)
class StudentView:
    """What the student sees of their results: the tests they may see, the total when allowed."""

    tests: tuple[GradedTest, ...]
    score: float | None  # None: held back (see `held_back`)
    held_back: int  # tests graded but not shown to them now
    output: str


def student_view(results: Results, *, deadline_passed: bool, published: bool) -> StudentView:
    shown = tuple(t for t in results.tests
                  if shown_now(t.visibility, deadline_passed=deadline_passed, published=published))
    held = len(results.tests) - len(shown)
    return StudentView(tests=shown, score=results.score if published or held == 0 else None,
                       held_back=held, output=results.output)


def score_words(score: float, max_score: float) -> str:
    """`7/10`, `7.5/10`: a score as the grade it becomes."""
    return f"{score:g}/{max_score:g}"


def published_summary(results: Results) -> dict[str, int]:
    """What the status may say of a grade's tests (the LMS gradebook's comment is made from it,
    docs/grading.md): how many tests the student is shown once the results are returned (every
    one but `hidden`), and how many of those passed. Never a hidden test's outcome."""
    shown = student_view(results, deadline_passed=True, published=True).tests
    return {"shown": len(shown), "passed": sum(1 for t in shown if t.passed)}
