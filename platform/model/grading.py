"""An Assignment's grader (`spec.grader`) as typed, frozen data (docs/grading.md).

A grader is a container run once per collected copy in Gradescope's layout: an image, its
command (default `/autograder/run_autograder`), literal environment values and resources (as a
Template's container), where the teacher's tests come from, a time limit and the maximum score.

`parse_grader` never raises for a grader a teacher wrote wrong: it returns a `GraderProblem` in
words they can act on, so a bad grader stops grading only, never the hand-out and the copies
(the operator shows it as the `Grading` condition). Checks here are for what a schema cannot
say: a tests folder that students would receive, a secret put where the student's code reads it,
a time limit past 30 minutes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from userland.platform.model.assignments import Source, relative_path
from userland.platform.model.models import InvalidSpec, parse_duration

DEFAULT_COMMAND = ("/autograder/run_autograder",)
TIME_LIMIT_DEFAULT = 60
TIME_LIMIT_MAX = 30 * 60
MAX_SCORE_MAX = 100_000.0
IMAGE_MAX = 512
ENV_MAX = 50
ARG_MAX = 50
TEXT_MAX = 4096
# What a grader gets when it names no resources: PrairieLearn's external graders have 2 GiB;
# one CPU is what a deadline's worth of copies can share on a small node.
DEFAULT_LIMITS = (("cpu", "1"), ("memory", "1Gi"), ("ephemeral-storage", "1Gi"))
DEFAULT_REQUESTS = (("cpu", "250m"), ("memory", "256Mi"), ("ephemeral-storage", "256Mi"))
# Past these a single copy's grading takes a node: refused in words rather than left Pending.
LIMIT_CAPS = {"cpu": 4.0, "memory": 8 * 1024.0 ** 3, "ephemeral-storage": 10 * 1024.0 ** 3}
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
_QUANTITY_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?$")
_UNITS = {None: 1.0, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3, "Ti": 1024.0 ** 4}
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMAGE_RE = re.compile(r"^[a-z0-9]([a-z0-9._/:@-]*[a-zA-Z0-9])?$")


def grade_version(copy_sha256: str, tests_key: str) -> str:
    """What makes a grading the same: this copy (its receipt's digest) with these tests (their key
    at the store, a commit and folder). A copy is graded once per version unless a regrade is asked."""
    return hashlib.sha256(f"{copy_sha256}\0{tests_key}".encode()).hexdigest()


def quantity(text: str) -> float | None:
    """A Kubernetes quantity as a number (cores, bytes), or None when it is not one."""
    match = _QUANTITY_RE.fullmatch(text)
    if not match:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class GraderProblem:
    """Why the grader cannot run, in words a teacher can act on (the Grading condition)."""

    message: str
    reason: str = "InvalidGrader"


@dataclass(frozen=True)
class GraderTests:
    """Where the teacher's tests come from: a folder of the assignment's own repository (at the
    commit handed out) that is never handed out, or a second repository (`repository` set)."""

    path: str
    repository: Source | None = None

    @property
    def same_repository(self) -> bool:
        return self.repository is None


@dataclass(frozen=True)
class Grader:
    image: str
    tests: GraderTests
    max_score: float
    command: tuple[str, ...] = DEFAULT_COMMAND
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    limits: tuple[tuple[str, str], ...] = DEFAULT_LIMITS
    requests: tuple[tuple[str, str], ...] = DEFAULT_REQUESTS
    time_limit: int = TIME_LIMIT_DEFAULT

    def resources(self) -> dict[str, dict[str, str]]:
        return {"limits": dict(self.limits), "requests": dict(self.requests)}


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > ARG_MAX or \
            not all(isinstance(v, str) and len(v) <= TEXT_MAX for v in value):
        raise InvalidSpec(f"{where} must be a list of at most {ARG_MAX} strings, such as "
                          "[/autograder/run_autograder]")
    return tuple(value)


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > ENV_MAX:
        raise InvalidSpec(f"spec.grader.env must be a list of at most {ENV_MAX} {{name, value}} pairs")
    pairs: dict[str, str] = {}
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or \
                not _ENV_NAME_RE.fullmatch(item["name"]):
            raise InvalidSpec("spec.grader.env has an entry without a variable name such as LANG")
        name = item["name"]
        if "valueFrom" in item:
            raise InvalidSpec(
                f"spec.grader.env.{name} takes its value from elsewhere (valueFrom): the student's code "
                "runs in the grader and can read every variable, so a grader gets literal values only. "
                "Put no secret there; give the tests what they need in the tests folder instead")
        text = item.get("value", "")
        if not isinstance(text, str) or len(text) > TEXT_MAX:
            raise InvalidSpec(f"spec.grader.env.{name} must be text of at most {TEXT_MAX} characters")
        pairs[name] = text
    return tuple(pairs.items())


def _resources(value: Any) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    if value is None:
        return DEFAULT_LIMITS, DEFAULT_REQUESTS
    if not isinstance(value, dict) or set(value) - {"limits", "requests"}:
        raise InvalidSpec("spec.grader.resources must have limits and/or requests, as a container's")
    found: dict[str, dict[str, str]] = {}
    for part in ("limits", "requests"):
        given = value.get(part) or {}
        if not isinstance(given, dict):
            raise InvalidSpec(f"spec.grader.resources.{part} must map cpu, memory, ephemeral-storage "
                              "to quantities")
        merged = dict(DEFAULT_LIMITS if part == "limits" else DEFAULT_REQUESTS)
        for name, amount in given.items():
            if name not in RESOURCE_NAMES:
                raise InvalidSpec(f"spec.grader.resources.{part} names {str(name)[:40]!r}; a grader has "
                                  "cpu, memory and ephemeral-storage only")
            text = str(amount) if isinstance(amount, int | float) and not isinstance(amount, bool) else amount
            if not isinstance(text, str) or quantity(text) is None or quantity(text) == 0:
                raise InvalidSpec(f"spec.grader.resources.{part}.{name} {str(amount)[:40]!r} is not an "
                                  "amount: write a number and a unit such as 1Gi (memory, disk) or "
                                  "500m (CPU)")
            merged[name] = text
        found[part] = merged
    limits, requests = found["limits"], found["requests"]
    for name in RESOURCE_NAMES:
        most = quantity(limits[name]) or 0.0
        if most > LIMIT_CAPS[name]:
            raise InvalidSpec(f"spec.grader.resources.limits.{name} {limits[name]} is more than one copy's "
                              f"grading may take (at most {_cap_words(name)})")
        if (quantity(requests[name]) or 0.0) > most:
            requests[name] = limits[name]  # a request above the limit is the limit, as Kubernetes says
    return tuple(limits.items()), tuple(requests.items())


def _cap_words(name: str) -> str:
    return {"cpu": "4 CPUs", "memory": "8Gi", "ephemeral-storage": "10Gi"}[name]


def _tests(value: Any, source: Source) -> GraderTests:
    if not isinstance(value, dict):
        raise InvalidSpec("spec.grader.tests is required: the folder of your repository that holds the "
                          "tests (path), or another repository (repository: url, ref) with them")
    if set(value) - {"path", "repository"}:
        raise InvalidSpec("spec.grader.tests has path and repository only")
    repository = value.get("repository")
    if repository is not None:
        other = Source.parse(repository)
        path = relative_path(value.get("path", ""), "spec.grader.tests.path", allow_empty=True)
        if other.sub_path:
            raise InvalidSpec("spec.grader.tests.repository.subPath is not used: name the folder in "
                              "spec.grader.tests.path")
        if (other.url, other.ref) == (source.url, source.ref):
            repository = None  # the same repository and ref: the same rules as a path of it
        else:
            return GraderTests(path=path, repository=other)
    path = relative_path(value.get("path"), "spec.grader.tests.path")
    handed = source.sub_path
    if not handed:
        raise InvalidSpec(
            f"spec.grader.tests.path {path!r} is in the repository that is handed out whole (spec.source has "
            "no subPath): students would receive the tests. Hand out one folder (spec.source.subPath) and "
            "keep the tests beside it, or keep the tests in another repository "
            "(spec.grader.tests.repository)")
    if path == handed or path.startswith(handed + "/") or handed.startswith(path + "/"):
        raise InvalidSpec(
            f"spec.grader.tests.path {path!r} overlaps the folder handed out to students "
            f"(spec.source.subPath {handed!r}): they would receive the tests. Move the tests to a folder "
            "beside it, such as grading/")
    return GraderTests(path=path)


def _max_score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_SCORE_MAX:
        raise InvalidSpec(f"spec.grader.maxScore must be a number above 0 (at most {MAX_SCORE_MAX:g}): "
                          "the score of a copy that passes every test")
    return float(value)


def _time_limit(value: Any) -> int:
    if value is None:
        return TIME_LIMIT_DEFAULT
    if not isinstance(value, str):
        raise InvalidSpec("spec.grader.timeLimit must be a duration such as 60s, 5m or 1m30s")
    seconds = parse_duration(value)
    if not 1 <= seconds <= TIME_LIMIT_MAX:
        raise InvalidSpec(f"spec.grader.timeLimit {value} must be between 1s and 30m: a copy's grading that "
                          "takes longer holds a place others wait for")
    return seconds


def parse_grader(value: Any, source: Source) -> Grader | GraderProblem | None:
    """The Assignment's grader, a problem in words, or None when it has none."""
    if value is None:
        return None
    try:
        if not isinstance(value, dict):
            raise InvalidSpec("spec.grader must be an object with image, tests and maxScore")
        image = value.get("image")
        if not isinstance(image, str) or not image or len(image) > IMAGE_MAX or \
                not _IMAGE_RE.fullmatch(image):
            raise InvalidSpec("spec.grader.image is required: the container image that runs your tests, "
                              "such as registry.example.edu/course/grader:1")
        command = _strings(value.get("command"), "spec.grader.command") or DEFAULT_COMMAND
        limits, requests = _resources(value.get("resources"))
        return Grader(
            image=image, tests=_tests(value.get("tests"), source),
            max_score=_max_score(value.get("maxScore")),
            command=command, args=_strings(value.get("args"), "spec.grader.args"), env=_env(value.get("env")),
            limits=limits, requests=requests, time_limit=_time_limit(value.get("timeLimit")))
    except InvalidSpec as err:
        return GraderProblem(f"The grader cannot run: {err}")
