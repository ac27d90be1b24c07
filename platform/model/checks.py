"""Check my work (docs/grading.md): before their deadline a student runs the grader's visible
tests on a snapshot of their current folder (pure).

- The ask is an annotation on the Assignment, one per student, written by the web UI:
  `check.userland.dev/<login>: "<RFC 3339 time> <template>"`. One key per student, so two
  students asking at once never overwrite each other; a newer ask replaces the older.
- What the student is shown of a check (`check_view`): the tests whose visibility is `visible`,
  never another (not `after_due_date`, `after_published` nor `hidden`), never a total (it would
  tell the others' score), never the harness's top-level output (it may speak of any test).
- A check is never a grade: its results are kept apart at the store and never read as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from userland.platform.model import naming
from userland.platform.model.gradescope import GradedTest, Results
from userland.platform.model.models import parse_time
from userland.platform.model.objects import rfc3339

CHECK_PREFIX = naming.ANNOTATION_CHECK_PREFIX
CHECK_STATES = ("Queued", "Running", "Checked", "Failed")


@dataclass(frozen=True)
class CheckAsk:
    login: str
    template: str
    at: datetime

    @property
    def env(self) -> str:
        return f"{self.template}/{self.login}"


def check_annotation(login: str, template: str, at: datetime) -> tuple[str, str]:
    """The annotation (key, value) that asks for a check of `login`'s environment of `template`."""
    return f"{CHECK_PREFIX}{login}", f"{rfc3339(at)} {template}"


def parse_checks(annotations: Mapping[str, Any]) -> dict[str, CheckAsk]:
    """Every student's last ask, by environment key; anything unreadable is left out."""
    found: dict[str, CheckAsk] = {}
    for key, value in annotations.items():
        if not key.startswith(CHECK_PREFIX) or not isinstance(value, str):
            continue
        login = key[len(CHECK_PREFIX):]
        parts = value.split()
        if len(parts) != 2 or not naming.is_valid_login(login) or not naming.is_valid_dns_label(parts[1]):
            continue
        at = parse_time(parts[0])
        if at is not None:
            ask = CheckAsk(login, parts[1], at)
            found[ask.env] = ask
    return found


def visible_tests(results: Results) -> tuple[GradedTest, ...]:
    return tuple(t for t in results.tests if t.visibility == "visible")


def check_summary(results: Results) -> dict[str, int]:
    """What the status may say of a check: how many visible tests, how many passed."""
    shown = visible_tests(results)
    return {"visible": len(shown), "passed": sum(1 for t in shown if t.passed)}


def check_words(entry: Any) -> str:
    """The line /me shows of a student's last check (their status entry's `check`)."""
    if not isinstance(entry, dict) or entry.get("state") not in CHECK_STATES:
        return ""
    state = entry["state"]
    if state == "Queued":
        return "Checking your work: waiting for a free slot."
    if state == "Running":
        return "Checking your work: the tests are running."
    if state == "Failed":
        return ("Your work could not be checked: " + str(entry.get("message") or "the check failed") + ".")
    visible, good = entry.get("visible"), entry.get("passed")
    if not isinstance(visible, int) or not isinstance(good, int) or visible == 0:
        return "Your work was checked: no test is shown before the deadline."
    return f"Your work was checked: {good} of {visible} visible test{'' if visible == 1 else 's'} passed."
