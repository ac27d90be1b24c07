"""The CRDs in deploy/crds/ on a real kube-apiserver (1.20): validation, defaults, status
subresource, `kubectl explain` and printer columns. Real: the control plane and kubectl.
"""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kubectl import kubectl as run_kubectl
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import TEMPLATES, USERLANDS, Invalid, KubeClient
from userland.platform.model import models

REPO = Path(__file__).resolve().parents[2]

TEMPLATE: dict[str, Any] = {
    "apiVersion": "userland.dev/v1alpha1",
    "kind": "Template",
    "metadata": {"name": "vscode"},
    "spec": {
        "displayName": "VS Code",
        "routing": {"host": "ide.example.edu"},
        "port": 8080,
        "podSpec": {"containers": [{"name": "code", "image": "codercom/code-server:4.96.4"}]},
        "storage": {"size": "2Gi", "mountPath": "/home/coder"},
    },
}


def userland(user: Any, template: str = "vscode", name: str = "ul") -> dict[str, Any]:
    return {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
            "metadata": {"name": name}, "spec": {"user": user, "template": template}}


def template(**spec_changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(TEMPLATE)
    for key, value in spec_changes.items():
        if value is None:
            body["spec"].pop(key, None)
        else:
            body["spec"][key] = value
    return body


async def kubectl(plane: ControlPlane, *args: str) -> tuple[int, str, str]:
    return await run_kubectl(plane.kubeconfig, *args)


# --- accepted, with defaults -------------------------------------------------------------------


async def test_valid_template_and_userland_are_accepted_with_defaults(kube: KubeClient,
                                                                      namespace: str) -> None:
    created = await kube.create(TEMPLATES, namespace, template())
    assert created["spec"]["selfService"] is False
    assert created["spec"]["storage"]["reclaimPolicy"] == "Retain"
    assert "idleTimeout" not in created["spec"]
    parsed = models.Template.from_object(created)
    assert parsed.spec.storage == models.Storage(size="2Gi", mount_path="/home/coder")

    ul = await kube.create(USERLANDS, namespace, userland("Koba1t", name="vscode-koba1t"))
    assert ul["spec"] == {"user": "Koba1t", "template": "vscode", "suspended": False}
    assert models.Userland.from_object(ul).spec == models.UserlandSpec("koba1t", "vscode", False)

    # Defaults are applied on read too (stored objects are what the server returned).
    again = await kube.get(USERLANDS, namespace, "vscode-koba1t")
    assert again["spec"]["suspended"] is False


async def test_every_field_set_is_kept(kube: KubeClient, namespace: str) -> None:
    body = template(description="IDE", idleTimeout="1h30m", selfService=True,
                    routing={"host": "ide.example.edu", "pathPrefix": "/ide/"},
                    storage={"size": "500Mi", "mountPath": "/data", "storageClassName": None,
                             "reclaimPolicy": "Delete"})
    body["spec"]["podSpec"]["containers"][0]["args"] = ["--auth", "none"]
    body["spec"]["podSpec"]["securityContext"] = {"fsGroup": 1000}
    created = await kube.create(TEMPLATES, namespace, body)
    # Nothing pruned: every field of a fully written Template survives the schema.
    assert created["spec"] == body["spec"]
    spec = models.Template.from_object(created).spec
    assert (spec.idle_timeout_seconds, spec.self_service) == (5400, True)


@pytest.mark.parametrize("login", ["a", "A", "koba1t", "a-b-c", "x" * 39, "a1-" * 12 + "abc"])
async def test_valid_logins_are_accepted(kube: KubeClient, namespace: str, login: str) -> None:
    created = await kube.create(USERLANDS, namespace, userland(login))
    assert created["spec"]["user"] == login


# --- refused ---------------------------------------------------------------------------------


@pytest.mark.parametrize("login", ["-bad", "bad-", "a--b", "a" * 40, "has space", "", "a_b", "bad\n"])
async def test_invalid_logins_are_refused_naming_spec_user(kube: KubeClient, namespace: str,
                                                          login: str) -> None:
    with pytest.raises(Invalid) as caught:
        await kube.create(USERLANDS, namespace, userland(login))
    assert caught.value.status == 422
    assert "spec.user" in caught.value.message


@pytest.mark.parametrize(("spec", "field"), [
    ({"template": "vscode"}, "spec.user"),
    ({"user": "koba1t"}, "spec.template"),
    ({"user": "koba1t", "template": "VSCode"}, "spec.template"),
    ({"user": "koba1t", "template": "x" * 64}, "spec.template"),
    ({"user": 42, "template": "vscode"}, "spec.user"),
    ({"user": "koba1t", "template": "vscode", "suspended": "yes"}, "spec.suspended"),
])
async def test_invalid_userland_specs_are_refused(kube: KubeClient, namespace: str,
                                                  spec: dict[str, Any], field: str) -> None:
    body = userland("x")
    body["spec"] = spec
    with pytest.raises(Invalid) as caught:
        await kube.create(USERLANDS, namespace, body)
    assert caught.value.status == 422
    assert field in caught.value.message


async def test_userland_without_spec_is_refused(kube: KubeClient, namespace: str) -> None:
    body = userland("x")
    del body["spec"]
    with pytest.raises(Invalid) as caught:
        await kube.create(USERLANDS, namespace, body)
    assert "spec" in caught.value.message


@pytest.mark.parametrize(("changes", "field"), [
    ({"port": None}, "spec.port"),
    ({"podSpec": None}, "spec.podSpec"),
    ({"routing": None}, "spec.routing"),
    ({"routing": {}}, "spec.routing"),
    ({"routing": {"pathPrefix": "ide/"}}, "spec.routing.pathPrefix"),
    ({"port": 0}, "spec.port"),
    ({"port": 65536}, "spec.port"),
    ({"port": "8080"}, "spec.port"),
    ({"podSpec": {"containers": []}}, "spec.podSpec.containers"),
    ({"podSpec": {"volumes": []}}, "spec.podSpec.containers"),
    ({"storage": {"mountPath": "/home/coder"}}, "spec.storage.size"),
    ({"storage": {"size": "2Gi"}}, "spec.storage.mountPath"),
    ({"storage": {"size": "lots", "mountPath": "/x"}}, "spec.storage.size"),
    ({"storage": {"size": "2Gi", "mountPath": "/x", "reclaimPolicy": "Keep"}},
     "spec.storage.reclaimPolicy"),
    ({"idleTimeout": "2 hours"}, "spec.idleTimeout"),
    ({"idleTimeout": ""}, "spec.idleTimeout"),
    ({"selfService": "true"}, "spec.selfService"),
])
async def test_invalid_template_specs_are_refused(kube: KubeClient, namespace: str,
                                                  changes: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as caught:
        await kube.create(TEMPLATES, namespace, template(**changes))
    assert caught.value.status == 422
    assert field in caught.value.message


@pytest.mark.parametrize("duration", ["2h", "90m", "1h30m", "45s"])
async def test_go_durations_are_accepted(kube: KubeClient, namespace: str, duration: str) -> None:
    created = await kube.create(TEMPLATES, namespace, template(idleTimeout=duration))
    assert models.Template.from_object(created).spec.idle_timeout_seconds


# --- status subresource ------------------------------------------------------------------------


READY = {"type": "Ready", "status": "True", "reason": "Available", "message": "1 replica ready",
         "lastTransitionTime": "2026-11-22T03:00:00Z", "observedGeneration": 1}


async def test_userland_status_subresource(kube: KubeClient, namespace: str) -> None:
    await kube.create(USERLANDS, namespace, userland("koba1t", name="vscode-koba1t"))
    status = {"phase": "Ready", "conditions": [READY], "service": "vscode-koba1t-svc",
              "url": "https://ide.example.edu/", "observedGeneration": 1}
    patched = await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t",
                                     {"status": status, "spec": {"suspended": True}},
                                     subresource="status")
    assert patched["status"] == status
    assert patched["spec"]["suspended"] is False  # the status subresource ignores spec

    # ... and the main resource ignores status.
    patched = await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t",
                                     {"status": {"phase": "Failed"}})
    assert patched["status"]["phase"] == "Ready"

    with pytest.raises(Invalid) as caught:
        await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t",
                               {"status": {"phase": "Running"}}, subresource="status")
    assert "status.phase" in caught.value.message


