"""A CourseRequest's course (platform/model/course_request.py): the same objects deploy/course/
describes, and the request's checks.

Golden: deploy/course/ rendered by kubectl's kustomize (the documented overlay for a second course,
tests/web/course_support.py) is what the operator makes for that course, but for what the request
itself adds to the namespace (the LMS link, the LMS-made instructor, the request's mark). Change
one without the other and this fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.web.course_support import render_course
from userland.platform.model import course_request as model
from userland.platform.model import naming
from userland.platform.model.lti_links import ANNOTATION_LINKS, ANNOTATION_LTI_INSTRUCTORS

SPEC: dict[str, Any] = {
    "course": "databases-2026", "title": "Example course",
    "template": {"namespace": "classroom", "name": "vscode"},
    "link": {"registration": "canvas", "context": "c-42", "title": "Databases 101",
             "memberships": "https://lms.example.edu/nrps", "lineitems": ""},
    "requestedBy": "koba1t",
}
ADDED_BY_THE_REQUEST = (ANNOTATION_LINKS, ANNOTATION_LTI_INSTRUCTORS, naming.ANNOTATION_COURSE_REQUEST)


def test_the_operators_course_is_the_kustomize_files_course() -> None:
    request = model.CourseRequest.parse(SPEC)
    rendered = render_course("databases-2026", instructors="koba1t", assistants="")
    source = next(d for d in rendered if d["kind"] == "Template")
    made = model.course_objects(request, "userland-system/req-1", "userland-system", source)
    namespace = made[0]
    annotations = namespace["metadata"]["annotations"]
    assert json.loads(annotations[ANNOTATION_LINKS]) == [{
        "registration": "canvas", "context": "c-42", "template": "vscode", "title": "Databases 101",
        "memberships": "https://lms.example.edu/nrps", "lineitems": ""}]
    assert annotations[ANNOTATION_LTI_INSTRUCTORS] == "koba1t"
    assert annotations[naming.ANNOTATION_COURSE_REQUEST] == "userland-system/req-1"
    for key in ADDED_BY_THE_REQUEST:
        del annotations[key]

    def key(doc: dict[str, Any]) -> tuple[str, str]:
        return (doc["kind"], doc["metadata"]["name"])

    assert sorted(made, key=key) == sorted(rendered, key=key)


def test_the_template_copy_keeps_its_name_labels_and_spec_only() -> None:
    source = {"apiVersion": "userland.dev/v1alpha1", "kind": "Template", "metadata": {
        "name": "lab", "namespace": "old", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"},
        "annotations": {"userland.dev/lti-contexts": "canvas/c-1"}}, "spec": {"port": 8888},
        "status": {"x": 1}}
    assert model.template_copy(source, "new") == {
        "apiVersion": "userland.dev/v1alpha1", "kind": "Template",
        "metadata": {"name": "lab", "namespace": "new", "labels": {"a": "b"}},
        "spec": {"port": 8888}}


@pytest.mark.parametrize(("name", "words"), [
    ("", "needs a name"),
    ("Databases", "only lower-case letters"),
    ("db_2026", "only lower-case letters"),
    ("-db", "only lower-case letters"),
    ("x" * 64, "at most 63"),
    ("kube-system", "reserved"),
    ("default", "reserved"),
])
def test_a_bad_name_says_what_to_change(name: str, words: str) -> None:
    with pytest.raises(model.InvalidRequest, match=words):
        model.CourseRequest.parse({**SPEC, "course": name})


def test_the_other_fields_are_checked() -> None:
    with pytest.raises(model.InvalidRequest, match="title"):
        model.CourseRequest.parse({**SPEC, "title": " "})
    with pytest.raises(model.InvalidRequest, match="Template"):
        model.CourseRequest.parse({**SPEC, "template": {"name": "vscode"}})
    with pytest.raises(model.InvalidRequest, match="LMS course"):
        model.CourseRequest.parse({**SPEC, "link": {"registration": "canvas"}})
    with pytest.raises(model.InvalidRequest, match="login"):
        model.CourseRequest.parse({**SPEC, "requestedBy": "not a login"})


def test_the_spec_round_trips() -> None:
    request = model.CourseRequest.parse(SPEC)
    assert model.CourseRequest.parse(request.spec()) == request


@pytest.mark.parametrize(("title", "name"), [
    ("Databases 101 (2026)", "databases-101-2026"),
    ("  Intro to CS  ", "intro-to-cs"),
    ("Ünïcode ✓", "n-code"),
    ("!!!", "course"),
    ("a" * 80, "a" * 63),
])
def test_the_suggested_name_comes_from_the_lms_title(title: str, name: str) -> None:
    assert model.suggested_name(title) == name
    assert model.course_name_problem(model.suggested_name(title)) == ""


def test_ready_keeps_its_transition_time_until_it_changes() -> None:
    request = model.CourseRequest.parse(SPEC)
    waiting = model.status_of(model.template_missing(request), 1, "t1", None)
    assert waiting["conditions"][0]["reason"] == "TemplateNotFound"
    again = model.status_of(model.name_taken("databases-2026"), 1, "t2", waiting)
    assert again["conditions"][0]["lastTransitionTime"] == "t1"
    ready = model.status_of(model.done(request, "https://userland.example.edu/"), 2, "t3", again)
    assert ready["conditions"][0]["lastTransitionTime"] == "t3"
    assert ready["address"] == "https://userland.example.edu/courses/databases-2026"
