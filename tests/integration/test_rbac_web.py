"""The web UI's RBAC on a real API server: bound per course, never more than it needs.

Real: the control plane's RBAC authorizer; deploy/rbac/ and a course rendered from
deploy/course/ with `kubectl kustomize` (through an overlay that sets the namespace, the
documented recipe for a second course) applied with kubectl; `kubectl auth can-i --as=...`;
and real requests with the web UI ServiceAccount's own bearer token (`web-token`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.web.course_support import apply_rbac, kubectl, make_course, web_client
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import (
    COURSE_REQUESTS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    PODS,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    PermanentError,
    Resource,
)

WEB = "system:serviceaccount:userland-system:userland-web"
SECRETS = Resource("", "v1", "secrets", "Secret")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


@pytest.fixture(scope="module")
def course(control_plane: ControlPlane) -> Iterator[str]:
    """A course namespace made from deploy/course/ (the Namespace object creates it)."""
    apply_rbac(control_plane)
    name = f"course-{uuid.uuid4().hex[:8]}"
    make_course(control_plane, name)
    yield name
    kubectl(control_plane, "delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def plain(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace that is not a course: no RoleBinding for the web UI."""
    name = f"plain-{uuid.uuid4().hex[:8]}"
    assert kubectl(control_plane, "create", "namespace", name).returncode == 0
    yield name
    kubectl(control_plane, "delete", "namespace", name, "--wait=false")


# verb, resource, subresource, where ("course" / "plain" / "" for cluster-scoped), allowed
CAN_I = [
    ("create", "userlands.userland.dev", "", "course", True),
    ("delete", "userlands.userland.dev", "", "course", True),
    ("patch", "userlands.userland.dev", "", "course", True),
    ("watch", "userlands.userland.dev", "", "course", True),
    ("update", "userlands.userland.dev", "", "course", False),  # merge patches are enough
    ("patch", "userlands.userland.dev", "status", "course", False),
    ("deletecollection", "userlands.userland.dev", "", "course", False),
    # Assignments: staff create and act on them. The status is the operator's, but for status.lti
    # (the LMS grade passback, web/lti_grades.py): the web UI may patch the status subresource,
    # and writes that one field only (in code; docs/decisions.md).
    ("create", "assignments.userland.dev", "", "course", True),
    ("patch", "assignments.userland.dev", "", "course", True),
    ("delete", "assignments.userland.dev", "", "course", True),
    ("patch", "assignments.userland.dev", "status", "course", True),
    ("update", "assignments.userland.dev", "status", "course", False),
    ("list", "assignments.userland.dev", "", "plain", False),
    ("list", "templates.userland.dev", "", "course", True),
    ("create", "templates.userland.dev", "", "course", False),
    ("patch", "templates.userland.dev", "", "course", False),
    ("update", "templates.userland.dev", "", "course", False),
    ("delete", "templates.userland.dev", "", "course", False),
    ("get", "deployments.apps", "", "course", True),
    ("create", "deployments.apps", "", "course", False),
    ("patch", "deployments.apps", "", "course", False),
    ("patch", "deployments.apps", "scale", "course", False),
    ("list", "pods", "", "course", True),
    ("create", "pods", "", "course", False),
    ("delete", "pods", "", "course", False),
    ("create", "pods", "exec", "course", False),
    ("get", "pods", "log", "course", False),
    ("list", "events", "", "course", True),
    ("create", "events", "", "course", True),
    ("patch", "events", "", "course", False),
    ("delete", "events", "", "course", False),
    ("create", "services", "", "course", False),
    ("get", "secrets", "", "course", False),
    ("list", "secrets", "", "course", False),
    ("get", "configmaps", "", "course", False),
    ("create", "serviceaccounts", "token", "course", False),
    ("create", "replicasets.apps", "", "course", False),
    ("create", "jobs.batch", "", "course", False),
    ("create", "rolebindings.rbac.authorization.k8s.io", "", "course", False),
    ("create", "roles.rbac.authorization.k8s.io", "", "course", False),
    ("create", "networkpolicies.networking.k8s.io", "", "course", False),
    ("list", "userlands.userland.dev", "", "plain", False),
    ("create", "userlands.userland.dev", "", "plain", False),
    ("list", "templates.userland.dev", "", "plain", False),
    ("list", "pods", "", "plain", False),
    ("create", "events", "", "plain", False),
    ("list", "namespaces", "", "", True),
    ("watch", "namespaces", "", "", True),
    ("get", "namespaces", "", "", True),
    ("create", "namespaces", "", "", False),
    ("patch", "namespaces", "", "", False),
    ("delete", "namespaces", "", "", False),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", "", "", False),
    ("list", "userlands.userland.dev", "", "", False),  # across all namespaces
]