async def test_empty_strings_are_accepted_as_upstream_kubernetes_does(kube: KubeClient,
                                                                      namespace: str) -> None:
    """A real 1.20 accepts "" in a custom resource; our build carries kube-openapi#230 so that
    ours does too (without it: 'must be of type string: "null"')."""
    created = await kube.create(TEMPLATES, namespace, template(displayName="", description=""))
    assert created["spec"]["displayName"] == ""
    await kube.create(USERLANDS, namespace, userland("koba1t", name="vscode-koba1t"))
    condition = {**READY, "message": "", "reason": "Ready"}
    patched = await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t",
                                     {"status": {"phase": "Ready", "conditions": [condition]}},
                                     subresource="status")
    assert patched["status"]["conditions"][0]["message"] == ""


async def test_sleep_fields_are_accepted_and_mistakes_refused_with_the_field_named(
        kube: KubeClient, namespace: str) -> None:
    schedule = {"timeZone": "Europe/Berlin", "wakeBefore": "10m",
                "lectures": [{"days": ["Mon", "Wed"], "start": "09:15", "end": "10:45"}]}
    created = await kube.create(TEMPLATES, namespace, template(
        idleTimeout="1h", activity={"backgroundPaths": ["/api/kernels*", "PUT /lab/api/workspaces*"],
                                    "quietFrameBytes": 26, "webSocketProtocol": "vscode"},
        schedule=schedule))
    assert created["spec"]["schedule"]["lectures"][0]["days"] == ["Mon", "Wed"]
    mistakes = [
        ({"activity": {"backgroundPaths": ["api/kernels"]}}, "spec.activity.backgroundPaths"),
        ({"activity": {"backgroundPaths": ["put /api/x"]}}, "spec.activity.backgroundPaths"),
        ({"activity": {"webSocketProtocol": "theia"}}, "spec.activity.webSocketProtocol"),
        ({"activity": {"quietFrameBytes": -1}}, "spec.activity.quietFrameBytes"),
        ({"schedule": {**schedule, "lectures": [{"days": ["Monday"], "start": "09:15", "end": "10:45"}]}},
         "spec.schedule.lectures"),
        ({"schedule": {**schedule, "lectures": [{"days": ["Mon"], "start": "9:15", "end": "10:45"}]}},
         "spec.schedule.lectures"),
        ({"schedule": {"timeZone": "UTC", "lectures": []}}, "spec.schedule.lectures"),
    ]
    for index, (spec, field) in enumerate(mistakes):
        body = template(**spec)
        body["metadata"]["name"] = f"wrong{index}"
        with pytest.raises(Invalid) as caught:
            await kube.create(TEMPLATES, namespace, body)
        assert field in caught.value.message, (spec, caught.value.message)
    await kube.create(USERLANDS, namespace, userland("koba1t", name="vscode-koba1t"))
    patched = await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t", {"status": {
        "phase": "Idle", "sleepingSince": "2026-11-23T09:00:00Z", "progress": ["Scheduled"]}},
        subresource="status")
    assert patched["status"]["progress"] == ["Scheduled"]
    with pytest.raises(Invalid) as caught:
        await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t", {"status": {"progress": ["Booted"]}},
                               subresource="status")
    assert "status.progress" in caught.value.message


