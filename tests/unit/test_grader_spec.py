"""The grader of an Assignment (platform/model/grading.py): what a teacher may write, and the
words for what they may not. Table-driven: each bad grader and the sentence its condition says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from userland.platform.model.assignments import Source
from userland.platform.model.grading import (
    DEFAULT_COMMAND,
    DEFAULT_LIMITS,
    Grader,
    GraderProblem,
    GraderTests,
    parse_grader,
    quantity,
)

SOURCE = Source(url="https://git.example.edu/course/python.git", ref="main", sub_path="week1")
BASE: dict[str, Any] = {"image": "registry.example.edu/course/grader:1", "tests": {"path": "grading/week1"},
                        "maxScore": 10}


def grader(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    for key, value in changes.items():
        node = body
        *parents, leaf = key.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return body


def test_no_grader_is_none() -> None:
    assert parse_grader(None, SOURCE) is None


def test_the_smallest_grader_gets_gradescope_defaults() -> None:
    found = parse_grader(BASE, SOURCE)
    assert found == Grader(image="registry.example.edu/course/grader:1", tests=GraderTests("grading/week1"),
                           max_score=10.0)
    assert isinstance(found, Grader)
    assert found.command == DEFAULT_COMMAND == ("/autograder/run_autograder",)
    assert found.time_limit == 60
    assert dict(found.limits) == dict(DEFAULT_LIMITS)


def test_everything_a_grader_may_say() -> None:
    found = parse_grader(grader(command=["/bin/bash", "-c"], args=["cd /autograder/source && ./run.sh"],
                                env=[{"name": "LANG", "value": "C.UTF-8"}, {"name": "SEED"}],
                                resources={"limits": {"memory": "2Gi", "cpu": 2},
                                           "requests": {"cpu": "500m", "memory": "4Gi"}},
                                timeLimit="5m", maxScore=42.5), SOURCE)
    assert isinstance(found, Grader)
    assert found.command == ("/bin/bash", "-c")
    assert found.args == ("cd /autograder/source && ./run.sh",)
    assert found.env == (("LANG", "C.UTF-8"), ("SEED", ""))
    assert found.time_limit == 300
    assert found.max_score == 42.5
    # A request above its limit is the limit, as Kubernetes would have it.
    assert found.resources() == {
        "limits": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "1Gi"},
        "requests": {"cpu": "500m", "memory": "2Gi", "ephemeral-storage": "256Mi"}}


def test_tests_in_a_second_repository_follow_the_sources_rules() -> None:
    found = parse_grader(grader(tests={"repository": {"url": "https://git.example.edu/course/private.git",
                                                      "ref": "v1",
                                                      "tokenSecret": {"name": "course-github"}},
                                       "path": "week1"}),
                         Source(url="https://git.example.edu/course/python.git"))
    assert isinstance(found, Grader)
    assert found.tests.repository is not None
    assert found.tests.repository.token_secret is not None
    assert found.tests.repository.token_secret.name == "course-github"
    assert found.tests.path == "week1"
    assert not found.tests.same_repository


def test_the_same_repository_named_twice_is_a_path_of_it() -> None:
    found = parse_grader(grader(tests={"repository": {"url": SOURCE.url, "ref": "main"}, "path": "grading"}),
                         SOURCE)
    assert isinstance(found, Grader) and found.tests == GraderTests("grading")


@pytest.mark.parametrize(("changes", "source", "words"), [
    ({"image": None}, SOURCE, "spec.grader.image is required"),
    ({"image": "Not An Image"}, SOURCE, "spec.grader.image is required"),
    ({"maxScore": None}, SOURCE, "spec.grader.maxScore must be a number above 0"),
    ({"maxScore": 0}, SOURCE, "spec.grader.maxScore must be a number above 0"),
    ({"maxScore": True}, SOURCE, "spec.grader.maxScore must be a number above 0"),
    ({"tests": None}, SOURCE, "spec.grader.tests is required"),
    ({"tests": {"path": "week1/tests"}}, SOURCE, "overlaps the folder handed out to students"),
    ({"tests": {"path": "week1"}}, SOURCE, "overlaps the folder handed out to students"),
    ({"tests": {"path": "grading"}}, Source(url=SOURCE.url, sub_path="grading/week1"),
     "overlaps the folder handed out to students"),
    ({"tests": {"path": "grading"}}, Source(url=SOURCE.url), "is in the repository that is handed out whole"),
    ({"tests": {"path": "../secret"}}, SOURCE, "may not contain '..'"),
    ({"tests": {"path": "/etc"}}, SOURCE, "must be relative"),
    ({"tests": {"repository": {"url": "file:///etc"}}}, SOURCE, "must be an https://"),
    ({"tests": {"repository": {"url": "https://x.example/t.git", "subPath": "a"}}}, SOURCE,
     "repository.subPath is not used"),
    ({"timeLimit": "31m"}, SOURCE, "must be between 1s and 30m"),
    ({"timeLimit": "0s"}, SOURCE, "must be between 1s and 30m"),
    ({"timeLimit": 60}, SOURCE, "must be a duration such as 60s"),
    ({"timeLimit": "soon"}, SOURCE, "invalid duration"),
    ({"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, SOURCE,
     "the student's code runs in the grader and can read every variable"),
    ({"env": [{"name": "1X", "value": ""}]}, SOURCE, "without a variable name"),
    ({"command": "/autograder/run_autograder"}, SOURCE, "must be a list of at most"),
    ({"resources": {"limits": {"memory": "lots"}}}, SOURCE, "is not an amount"),
    ({"resources": {"limits": {"nvidia.com/gpu": "1"}}}, SOURCE, "cpu, memory and ephemeral-storage only"),
    ({"resources": {"limits": {"memory": "64Gi"}}}, SOURCE, "more than one copy's grading may take"),
    ({"resources": {"limits": {"cpu": "0"}}}, SOURCE, "is not an amount"),
])
def test_a_grader_written_wrong_says_what_to_do(changes: dict[str, Any], source: Source, words: str) -> None:
    found = parse_grader(grader(**changes), source)
    assert isinstance(found, GraderProblem), found
    assert found.reason == "InvalidGrader"
    assert found.message.startswith("The grader cannot run: ")
    assert words in found.message


def test_a_grader_that_is_not_an_object() -> None:
    found = parse_grader("grader:1", SOURCE)
    assert isinstance(found, GraderProblem) and "spec.grader must be an object" in found.message


@pytest.mark.parametrize(("text", "value"), [("1", 1.0), ("500m", 0.5), ("1Gi", 1024.0 ** 3),
                                             ("2M", 2e6), ("1.5Ki", 1536.0), ("x", None), ("1Zi", None)])
def test_quantities(text: str, value: float | None) -> None:
    assert quantity(text) == value