@pytest.mark.parametrize(("verb", "resource", "subresource", "where", "allowed"), CAN_I,
                         ids=[f"{v}-{r.split('.')[0]}{'/' + s if s else ''}-{w or 'cluster'}-{a}"
                              for v, r, s, w, a in CAN_I])
def test_can_i(control_plane: ControlPlane, course: str, plain: str, verb: str, resource: str,
               subresource: str, where: str, allowed: bool) -> None:
    args = ["auth", "can-i", verb, resource, f"--as={WEB}"]
    if where:
        args += ["-n", {"course": course, "plain": plain}[where]]
    else:
        args.append("--all-namespaces")
    if subresource:
        args.append(f"--subresource={subresource}")
    result = kubectl(control_plane, *args)
    assert "doesn't have a resource type" not in result.stderr  # a typo must not read as "no"
    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stderr


SELF_REVIEW = {"selfsubjectaccessreviews.authorization.k8s.io": {"create"},
               "selfsubjectrulesreviews.authorization.k8s.io": {"create"}}
READ = {"get", "list", "watch"}
RULE_LINE = re.compile(r"^(\S+)\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$")


def _granted(plane: ControlPlane, namespace: str) -> dict[str, set[str]]:
    result = kubectl(plane, "auth", "can-i", "--list", "-n", namespace, f"--as={WEB}")
    assert result.returncode == 0, result.stderr
    granted: dict[str, set[str]] = {}
    for line in result.stdout.splitlines()[1:]:
        if (match := RULE_LINE.match(line)) is not None:
            resource, names, verbs = match.groups()
            assert names == "", f"{resource}: unexpected resourceNames {names}"
            granted.setdefault(resource, set()).update(verbs.split())
    return granted


def test_everything_granted_in_a_course_is_exactly_this(control_plane: ControlPlane, course: str) -> None:
    assert _granted(control_plane, course) == {
        **SELF_REVIEW,
        "userlands.userland.dev": READ | {"create", "delete", "patch"},
        "assignments.userland.dev": READ | {"create", "delete", "patch"},
        "assignments.userland.dev/status": {"patch"},  # status.lti: the LMS grade passback
        "templates.userland.dev": READ, "deployments.apps": READ, "pods": READ,
        # patch: its own course namespace only (the LMS links and LMS-made staff, web/lti_link.py).
        "events": READ | {"create"}, "namespaces": READ | {"patch"},
    }


def test_outside_a_course_only_namespaces_are_readable(control_plane: ControlPlane, plain: str) -> None:
    assert _granted(control_plane, plain) == {**SELF_REVIEW, "namespaces": READ}


def test_no_cluster_wide_binding_of_the_web_role(control_plane: ControlPlane, course: str) -> None:
    result = kubectl(control_plane, "get", "clusterrolebindings", "-o",
                     "jsonpath={range .items[*]}{.metadata.name}={.roleRef.name}{'\\n'}{end}")
    assert result.returncode == 0, result.stderr
    bound = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
    assert "userland-web" not in bound.values()
    assert bound.get("userland-web-courses") == "userland-web-courses"


# --- real requests with the web UI's own token ------------------------------------------------------


@pytest.fixture
async def as_web(control_plane: ControlPlane, course: str, tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with web_client(control_plane, tmp_path) as client:
        yield client


def _userland(user: str) -> dict[str, object]:
    return {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland", "metadata": {"name": f"vscode-{user}"},
            "spec": {"user": user, "template": "vscode"}}


DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "anything"},
    "spec": {"selector": {"matchLabels": {"app": "x"}},
             "template": {"metadata": {"labels": {"app": "x"}},
                          "spec": {"containers": [{"name": "x", "image": "busybox"}]}}},
}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "anything"},
       "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
ROLEBINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "escalate"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
               "subjects": [{"kind": "ServiceAccount", "name": "userland-web",
                             "namespace": "userland-system"}]}