async def test_template_status_subresource(kube: KubeClient, namespace: str) -> None:
    await kube.create(TEMPLATES, namespace, template())
    status = {"userlands": 3, "observedGeneration": 1, "conditions": [READY]}
    patched = await kube.merge_patch(TEMPLATES, namespace, "vscode", {"status": status},
                                     subresource="status")
    assert patched["status"] == status
    with pytest.raises(Invalid) as caught:
        await kube.merge_patch(TEMPLATES, namespace, "vscode",
                               {"status": {"conditions": [{"type": "Ready", "status": "Maybe",
                                                           "reason": "x", "message": "y"}]}},
                               subresource="status")
    assert "status.conditions" in caught.value.message


# --- kubectl: explain and printer columns -----------------------------------------------------


async def explain(plane: ControlPlane, field: str) -> str:
    # The API server publishes a new CRD's OpenAPI shortly after it is established.
    deadline = time.monotonic() + 30
    while True:
        code, out, err = await kubectl(plane, "explain", field)
        if code == 0 or time.monotonic() > deadline:
            assert code == 0, err
            return out
        await asyncio.sleep(0.5)


@pytest.mark.parametrize(("field", "expected"), [
    ("userland.spec.user", ["The student's GitHub login", "1-39 letters, digits or single hyphens"]),
    ("ul.spec.template", ["Name of the Template"]),
    ("userland.status.phase", ["Pending (not yet created)"]),
    ("template.spec.storage", ["reclaimPolicy", "mountPath", "storageClassName",
                               "Optional persistent storage"]),
    ("tpl.spec.podSpec", ["exactly as a Deployment's"]),
])
async def test_kubectl_explain(control_plane: ControlPlane, field: str,
                               expected: list[str]) -> None:
    out = " ".join((await explain(control_plane, field)).split())
    for text in expected:
        assert text in out


