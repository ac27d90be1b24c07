"""The Assignment CRD on a real kube-apiserver (1.20): what it accepts, defaults and refuses,
`kubectl explain`, the printer columns, the status subresource; and every valid object the API
server keeps reads in the model (and the other way round for the refusals the schema can say)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.kubectl import kubectl
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import Invalid, KubeClient, Resource
from userland.platform.model.assignments import Assignment

ASSIGNMENTS = Resource("userland.dev", "v1alpha1", "assignments", "Assignment")
BODY: dict[str, Any] = {
    "apiVersion": "userland.dev/v1alpha1",
    "kind": "Assignment",
    "metadata": {"name": "week1"},
    "spec": {"title": "Week 1: Python basics", "templates": ["jupyterlab"],
             "source": {"url": "https://git.example.edu/course/week1.git", "ref": "main"},
             "path": "week1", "due": "2026-12-07T23:59:00Z"},
}


def body(**spec: Any) -> dict[str, Any]:
    copied = copy.deepcopy(BODY)
    copied["spec"].update(spec)
    return copied


async def test_an_assignment_is_accepted_with_defaults_and_reads_in_the_model(
        kube: KubeClient, namespace: str) -> None:
    created = await kube.create(ASSIGNMENTS, namespace, body(
        extensions={"bob": "2026-12-09T23:59:00Z"}, grades={"alice": {"grade": "A"}},
        students=["alice", "bob"]))
    assert created["spec"]["returnFeedback"] is False
    model = Assignment.from_object(created)
    assert model.spec.title == "Week 1: Python basics" and model.spec.students == ("alice", "bob")


@pytest.mark.parametrize(("what", "spec", "field"), [
    ("no path", {"path": None}, "spec.path"),
    ("a template that is no name", {"templates": ["Jupyter Lab"]}, "spec.templates"),
    ("no template", {"templates": []}, "spec.templates"),
    ("a student who is no login", {"students": ["-bob"]}, "spec.students"),
    ("a source that is not https", {"source": {"url": "git@github.com:c/w.git"}}, "spec.source.url"),
    ("a due that is no time", {"due": "friday"}, "spec.due"),
    ("a grade that is too long", {"grades": {"bob": {"grade": "x" * 51}}}, "spec.grades.bob.grade"),
])
async def test_invalid_assignments_are_refused_naming_the_field(kube: KubeClient, namespace: str, what: str,
                                                                spec: dict[str, Any], field: str) -> None:
    obj = body(**spec)
    for key, value in spec.items():
        if value is None:
            del obj["spec"][key]
    with pytest.raises(Invalid) as refused:
        await kube.create(ASSIGNMENTS, namespace, obj)
    assert field in refused.value.message, refused.value.message


async def test_status_is_a_subresource_and_keeps_per_student_entries(kube: KubeClient,
                                                                     namespace: str) -> None:
    await kube.create(ASSIGNMENTS, namespace, body())
    entry = {"user": "alice", "template": "jupyterlab", "state": "HandedOut", "files": 3}
    await kube.merge_patch(ASSIGNMENTS, namespace, "week1", {"status": {
        "phase": "Open", "handedOut": "1/1", "collected": "0/1", "students": [entry],
        "conditions": [{"type": "Ready", "status": "True", "reason": "HandedOut", "message": "ok"}]}},
        subresource="status")
    # A spec write through the main resource cannot touch the status.
    await kube.merge_patch(ASSIGNMENTS, namespace, "week1", {"status": {"phase": "Failed"}})
    got = await kube.get(ASSIGNMENTS, namespace, "week1")
    assert got["status"]["phase"] == "Open"
    assert got["status"]["students"] == [entry]


async def test_kubectl_get_and_explain(control_plane: ControlPlane, kube: KubeClient, namespace: str) -> None:
    await kube.create(ASSIGNMENTS, namespace, body())
    await kube.merge_patch(ASSIGNMENTS, namespace, "week1", {"status": {
        "phase": "Open", "handedOut": "28/30", "collected": "0/30"}}, subresource="status")
    code, out, err = await kubectl(control_plane.kubeconfig, "get", "asg", "-n", namespace)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "TITLE", "DUE", "HANDED", "OUT", "COLLECTED", "PHASE", "AGE"]
    assert row.split()[:9] == ["week1", "Week", "1:", "Python", "basics", "2026-12-07T23:59:00Z", "28/30",
                               "0/30", "Open"]
    code, out, err = await kubectl(control_plane.kubeconfig, "get", "classroom", "-n", namespace,
                                   "-o", "name")
    assert code == 0, err
    assert "assignment.userland.dev/week1" in out.split()
    for field, words in (("assignment.spec.path", "relative to the Template's storage mountPath"),
                         ("asg.spec.source.tokenSecret", "never reaches a student's environment"),
                         ("assignment.spec.extensions", "Their copy is taken at their own deadline")):
        code, out, err = await kubectl(control_plane.kubeconfig, "explain", field)
        assert code == 0, err
        assert words in " ".join(out.split())
