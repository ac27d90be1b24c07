"""The Assignment model (platform/model/assignments.py): what a teacher may write, and the words for
what they may not. Table-driven: each bad spec and the sentence its status condition carries."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from userland.platform.model import naming
from userland.platform.model.assignments import (
    Assignment,
    AssignmentSpec,
    Grade,
    relative_path,
    token_may_go_to,
)
from userland.platform.model.models import InvalidSpec

BASE: dict[str, Any] = {
    "title": "Week 1",
    "templates": ["jupyterlab"],
    "source": {"url": "https://git.example.edu/course/week1.git"},
    "path": "week1",
}


def spec(**changes: Any) -> dict[str, Any]:
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


def test_a_minimal_spec_reads_with_its_defaults() -> None:
    parsed = AssignmentSpec.parse(spec())
    assert parsed.templates == ("jupyterlab",)
    assert parsed.source.ref == "" and parsed.source.sub_path == "" and parsed.source.token_secret is None
    assert parsed.release is None and parsed.due is None and parsed.students is None
    assert parsed.extensions == () and parsed.grades == () and parsed.return_feedback is False


def test_deadlines_grades_and_logins_are_per_student_and_lowercase() -> None:
    parsed = AssignmentSpec.parse(spec(due="2026-12-07T23:59:00Z", students=["Alice", "bob", "alice"],
                                       extensions={"Bob": "2026-12-09T23:59:00+01:00"},
                                       grades={"ALICE": {"grade": " A ", "comment": "ok"}}))
    assert parsed.students == ("alice", "bob")
    assert parsed.deadline_of("alice") == datetime(2026, 12, 7, 23, 59, tzinfo=UTC)
    assert parsed.deadline_of("bob") == datetime(2026, 12, 9, 22, 59, tzinfo=UTC)
    assert parsed.grade_of("alice") == Grade("A", "ok")
    assert parsed.grade_of("carol").empty
    assert parsed.includes("bob") and not parsed.includes("carol")


@pytest.mark.parametrize(("text", "normalized"), [
    ("week1", "week1"), ("labs//week1/", "labs/week1"), ("./labs/./week1", "labs/week1"),
    ("Übung 1", "Übung 1"),
])
def test_folders_are_normalized(text: str, normalized: str) -> None:
    assert relative_path(text, "spec.path") == normalized


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no title", spec(title=None), "spec.title is required"),
    ("a blank title", spec(title="  "), "spec.title is required"),
    ("no template", spec(templates=[]), "spec.templates must list the Templates"),
    ("a template that is no name", spec(templates=["Jupyter Lab"]),
     "'Jupyter Lab', which is not a Template name"),
    ("no source", spec(source=None), "spec.source is required"),
    ("a source that is not a web address", spec(source={"url": "git@github.com:c/w.git"}),
     "must be an https:// (or http://) address"),
    ("a password in the address", spec(source={"url": "https://me:secret@git.example.edu/w.git"}),
     "put a token in a Secret"),
    ("a ref git would read as an option", spec(source__ref="--upload-pack=touch /tmp/x"),
     "is not a branch, tag or commit name"),
    ("a ref with ..", spec(source__ref="main..evil"), "is not a branch, tag or commit name"),
    ("a sub-folder that climbs out", spec(source__subPath="../other"), "may not contain '..'"),
    ("a bad token secret", spec(source__tokenSecret={"name": "Not_A_Name"}), "must name a Secret"),
    ("no folder", spec(path=None), "spec.path must be a folder name"),
    ("the root of the storage", spec(path="."), "spec.path must name a folder"),
    ("an absolute folder", spec(path="/etc"), "must be relative"),
    ("a folder that climbs out", spec(path="week1/../../other"), "may not contain '..'"),
    ("a control character", spec(path="week\n1"), "control character"),
    ("the manifest as folder", spec(path=".userland-handout.json"), "may not be .userland-handout.json"),
    ("a release that is no time", spec(release="tomorrow"), "'tomorrow' is not a time"),
    ("a due before the release", spec(release="2026-12-02T00:00:00Z", due="2026-12-01T00:00:00Z"),
     "spec.due must be after spec.release"),
    ("a student who is no login", spec(students=["alice", "-bob"]), "'-bob', which is not a GitHub login"),
    ("an extension for no login", spec(extensions={"no such": "2026-12-02T00:00:00Z"}),
     "which is not a GitHub login"),
    ("an extension that is no time", spec(extensions={"bob": "friday"}), "spec.extensions.bob 'friday'"),
    ("a grade too long", spec(grades={"bob": {"grade": "x" * 51}}), "at most 50 characters"),
    ("returnFeedback not a boolean", spec(returnFeedback="yes"), "must be true or false"),
]


@pytest.mark.parametrize(("what", "body", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_specs_say_what_to_write(what: str, body: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        AssignmentSpec.parse(body)
    assert words in str(refused.value)


def test_staff_actions_come_from_annotations_and_a_bad_one_is_ignored() -> None:
    obj = {"metadata": {"name": "week1", "namespace": "c", "annotations": {
        naming.ANNOTATION_HANDOUT_AT: "2026-12-01T10:00:00Z", naming.ANNOTATION_COLLECT_NOW: "soon"}},
        "spec": spec()}
    parsed = Assignment.from_object(obj)
    assert parsed.handout_at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parsed.collect_now is None and parsed.feedback_at is None


def test_an_assignment_name_must_be_a_dns_label() -> None:
    with pytest.raises(InvalidSpec, match="must be a DNS label"):
        Assignment.from_object({"metadata": {"name": "Week.1", "namespace": "c"}, "spec": spec()})


@pytest.mark.parametrize(("url", "annotation", "allowed"), [
    ("https://git.example.edu/course/week1.git", "https://git.example.edu/course/", True),
    ("https://git.example.edu/course/week1.git", "https://git.example.edu/course", True),
    ("https://git.example.edu/course/week1.git", "https://o.example/\nhttps://git.example.edu/", True),
    ("https://git.example.edu/course/week1.git", "https://a.example/, https://git.example.edu/course", True),
    ("https://git.example.edu/course/week1.git", "", False),
    ("https://git.example.edu/course-evil/x.git", "https://git.example.edu/course", False),
    ("https://git.example.edu.evil.com/course/x.git", "https://git.example.edu", False),
    ("https://git.example.edu@evil.com/course/x.git", "https://git.example.edu", False),
    ("http://git.example.edu/course/x.git", "https://git.example.edu/", False),
    ("https://git.example.edu/course/../../evil/x.git", "https://git.example.edu/course/", False),
    ("https://evil.com/x.git", "https://", False),
    ("https://evil.com/x.git", "*", False),
])
def test_a_token_goes_only_where_its_secret_allows(url: str, annotation: str, allowed: bool) -> None:
    assert token_may_go_to(url, annotation) is allowed