async def test_printer_columns_in_kubectl_get(control_plane: ControlPlane, kube: KubeClient,
                                              namespace: str) -> None:
    await kube.create(TEMPLATES, namespace, template())
    await kube.create(USERLANDS, namespace, userland("koba1t", name="vscode-koba1t"))
    await kube.merge_patch(USERLANDS, namespace, "vscode-koba1t",
                           {"status": {"phase": "Ready", "conditions": [READY],
                                       "url": "https://ide.example.edu/"}},
                           subresource="status")
    await kube.merge_patch(TEMPLATES, namespace, "vscode",
                           {"status": {"userlands": 1, "conditions": [READY]}},
                           subresource="status")

    code, out, err = await kubectl(control_plane, "get", "userlands", "-o", "wide", "-n", namespace)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "USER", "TEMPLATE", "PHASE", "READY", "SUSPENDED", "URL", "AGE"]
    assert row.split()[:7] == ["vscode-koba1t", "koba1t", "vscode", "Ready", "True", "false",
                               "https://ide.example.edu/"]

    code, out, err = await kubectl(control_plane, "get", "tpl", "-n", namespace)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "DISPLAY", "NAME", "PORT", "USERLANDS", "VALID", "AGE"]
    assert row.split()[:6] == ["vscode", "VS", "Code", "8080", "1", "True"]

    # The category lists both kinds.
    code, out, err = await kubectl(control_plane, "get", "classroom", "-n", namespace, "-o", "name")
    assert code == 0, err
    assert sorted(out.split()) == ["template.userland.dev/vscode", "userland.userland.dev/vscode-koba1t"]
    # ...and the singular name still means one Userland (a category named `userland` would
    # shadow it: `kubectl describe userland NAME` then fails with "only one resource").
    code, out, err = await kubectl(control_plane, "describe", "userland", "vscode-koba1t", "-n", namespace)
    assert code == 0, err
    assert "Kind:         Userland" in out


# --- the example Templates ---------------------------------------------------------------------


EXAMPLES = {path.name: yaml.safe_load(path.read_text())
            for path in (REPO / "deploy" / "course" / "template-vscode.yaml",
                         REPO / "deploy" / "examples" / "template-jupyterlab.yaml",
                         REPO / "deploy" / "examples" / "template-mariadb-phpmyadmin.yaml")}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
async def test_example_templates_are_accepted(kube: KubeClient, namespace: str, name: str) -> None:
    body = copy.deepcopy(EXAMPLES[name])
    body["metadata"].pop("namespace", None)
    created = await kube.create(TEMPLATES, namespace, body)
    assert created["spec"]["podSpec"] == body["spec"]["podSpec"]  # nothing pruned
    assert models.Template.from_object(created).spec.storage is not None
