"""CourseRequests (operator/course_requests.py) on the real control plane, the operator running as
its own ServiceAccount with deploy/rbac/ applied: so its least-privilege rules (create namespaces,
RoleBindings and the Template copy; `bind` on userland-web only) are what these tests exercise.
The test namespace plays the LTI namespace (where requests live) and the course copied from.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.operator.support import Cluster, OperatorRunner, eventually
from tests.web.course_support import apply_rbac
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import (
    COURSE_REQUESTS,
    NAMESPACES,
    NETWORK_POLICIES,
    ROLE_BINDINGS,
    TEMPLATES,
    Invalid,
    KubeClient,
    NotFound,
)
from userland.platform.model import naming
from userland.platform.model.lti_links import ANNOTATION_LINKS

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    apply_rbac(control_plane)
    return control_plane


@pytest.fixture
async def operator(run_operator: OperatorRunner, rbac: ControlPlane, namespace: str,
                   tmp_path: Path) -> AsyncIterator[None]:
    kubeconfig = rbac.write_kubeconfig(tmp_path / "operator.kubeconfig", "operator-token")
    extra = {"lti_namespace": namespace, "gateway_namespace": "userland-system"}
    async with run_operator(settings_extra=extra, kubeconfig=str(kubeconfig)):
        yield


@pytest.fixture
async def course_name(kube: KubeClient, namespace: str) -> AsyncIterator[str]:
    """The new course's name (its namespace), deleted after the test."""
    name = f"{namespace}-new"
    yield name
    with contextlib.suppress(NotFound):
        await kube.delete(NAMESPACES, None, name)


def request(name: str, course: str, namespace: str, template: str = "lab") -> JSON:
    return {"apiVersion": "userland.dev/v1alpha1", "kind": "CourseRequest", "metadata": {"name": name},
            "spec": {"course": course, "title": "Databases 101",
                     "template": {"namespace": namespace, "name": template},
                     "link": {"registration": "canvas", "context": "c-42", "title": "Databases 101 (LMS)"},
                     "requestedBy": "root-admin"}}


async def ready(kube: KubeClient, namespace: str, name: str, reason: str) -> JSON:
    found: JSON = {}

    async def check() -> bool:
        obj = await kube.get(COURSE_REQUESTS, namespace, name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        found.update(next((c for c in conditions if c["type"] == "Ready"), {}))
        return found.get("reason") == reason

    await eventually(check, timeout=30)
    return found


async def test_a_request_makes_the_course_linked(operator: None, cluster: Cluster, kube: KubeClient,
                                                 namespace: str, course_name: str) -> None:
    await cluster.create_template("lab", host="lab.test")
    await kube.create(COURSE_REQUESTS, namespace, request("r1", course_name, namespace))
    condition = await ready(kube, namespace, "r1", "Ready")
    address = f"https://userland.example.edu/courses/{course_name}"
    assert condition["status"] == "True" and address in condition["message"]
    assert (await kube.get(COURSE_REQUESTS, namespace, "r1"))["status"]["address"] == address
    made = await kube.get(NAMESPACES, None, course_name)
    assert made["metadata"]["labels"][naming.LABEL_COURSE] == "true"
    annotations = made["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_INSTRUCTORS] == "root-admin"
    assert annotations[naming.ANNOTATION_COURSE_TITLE] == "Databases 101"
    (link,) = json.loads(annotations[ANNOTATION_LINKS])
    assert (link["registration"], link["context"], link["template"]) == ("canvas", "c-42", "lab")
    binding = await kube.get(ROLE_BINDINGS, course_name, "userland-web")
    assert binding["roleRef"]["name"] == "userland-web"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "userland-web",
                                    "namespace": "userland-system"}]
    policies = {p["metadata"]["name"] for p in (await kube.list(NETWORK_POLICIES, course_name))["items"]}
    assert policies == {"default-deny-ingress", "userland-environments-egress"}
    copy = await kube.get(TEMPLATES, course_name, "lab")
    source = await kube.get(TEMPLATES, namespace, "lab")
    assert copy["spec"] == source["spec"]


async def test_a_name_taken_by_a_foreign_namespace_is_refused_and_left_alone(
        operator: None, cluster: Cluster, kube: KubeClient, namespace: str, course_name: str) -> None:
    await cluster.create_template("lab", host="lab.test")
    await kube.create(NAMESPACES, None, {"metadata": {"name": course_name, "labels": {"team": "other"}}})
    before = await kube.get(NAMESPACES, None, course_name)
    await kube.create(COURSE_REQUESTS, namespace, request("r2", course_name, namespace))
    condition = await ready(kube, namespace, "r2", "NameTaken")
    assert condition["status"] == "False"
    assert f"The name '{course_name}' is taken" in condition["message"]
    assert "another name" in condition["message"]
    after = await kube.get(NAMESPACES, None, course_name)
    assert after["metadata"] == before["metadata"]
    assert (await kube.list(ROLE_BINDINGS, course_name))["items"] == []
    assert (await kube.list(TEMPLATES, course_name))["items"] == []


async def test_a_missing_template_says_so(operator: None, kube: KubeClient, namespace: str,
                                          course_name: str) -> None:
    await kube.create(COURSE_REQUESTS, namespace, request("r3", course_name, namespace, template="nothere"))
    condition = await ready(kube, namespace, "r3", "TemplateNotFound")
    assert "'nothere'" in condition["message"] and "was not found" in condition["message"]
    with pytest.raises(NotFound):
        await kube.get(NAMESPACES, None, course_name)


async def test_bad_names_get_clear_errors(operator: None, kube: KubeClient, namespace: str) -> None:
    # Not a DNS label: the API server refuses the request itself (the CRD's pattern).
    with pytest.raises(Invalid):
        await kube.create(COURSE_REQUESTS, namespace, request("r4", "Databases_101", namespace))
    # A DNS label the cluster keeps for itself: the operator refuses it, in words.
    await kube.create(COURSE_REQUESTS, namespace, request("r5", "kube-mine", namespace))
    condition = await ready(kube, namespace, "r5", "Invalid")
    assert "reserved by the cluster" in condition["message"]
    with pytest.raises(NotFound):
        await kube.get(NAMESPACES, None, "kube-mine")
