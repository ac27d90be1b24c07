"""The RBAC in deploy/rbac/ on a real API server: what each ServiceAccount may and may not do.

Real: the control plane (RBAC authorizer), kubectl (`auth can-i --as=...`, impersonation by
the cluster-admin kubeconfig), and the ServiceAccounts' own bearer tokens (the token file
entries in tests/conftest.py) for a few real requests. The web UI's role, bound per course
namespace, is tested in test_rbac_web.py.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import DEPLOYMENTS, TEMPLATES, USERLANDS, KubeClient, PermanentError

REPO = Path(__file__).resolve().parents[2]
KUBECTL = "/usr/bin/kubectl"
SYSTEM = "userland-system"
CLASSROOM = "classroom"  # any namespace: these roles are cluster-wide
# The web UI's role is bound per course namespace: tests/integration/test_rbac_web.py.


def sa(name: str) -> str:
    return f"system:serviceaccount:{SYSTEM}:userland-{name}"


def kubectl(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBECTL, f"--kubeconfig={plane.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    for args in (["apply", "-f", str(REPO / "deploy" / "namespace.yaml")],
                 ["apply", "-k", str(REPO / "deploy" / "rbac")]):
        result = kubectl(control_plane, *args)
        assert result.returncode == 0, result.stderr
    return control_plane


# who, verb, resource (with group), subresource, namespace, allowed
CAN_I = [
    # gateway: reads routing data, creates Userlands (selfService), patches them (last-activity
    # only, in code), nothing more.
    ("gateway", "list", "templates.userland.dev", "", CLASSROOM, True),
    ("gateway", "watch", "userlands.userland.dev", "", CLASSROOM, True),
    ("gateway", "watch", "services", "", CLASSROOM, True),
    ("gateway", "create", "userlands.userland.dev", "", CLASSROOM, True),
    ("gateway", "delete", "userlands.userland.dev", "", CLASSROOM, False),
    ("gateway", "patch", "userlands.userland.dev", "", CLASSROOM, True),
    ("gateway", "patch", "userlands.userland.dev", "status", CLASSROOM, False),
    ("gateway", "patch", "templates.userland.dev", "", CLASSROOM, False),
    ("gateway", "create", "services", "", CLASSROOM, False),
    ("gateway", "get", "pods", "", CLASSROOM, False),
    ("gateway", "get", "secrets", "", CLASSROOM, False),
    # LTI, in its namespace only: registrations read, their status written, the key Secret.
    ("gateway", "watch", "ltiregistrations.userland.dev", "", SYSTEM, True),
    ("gateway", "patch", "ltiregistrations.userland.dev", "status", SYSTEM, True),
    ("gateway", "patch", "ltiregistrations.userland.dev", "", SYSTEM, False),
    ("gateway", "create", "ltiregistrations.userland.dev", "", SYSTEM, True),  # Dynamic Registration
    ("gateway", "delete", "ltiregistrations.userland.dev", "", SYSTEM, False),
    ("gateway", "watch", "ltiregistrations.userland.dev", "", CLASSROOM, False),
    ("gateway", "list", "secrets", "", SYSTEM, False),
    ("gateway", "create", "secrets", "", SYSTEM, True),
    ("gateway", "delete", "secrets", "", SYSTEM, False),
    ("gateway", "update", "secrets", "", SYSTEM, False),
    # operator: owns the children, writes status, never Pods, Secrets or Userland specs.
    ("operator", "create", "deployments.apps", "", CLASSROOM, True),
    ("operator", "delete", "deployments.apps", "", CLASSROOM, True),
    ("operator", "patch", "deployments.apps", "status", CLASSROOM, False),
    ("operator", "create", "daemonsets.apps", "", CLASSROOM, True),
    ("operator", "patch", "daemonsets.apps", "status", CLASSROOM, False),
    ("operator", "create", "services", "", CLASSROOM, True),
    ("operator", "create", "persistentvolumeclaims", "", CLASSROOM, True),
    ("operator", "delete", "persistentvolumeclaims", "", CLASSROOM, True),
    ("operator", "create", "networkpolicies.networking.k8s.io", "", CLASSROOM, True),
    ("operator", "patch", "userlands.userland.dev", "status", CLASSROOM, True),
    ("operator", "update", "templates.userland.dev", "status", CLASSROOM, True),
    ("operator", "patch", "userlands.userland.dev", "", CLASSROOM, True),  # finalizer
    ("operator", "watch", "templates.userland.dev", "", CLASSROOM, True),
    ("operator", "create", "userlands.userland.dev", "", CLASSROOM, False),
    ("operator", "delete", "userlands.userland.dev", "", CLASSROOM, False),
    # Create only: the copy a CourseRequest asks for, in the course it makes (never a change).
    ("operator", "create", "templates.userland.dev", "", CLASSROOM, True),
    # An admin's new course (operator/course_requests.py): create, never change or delete.
    ("operator", "create", "namespaces", "", CLASSROOM, True),
    ("operator", "patch", "namespaces", "", CLASSROOM, False),
    ("operator", "delete", "namespaces", "", CLASSROOM, False),
    ("operator", "create", "rolebindings.rbac.authorization.k8s.io", "", CLASSROOM, True),
    ("operator", "patch", "rolebindings.rbac.authorization.k8s.io", "", CLASSROOM, False),
    ("operator", "delete", "rolebindings.rbac.authorization.k8s.io", "", CLASSROOM, False),
    ("operator", "bind", "clusterroles.rbac.authorization.k8s.io/userland-web", "", CLASSROOM, True),
    ("operator", "bind", "clusterroles.rbac.authorization.k8s.io/admin", "", CLASSROOM, False),
    ("operator", "bind", "clusterroles.rbac.authorization.k8s.io/cluster-admin", "", CLASSROOM, False),
    ("operator", "escalate", "clusterroles.rbac.authorization.k8s.io/userland-web", "", CLASSROOM, False),
    ("operator", "create", "clusterroles.rbac.authorization.k8s.io", "", CLASSROOM, False),
    ("operator", "patch", "courserequests.userland.dev", "status", SYSTEM, True),
    ("operator", "create", "courserequests.userland.dev", "", SYSTEM, False),
    # A Template's podSpec runs in every student's pod: the operator's token must not rewrite it.
    ("operator", "patch", "templates.userland.dev", "", CLASSROOM, False),
    ("operator", "update", "templates.userland.dev", "", CLASSROOM, False),
    ("operator", "delete", "templates.userland.dev", "", CLASSROOM, False),
    ("operator", "patch", "templates.userland.dev", "status", CLASSROOM, True),
    ("operator", "create", "events", "", CLASSROOM, True),
    ("operator", "delete", "events", "", CLASSROOM, False),
    # Assignments: worker Pods it owns, and a private source's token Secret (read, nothing else).
    ("operator", "create", "pods", "", CLASSROOM, True),
    ("operator", "delete", "pods", "", CLASSROOM, True),
    ("operator", "patch", "pods", "", CLASSROOM, False),
    ("operator", "create", "pods", "exec", CLASSROOM, False),
    ("operator", "get", "secrets", "", CLASSROOM, True),
    ("operator", "list", "secrets", "", CLASSROOM, False),
    ("operator", "watch", "secrets", "", CLASSROOM, False),
    ("operator", "patch", "assignments.userland.dev", "status", CLASSROOM, True),
    ("operator", "patch", "assignments.userland.dev", "", CLASSROOM, False),
    ("operator", "create", "leases.coordination.k8s.io", "", SYSTEM, True),
    ("operator", "update", "leases.coordination.k8s.io", "", SYSTEM, True),
    ("operator", "get", "leases.coordination.k8s.io", "", SYSTEM, True),
    ("operator", "delete", "leases.coordination.k8s.io", "", SYSTEM, False),
    ("operator", "create", "leases.coordination.k8s.io", "", CLASSROOM, False),
]


@pytest.mark.parametrize(("who", "verb", "resource", "subresource", "namespace", "allowed"), CAN_I,
                         ids=[f"{w}-{v}-{r.split('.')[0]}{'/' + s if s else ''}-{n}-{a}"
                              for w, v, r, s, n, a in CAN_I])
def test_can_i(rbac: ControlPlane, who: str, verb: str, resource: str, subresource: str,
               namespace: str, allowed: bool) -> None:
    args = ["auth", "can-i", verb, resource, "-n", namespace, f"--as={sa(who)}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    result = kubectl(rbac, *args)
    assert "doesn't have a resource type" not in result.stderr  # a typo must not read as "no"
    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stderr
    assert result.returncode == (0 if allowed else 1)


# Everything each ServiceAccount may do in a namespace (besides discovery and self-review):
# nothing more may creep in unnoticed.
SELF_REVIEW = {"selfsubjectaccessreviews.authorization.k8s.io": {"create"},
               "selfsubjectrulesreviews.authorization.k8s.io": {"create"}}
READ = {"get", "list", "watch"}
CHILD = READ | {"create", "patch", "update", "delete"}
GRANTS = {
    ("gateway", CLASSROOM): {
        # patch: userland.dev/last-activity, for sleeping and waking (proxy/activity.py).
        "userlands.userland.dev": READ | {"create", "patch"}, "templates.userland.dev": READ,
        "services": READ,
        "namespaces": READ,  # the courses' LMS links: where an LMS launch lands (proxy/lti_courses.py)
    },
    ("operator", CLASSROOM): {
        "userlands.userland.dev": READ | {"patch", "update"},
        "userlands.userland.dev/status": {"patch", "update"},
        "templates.userland.dev/status": {"patch", "update"},
        "userlands.userland.dev/finalizers": {"update"},
        "deployments.apps": CHILD, "services": CHILD, "persistentvolumeclaims": CHILD,
        "networkpolicies.networking.k8s.io": CHILD, "events": {"create", "patch"},
        # status.progress; and an assignment's worker Pods, made and removed (never changed).
        "pods": READ | {"create", "delete"},
        "secrets": {"get"},  # an assignment source's token, read when it is fetched
        "assignments.userland.dev": READ,
        "assignments.userland.dev/status": {"patch", "update"},
        "assignments.userland.dev/finalizers": {"update"},
        # A Template's image pullers (docs/capacity.md), owned by it.
        "daemonsets.apps": READ | {"create", "update", "delete"},
        "templates.userland.dev/finalizers": {"update"},
        # An admin's new course (CourseRequest): made, never changed; the one role it may bind.
        # Templates: read, and create (the copy), never changed.
        "templates.userland.dev": READ | {"create"}, "namespaces": {"get", "create"},
        "rolebindings.rbac.authorization.k8s.io": {"create"},
        "clusterroles.rbac.authorization.k8s.io[userland-web]": {"bind"},
        "courserequests.userland.dev": READ, "courserequests.userland.dev/status": {"patch", "update"},
    },
}
GRANTS[("operator", SYSTEM)] = {**GRANTS[("operator", CLASSROOM)],
                                "leases.coordination.k8s.io": {"get", "create", "update"}}
RULE_LINE = re.compile(r"^(\S+)\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$")


@pytest.mark.parametrize(("who", "namespace"), sorted(GRANTS), ids=lambda v: str(v))
def test_granted_rules_are_exactly_these(rbac: ControlPlane, who: str, namespace: str) -> None:
    result = kubectl(rbac, "auth", "can-i", "--list", "-n", namespace, f"--as={sa(who)}")
    assert result.returncode == 0, result.stderr
    granted: dict[str, set[str]] = {}
    for line in result.stdout.splitlines()[1:]:
        match = RULE_LINE.match(line)
        if match:  # resource rules; non-resource URL lines start with blanks
            resource, names, verbs = match.groups()  # resourceNames, if any, are part of the key
            granted.setdefault(f"{resource}[{names}]" if names else resource, set()).update(verbs.split())
    assert granted == {**SELF_REVIEW, **GRANTS[(who, namespace)]}


# --- real requests with the ServiceAccounts' own tokens -----------------------------------------


@pytest.fixture
async def as_gateway(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    path = rbac.write_kubeconfig(tmp_path / "gateway.kubeconfig", "gateway-token")
    async with await KubeClient.connect(str(path)) as client:
        yield client


USERLAND = {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
            "metadata": {"name": "vscode-koba1t"}, "spec": {"user": "koba1t", "template": "vscode"}}


async def test_gateway_token_creates_but_cannot_delete_userlands(as_gateway: KubeClient,
                                                                 namespace: str) -> None:
    await as_gateway.create(USERLANDS, namespace, USERLAND)
    listed = await as_gateway.list(USERLANDS, namespace)
    assert [u["metadata"]["name"] for u in listed["items"]] == ["vscode-koba1t"]
    with pytest.raises(PermanentError) as caught:
        await as_gateway.delete(USERLANDS, namespace, "vscode-koba1t")
    assert caught.value.status == 403


# --- the operator's least privilege, with its own token ----------------------------------------

TEMPLATE = {"apiVersion": "userland.dev/v1alpha1", "kind": "Template", "metadata": {"name": "evil"},
            "spec": {"routing": {"host": "x.example.edu"}, "port": 80,
                     "podSpec": {"containers": [{"name": "x", "image": "busybox"}]}}}


@pytest.fixture
async def as_operator(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    path = rbac.write_kubeconfig(tmp_path / "operator.kubeconfig", "operator-token")
    async with await KubeClient.connect(str(path)) as client:
        yield client


async def test_operator_token_cannot_rewrite_a_templates_pod_spec(
        as_operator: KubeClient, kube: KubeClient, namespace: str) -> None:
    await kube.create(TEMPLATES, namespace, TEMPLATE)
    assert (await as_operator.get(TEMPLATES, namespace, "evil"))["metadata"]["name"] == "evil"
    evil_pod = {"spec": {"podSpec": {"containers": [{"name": "x", "image": "attacker/miner"}]}}}
    with pytest.raises(PermanentError) as caught:
        await as_operator.merge_patch(TEMPLATES, namespace, "evil", evil_pod)
    assert caught.value.status == 403
    template = await kube.get(TEMPLATES, namespace, "evil")
    assert template["spec"]["podSpec"]["containers"][0]["image"] == "busybox"
    # Its status is the operator's to write.
    await as_operator.merge_patch(TEMPLATES, namespace, "evil", {"status": {"userlands": 0}},
                                  subresource="status")


async def test_operator_works_with_only_its_own_rbac(
        rbac: ControlPlane, tmp_path: Path, kube: KubeClient, namespace: str) -> None:
    """The real Controller with the operator's token: children, statuses, the storage finalizer."""
    import asyncio

    from tests.support import eventually
    from tests.support.objects import template_body, userland_body
    from userland.operator.controller import Controller
    from userland.platform.clients.kube import PVCS, SERVICES, NotFound
    from userland.platform.model.settings import Settings

    await kube.create(TEMPLATES, namespace, template_body(
        "scratch", storage={"size": "1Gi", "mountPath": "/work", "reclaimPolicy": "Delete"}))
    await kube.create(USERLANDS, namespace, userland_body("ann", "scratch"))
    path = rbac.write_kubeconfig(tmp_path / "operator.kubeconfig", "operator-token")
    client = await KubeClient.connect(str(path))
    controller = Controller(client, Settings(namespaces=(namespace,), public_url="https://u.example.edu"),
                            workers=2)
    tasks = [asyncio.create_task(controller.run_informers()), asyncio.create_task(controller.lead())]
    try:
        await asyncio.wait_for(controller.wait_synced(), 30)

        async def children() -> bool:
            for resource, name in ((DEPLOYMENTS, "scratch-ann"), (SERVICES, "scratch-ann-svc"),
                                   (PVCS, "scratch-ann-data")):
                await kube.get(resource, namespace, name)
            userland = await kube.get(USERLANDS, namespace, "scratch-ann")
            template = await kube.get(TEMPLATES, namespace, "scratch")
            return bool(userland.get("status", {}).get("phase") and template.get("status")
                        and userland["metadata"].get("finalizers"))

        async def check() -> bool:
            try:
                return await children()
            except NotFound:
                return False

        await eventually(check)
        await kube.delete(USERLANDS, namespace, "scratch-ann")

        async def userland_gone() -> bool:
            try:
                await kube.get(USERLANDS, namespace, "scratch-ann")
            except NotFound:
                return True
            return False

        await eventually(userland_gone)  # the finalizer was removed with the operator's token
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.wait_for(controller.events.flush(), 10)
        await controller.events.close()
        controller.queue.close()
        await client.close()
