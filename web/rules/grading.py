"""What the web UI shows of grading (docs/grading.md): each student's grading in the teacher's
table, and on /me what the student may see of their results (pure).

The teacher sees the state, the score, the reason of a failure and that their own grade wins over
the grader's; the student sees what the visibility rules allow (platform/model/gradescope.py
`student_view`), never a hidden test, and a total only when nothing is held back from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from userland.platform.model.checks import CHECK_STATES, check_words, visible_tests
from userland.platform.model.gradescope import (
    GradedTest,
    Results,
    StudentView,
    parse_results,
    score_words,
    student_view,
)
from userland.platform.model.models import parse_time

JSON = dict[str, Any]
CHECK_TOO_SOON = "You checked your work a moment ago. You can check it again in {seconds} s."
WORDS = {"Queued": "queued", "Running": "being graded", "Graded": "graded", "Failed": "not graded"}
BADGES = {"Queued": "phase-idle", "Running": "phase-starting", "Graded": "phase-ready",
          "Failed": "phase-failed"}
# What a student reads of a grading that failed: never the harness's words (they may name tests).
STUDENT_FAILED = "Your work could not be graded automatically; your teacher has been told."


@dataclass(frozen=True)
class GradingRow:
    """One student's grading in the teacher's table."""

    state: str
    words: str
    badge: str
    score: str = ""  # "7/10"
    line: str = ""  # queued: its place and when it should be graded
    reason: str = ""  # why it failed, in the grader's or the platform's words
    manual: str = ""  # staff's own grade, which wins


def grading_row(entry: Any, max_score: float | None) -> GradingRow | None:
    """The teacher's view of a status entry's `grading` (None: nothing graded or queued)."""
    if not isinstance(entry, dict) or entry.get("state") not in WORDS:
        return None
    state = str(entry["state"])
    score = entry.get("score")
    shown = score_words(float(score), max_score) if isinstance(score, int | float) and max_score else ""
    reason = str(entry.get("message") or entry.get("reason") or "") if state == "Failed" else ""
    line = ""
    if state == "Queued" and isinstance(entry.get("position"), int):
        line = f"number {entry['position']} in line"
        if isinstance(entry.get("estimatedAt"), str):
            line += f", graded by about {entry['estimatedAt'][11:16]} UTC"
    return GradingRow(state=state, words=WORDS[state], badge=BADGES[state], score=shown, reason=reason,
                      line=line,
                      manual=str(entry.get("manualGrade") or ""))


@dataclass(frozen=True)
class StudentResults:
    """What /me shows a student of their grading."""

    state: str  # Queued, Running, Graded, Failed
    words: str
    view: StudentView | None = None
    max_score: float | None = None
    manual: str = ""

    @property
    def score(self) -> str:
        if self.manual:
            return self.manual
        if self.view is None or self.view.score is None or not self.max_score:
            return ""
        return score_words(self.view.score, self.max_score)

    def test_words(self, test: GradedTest) -> str:
        if test.score is not None and test.max_score is not None:
            return f"{test.score:g}/{test.max_score:g}"
        return {"passed": "passed", "failed": "failed"}.get(test.status, "")


def student_results(entry: Any, stored: JSON | None, *, max_score: float | None, deadline_passed: bool,
                    published: bool) -> StudentResults | None:
    """The student's own results: their status entry's `grading`, and the whole results from the
    store (`stored`: {"summary", "results"}), filtered by the visibility rules."""
    if not isinstance(entry, dict) or entry.get("state") not in WORDS:
        return None
    state = str(entry["state"])
    manual = str(entry.get("manualGrade") or "") if published else ""
    if state != "Graded":
        words = STUDENT_FAILED if state == "Failed" else f"Your work is {WORDS[state]}."
        return StudentResults(state=state, words=words, max_score=max_score, manual=manual)

    results = parse_results(json.dumps((stored or {}).get("results")).encode()) if stored else None
    if not isinstance(results, Results):
        return StudentResults(state=state, words="Your work is graded.", max_score=max_score, manual=manual)
    view = student_view(results, deadline_passed=deadline_passed, published=published)
    return StudentResults(state=state, words="Your work is graded.", view=view, max_score=max_score,
                          manual=manual)


@dataclass(frozen=True)
class CheckLine:
    """Check my work on /me: the student's own deadline (the button shows while it is ahead; the
    server refuses after it anyway) and their last check in words."""

    deadline: str
    state: str = ""
    words: str = ""

    def open_at(self, now: float) -> bool:
        deadline = parse_time(self.deadline) if self.deadline else None
        return deadline is None or now < deadline.timestamp()

    @property
    def results(self) -> bool:
        return self.state == "Checked"


def check_line(spec: JSON, entry: JSON) -> CheckLine | None:
    """None: the assignment has no grader (nothing to check with)."""
    if not isinstance(spec.get("grader"), dict):
        return None
    found = entry.get("check")
    state = str(found.get("state")) if isinstance(found, dict) and found.get("state") in CHECK_STATES else ""
    return CheckLine(deadline=str(entry.get("deadline") or ""), state=state, words=check_words(found))


def check_results(stored: JSON | None) -> tuple[GradedTest, ...] | None:
    """The visible tests of a check's results (None: none readable). Never a hidden test, never a
    total, never the harness's own output."""
    results = parse_results(json.dumps((stored or {}).get("results")).encode()) if stored else None
    return visible_tests(results) if isinstance(results, Results) else None


BINS = 10
BAR_WIDTH = 200  # pixels of the longest bar


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    width: int  # the bar's length in pixels (the longest is BAR_WIDTH)
    last: bool = False  # the top bin includes its high end (a full score)

    @property
    def words(self) -> str:
        return f"{self.low:g} to {self.high:g}" + ("" if self.last else f" (below {self.high:g})")


@dataclass(frozen=True)
class Histogram:
    """The grader's scores of an assignment's graded copies, in ten equal ranges of the maximum."""

    bins: tuple[Bin, ...]
    graded: int
    mean: float
    median: float
    max_score: float

    @property
    def words(self) -> str:
        return (f"{self.graded} cop{'y' if self.graded == 1 else 'ies'} graded: mean {self.mean:.3g}, "
                f"median {self.median:.3g} of {self.max_score:g}")


def score_histogram(entries: Any, max_score: float | None) -> Histogram | None:
    """From the status's student entries (their `grading`): None when nothing is graded yet or
    the maximum score is unknown. A score outside 0..max (extra credit, a penalty) counts in the
    nearest end bin."""
    if not max_score or max_score <= 0:
        return None
    scores = sorted(float(g["score"]) for e in entries or [] if isinstance(e, dict)
                    and isinstance(g := e.get("grading"), dict) and g.get("state") == "Graded"
                    and isinstance(g.get("score"), int | float) and not isinstance(g.get("score"), bool))
    if not scores:
        return None
    step = max_score / BINS
    counts = [0] * BINS
    for score in scores:
        counts[min(BINS - 1, max(0, int(score // step)))] += 1
    top = max(counts)
    bins = tuple(Bin(low=round(i * step, 6), high=round((i + 1) * step, 6), count=count,
                     width=round(BAR_WIDTH * count / top), last=i == BINS - 1)
                 for i, count in enumerate(counts))
    middle = len(scores) // 2
    median = scores[middle] if len(scores) % 2 else (scores[middle - 1] + scores[middle]) / 2
    return Histogram(bins=bins, graded=len(scores), mean=sum(scores) / len(scores), median=median,
                     max_score=max_score)