async def test_what_the_web_ui_needs_is_allowed(as_web: KubeClient, course: str) -> None:
    created = await as_web.create(USERLANDS, course, _userland("alice"))
    patched = await as_web.merge_patch(USERLANDS, course, "vscode-alice", {
        "metadata": {"annotations": {"userland.dev/restartedAt": "2026-11-23T09:00:00Z"}},
        "spec": {"suspended": True}})
    assert patched["spec"]["suspended"] is True
    templates = (await as_web.list(TEMPLATES, course))["items"]
    assert [t["metadata"]["name"] for t in templates] == ["vscode"]  # the course's example Template
    for resource in (DEPLOYMENTS, PODS, EVENTS, USERLANDS):
        await as_web.list(resource, course)
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "vscode-alice.audit1"},
             "involvedObject": {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
                                "name": "vscode-alice", "namespace": course,
                                "uid": created["metadata"]["uid"]},
             "reason": "Restarted", "message": "Restart requested (by teacher in the web UI)",
             "type": "Normal",
             "source": {"component": "userland-web"}}
    await as_web.create(EVENTS, course, event)
    courses = (await as_web.list(NAMESPACES, label_selector="userland.dev/course=true"))["items"]
    mine = [n for n in courses if n["metadata"]["name"] == course]
    assert mine and mine[0]["metadata"]["annotations"]["userland.dev/instructors"] == "teacher"
    await as_web.delete(USERLANDS, course, "vscode-alice")


async def _refused(call: object) -> int:
    try:
        await call  # type: ignore[misc]
    except PermanentError as err:
        return err.status
    raise AssertionError("the request was allowed")


async def test_every_dangerous_write_is_refused(as_web: KubeClient, course: str, plain: str) -> None:
    template = (await as_web.list(TEMPLATES, course))["items"][0]
    evil_pod_spec = {"podSpec": {"containers": [{"name": "x", "image": "evil", "securityContext": {
        "privileged": True}}]}}
    refusals = {
        "create Deployment": as_web.create(DEPLOYMENTS, course, DEPLOYMENT),
        "create Pod": as_web.create(PODS, course, POD),
        "patch Template": as_web.merge_patch(TEMPLATES, course, template["metadata"]["name"],
                                             {"spec": evil_pod_spec}),
        "create RoleBinding": as_web.create(ROLEBINDINGS, course, ROLEBINDING),
        "read Secrets": as_web.list(SECRETS, course),
        "read a Secret": as_web.get(SECRETS, course, "anything"),
        # The LTI namespace: the tool's key Secret only (web/lti_sync.py), no other.
        "read another Secret of the LTI namespace": as_web.get(SECRETS, "userland-system", "anything"),
        "list the LTI namespace's Secrets": as_web.list(SECRETS, "userland-system"),
        # CourseRequests: asked for (create) and read back, never changed or listed.
        "list CourseRequests": as_web.list(COURSE_REQUESTS, "userland-system"),
        "delete a CourseRequest": as_web.delete(COURSE_REQUESTS, "userland-system", "anything"),
        "mark a CourseRequest made": as_web.merge_patch(
            COURSE_REQUESTS, "userland-system", "anything", {"status": {"address": "x"}},
            subresource="status"),
        "create a CourseRequest in a course": as_web.create(COURSE_REQUESTS, course, {
            "apiVersion": "userland.dev/v1alpha1", "kind": "CourseRequest", "metadata": {"name": "x"},
            "spec": {}}),
        "create Userland outside a course": as_web.create(USERLANDS, plain, _userland("mallory")),
        "list Userlands outside a course": as_web.list(USERLANDS, plain),
        "list Templates outside a course": as_web.list(TEMPLATES, plain),
        "list Userlands everywhere": as_web.list(USERLANDS, None),
        "label a namespace as a course": as_web.merge_patch(
            NAMESPACES, None, plain, {"metadata": {"labels": {"userland.dev/course": "true"}}}),
        "update a Userland's status": as_web.merge_patch(
            USERLANDS, course, "vscode-nobody", {"status": {"phase": "Ready"}}, subresource="status"),
    }
    statuses = {what: await _refused(call) for what, call in refusals.items()}
    assert statuses == dict.fromkeys(refusals, 403)
