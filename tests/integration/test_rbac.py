"""The RBAC in deploy/rbac/ on a real API server: what each ServiceAccount may and may not do.

Real: the control plane (RBAC authorizer), kubectl (`auth can-i --as=...`, impersonation by
the cluster-admin kubeconfig), and the ServiceAccounts' own bearer tokens (the token file
entries in tests/conftest.py) for a few real requests.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from userland.local.controlplane import ControlPlane
from userland.platform.kube import DEPLOYMENTS, PODS, TEMPLATES, USERLANDS, KubeClient, PermanentError

REPO = Path(__file__).resolve().parents[2]
KUBECTL = "/usr/bin/kubectl"
SYSTEM = "userland-system"
CLASSROOM = "classroom"  # any namespace: the roles are cluster-wide


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
    # web: manages Userlands, reads the rest; never Templates, Deployments or Pods.
    ("web", "create", "userlands.userland.dev", "", CLASSROOM, True),
    ("web", "delete", "userlands.userland.dev", "", CLASSROOM, True),
    ("web", "patch", "userlands.userland.dev", "", CLASSROOM, True),
    ("web", "update", "userlands.userland.dev", "", CLASSROOM, True),
    ("web", "watch", "userlands.userland.dev", "", CLASSROOM, True),
    ("web", "patch", "userlands.userland.dev", "status", CLASSROOM, False),
    ("web", "list", "templates.userland.dev", "", CLASSROOM, True),
    ("web", "create", "templates.userland.dev", "", CLASSROOM, False),
    ("web", "patch", "templates.userland.dev", "", CLASSROOM, False),
    ("web", "update", "templates.userland.dev", "", CLASSROOM, False),
    ("web", "delete", "templates.userland.dev", "", CLASSROOM, False),
    ("web", "get", "deployments.apps", "", CLASSROOM, True),
    ("web", "create", "deployments.apps", "", CLASSROOM, False),
    ("web", "patch", "deployments.apps", "", CLASSROOM, False),
    ("web", "patch", "deployments.apps", "scale", CLASSROOM, False),
    ("web", "list", "pods", "", CLASSROOM, True),
    ("web", "create", "pods", "", CLASSROOM, False),
    ("web", "create", "pods", "exec", CLASSROOM, False),
    ("web", "list", "events", "", CLASSROOM, True),
    ("web", "create", "services", "", CLASSROOM, False),
    ("web", "get", "secrets", "", CLASSROOM, False),
    ("web", "create", "replicasets.apps", "", CLASSROOM, False),
    ("web", "create", "jobs.batch", "", CLASSROOM, False),
    # gateway: reads routing data, creates Userlands (selfService), nothing more.
    ("gateway", "list", "templates.userland.dev", "", CLASSROOM, True),
    ("gateway", "watch", "userlands.userland.dev", "", CLASSROOM, True),
    ("gateway", "watch", "services", "", CLASSROOM, True),
    ("gateway", "create", "userlands.userland.dev", "", CLASSROOM, True),
    ("gateway", "delete", "userlands.userland.dev", "", CLASSROOM, False),
    ("gateway", "patch", "userlands.userland.dev", "", CLASSROOM, False),
    ("gateway", "patch", "templates.userland.dev", "", CLASSROOM, False),
    ("gateway", "create", "services", "", CLASSROOM, False),
    ("gateway", "get", "pods", "", CLASSROOM, False),
    ("gateway", "get", "secrets", "", CLASSROOM, False),
    # operator: owns the children, writes status, never Pods, Secrets or Userland specs.
    ("operator", "create", "deployments.apps", "", CLASSROOM, True),
    ("operator", "delete", "deployments.apps", "", CLASSROOM, True),
    ("operator", "patch", "deployments.apps", "status", CLASSROOM, False),
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
    ("operator", "create", "templates.userland.dev", "", CLASSROOM, False),
    ("operator", "create", "events", "", CLASSROOM, True),
    ("operator", "delete", "events", "", CLASSROOM, False),
    ("operator", "create", "pods", "", CLASSROOM, False),
    ("operator", "get", "secrets", "", CLASSROOM, False),
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
    ("web", CLASSROOM): {
        "userlands.userland.dev": READ | {"create", "delete", "patch", "update"},
        "templates.userland.dev": READ, "pods": READ, "deployments.apps": READ, "events": READ,
    },
    ("gateway", CLASSROOM): {
        "userlands.userland.dev": READ | {"create"}, "templates.userland.dev": READ,
        "services": READ,
    },
    ("operator", CLASSROOM): {
        "userlands.userland.dev": READ | {"patch", "update"},
        "templates.userland.dev": READ | {"patch", "update"},
        "userlands.userland.dev/status": {"patch", "update"},
        "templates.userland.dev/status": {"patch", "update"},
        "userlands.userland.dev/finalizers": {"update"},
        "deployments.apps": CHILD, "services": CHILD, "persistentvolumeclaims": CHILD,
        "networkpolicies.networking.k8s.io": CHILD, "events": {"create", "patch"},
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
            resource, names, verbs = match.groups()
            assert names == "", f"{resource}: unexpected resourceNames {names}"
            granted.setdefault(resource, set()).update(verbs.split())
    assert granted == {**SELF_REVIEW, **GRANTS[(who, namespace)]}


# --- real requests with the ServiceAccounts' own tokens -----------------------------------------


@pytest.fixture
async def as_web(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    # "web-token" is the userland-web ServiceAccount in the API server's token file (conftest).
    path = rbac.write_kubeconfig(tmp_path / "web.kubeconfig", "web-token")
    async with await KubeClient.connect(str(path)) as client:
        yield client


@pytest.fixture
async def as_gateway(rbac: ControlPlane, tmp_path: Path) -> AsyncIterator[KubeClient]:
    path = rbac.write_kubeconfig(tmp_path / "gateway.kubeconfig", "gateway-token")
    async with await KubeClient.connect(str(path)) as client:
        yield client


USERLAND = {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
            "metadata": {"name": "vscode-koba1t"}, "spec": {"user": "koba1t", "template": "vscode"}}
DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "anything"},
    "spec": {"selector": {"matchLabels": {"app": "x"}},
             "template": {"metadata": {"labels": {"app": "x"}},
                          "spec": {"containers": [{"name": "x", "image": "busybox"}]}}},
}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "anything"},
       "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
TEMPLATE = {"apiVersion": "userland.dev/v1alpha1", "kind": "Template", "metadata": {"name": "evil"},
            "spec": {"routing": {"host": "x.example.edu"}, "port": 80,
                     "podSpec": {"containers": [{"name": "x", "image": "busybox"}]}}}


async def test_web_token_manages_userlands_but_cannot_run_pods(as_web: KubeClient,
                                                               namespace: str) -> None:
    created = await as_web.create(USERLANDS, namespace, USERLAND)
    assert created["metadata"]["name"] == "vscode-koba1t"
    await as_web.merge_patch(USERLANDS, namespace, "vscode-koba1t", {"spec": {"suspended": True}})
    for resource, body in ((DEPLOYMENTS, DEPLOYMENT), (PODS, POD), (TEMPLATES, TEMPLATE)):
        with pytest.raises(PermanentError) as caught:
            await as_web.create(resource, namespace, body)
        assert caught.value.status == 403, resource.kind
    await as_web.delete(USERLANDS, namespace, "vscode-koba1t")


async def test_gateway_token_creates_but_cannot_delete_userlands(as_gateway: KubeClient,
                                                                 namespace: str) -> None:
    await as_gateway.create(USERLANDS, namespace, USERLAND)
    listed = await as_gateway.list(USERLANDS, namespace)
    assert [u["metadata"]["name"] for u in listed["items"]] == ["vscode-koba1t"]
    with pytest.raises(PermanentError) as caught:
        await as_gateway.delete(USERLANDS, namespace, "vscode-koba1t")
    assert caught.value.status == 403
