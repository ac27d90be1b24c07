"""The grading queue: one per operator, fair between courses, bounded (pure; docs/grading.md).

Every Assignment's reconcile tells the queue how many of its copies wait to be graded; the queue
answers how many grading Pods it may start now. At most `limit` grading Pods run at once (the
setting USERLAND_GRADING_CONCURRENCY), shared between the courses (namespaces) that have copies
waiting by max-min fairness: each course gets an equal share, a course that needs less than its
share leaves the rest to the others, and none waits for another to finish. So a course of 500
due at midnight and one of 20 due at the same moment both start at once, and the small one is
done first. Within a course, its assignments share the course's part the same way.

The queue holds plain numbers in memory (what waits, per assignment); what runs is counted from
the grading Pods that exist (the caller's cache), so a new leader starts from the Pods it finds.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta


def fair_shares(demand: Mapping[str, int], capacity: int) -> dict[str, int]:
    """Max-min fair split of `capacity` slots among claimants wanting `demand` each (whole slots;
    a remainder goes to the claimants in name order, so the split is the same every time)."""
    shares = {name: 0 for name in demand}
    left = max(0, capacity)
    hungry = sorted(name for name, wanted in demand.items() if wanted > 0)
    while left > 0 and hungry:
        each = left // len(hungry)
        if each == 0:
            for name in hungry[:left]:
                shares[name] += 1
            break
        still = []
        for name in hungry:
            give = min(each, demand[name] - shares[name])
            shares[name] += give
            left -= give
            if shares[name] < demand[name]:
                still.append(name)
        hungry = still
    return shares


class GradingQueue:
    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        # (course, assignment) -> copies waiting for a grading Pod.
        self.waiting: dict[tuple[str, str], int] = {}

    def note(self, course: str, assignment: str, waiting: int) -> None:
        if waiting > 0:
            self.waiting[(course, assignment)] = waiting
        else:
            self.waiting.pop((course, assignment), None)

    def forget(self, course: str, assignment: str) -> None:
        self.waiting.pop((course, assignment), None)

    def grant(self, course: str, assignment: str, running: Mapping[tuple[str, str], int]) -> int:
        """How many grading Pods this assignment may start now, given the Pods running per
        (course, assignment) across the operator (its own included)."""
        keys = set(self.waiting) | {k for k, n in running.items() if n > 0}
        demand = {k: self.waiting.get(k, 0) + running.get(k, 0) for k in keys}
        by_course: dict[str, int] = {}
        for (name, _), wanted in demand.items():
            by_course[name] = by_course.get(name, 0) + wanted
        course_share = fair_shares(by_course, self.limit).get(course, 0)
        mine = {k: v for k, v in demand.items() if k[0] == course}
        share = fair_shares({k[1]: v for k, v in mine.items()}, course_share).get(assignment, 0)
        free = self.limit - sum(running.values())
        key = (course, assignment)
        return max(0, min(self.waiting.get(key, 0), share - running.get(key, 0),
                          free))

    def grant_checks(self, running: Mapping[tuple[str, str], int]) -> int:
        """How many checks (Check my work) may start now: they come after deadline gradings, so
        only slots no grading of any course waits for (their Pods count among the running)."""
        if any(n > 0 for n in self.waiting.values()):
            return 0
        return max(0, self.limit - sum(running.values()))


def line_estimates(waiting: int, slots: int, average: float | None,
                   now: datetime) -> list[tuple[int, datetime | None]]:
    """Each waiting copy's place in its assignment's line (1: next) and when it should be graded:
    `slots` copies at a time, each taking `average` seconds (None: no grading seen yet to tell)."""
    found: list[tuple[int, datetime | None]] = []
    for index in range(waiting):
        at = None if average is None else now + timedelta(seconds=(index // max(1, slots) + 1) * average)
        found.append((index + 1, at))
    return found
