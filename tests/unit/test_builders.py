"""Pure builders against golden data (tests/unit/golden/*.json).

To accept an intended change of the desired objects, regenerate with
`UPDATE_GOLDEN=1 python -m pytest tests/unit/test_builders.py` and review the diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.golden import check_golden
from userland.operator.rules import builders
from userland.platform.model.models import Template, Userland
from userland.platform.model.settings import Settings

GOLDEN = Path(__file__).parent / "golden"


def _template(**spec: Any) -> Template:
    body = {
        "metadata": {"name": "vscode", "namespace": "classroom", "uid": "tpl-uid", "generation": 2},
        "spec": {
            "routing": {"host": "ide.example.edu"},
            "port": 8080,
            "podSpec": {
                "containers": [
                    {
                        "name": "code-server",
                        "image": "codercom/code-server:4",
                        "args": ["--auth", "none", "--user-data-dir", "/home/coder/${USER}"],
                        "env": [
                            {"name": "STUDENT", "value": "${USER}"},
                            {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                    }
                ],
            },
            **spec,
        },
    }
    return Template.from_object(body)


def _userland(user: str = "Koba1t", suspended: bool = False, restarted_at: Any = None) -> Userland:
    metadata: dict[str, Any] = {
        "name": f"vscode-{user.lower()}",
        "namespace": "classroom",
        "uid": "ul-uid",
        "generation": 1,
    }
    if restarted_at is not None:
        metadata["annotations"] = {"userland.dev/restartedAt": restarted_at, "other": "x"}
    return Userland.from_object(
        {"metadata": metadata, "spec": {"user": user, "template": "vscode", "suspended": suspended}}
    )


def _check_golden(name: str, actual: Any) -> None:
    check_golden(GOLDEN / f"{name}.json", actual)


def test_children_without_storage_golden() -> None:
    children = builders.desired_children(_userland(), _template())
    assert children.pvc is None
    _check_golden("deployment-vscode-koba1t", children.deployment)
    _check_golden("service-vscode-koba1t", children.service)


def test_children_with_storage_golden() -> None:
    template = _template(storage={"size": "2Gi", "mountPath": "/home/coder", "storageClassName": "fast"})
    children = builders.desired_children(_userland(), template)
    _check_golden("deployment-vscode-koba1t-storage", children.deployment)
    _check_golden("pvc-vscode-koba1t", children.pvc)


def test_init_containers_see_the_students_volume_too() -> None:
    """VS Code's Template writes the student's first settings from an init container: it needs
    the home volume mounted where the app sees it."""
    template = Template.from_object({
        "metadata": {"name": "vscode", "namespace": "classroom", "uid": "tpl-uid", "generation": 2},
        "spec": {"routing": {"host": "ide.example.edu"}, "port": 8080,
                 "storage": {"size": "2Gi", "mountPath": "/home/coder"},
                 "podSpec": {"initContainers": [{"name": "first-settings", "image": "x", "command": ["sh"]}],
                             "containers": [{"name": "code-server", "image": "x"}]}}})
    pod = builders.desired_children(_userland(), template).deployment["spec"]["template"]["spec"]
    mounts = [c["volumeMounts"] for c in (*pod["initContainers"], *pod["containers"])]
    assert mounts[0] == mounts[1] and [m["mountPath"] for m in mounts[0]] == ["/home/coder"]


def test_network_policy_golden() -> None:
    settings = Settings(gateway_namespace="userland-system")
    _check_golden("networkpolicy-vscode", builders.desired_network_policy(_template(), settings))


def test_substitution_does_not_touch_the_template() -> None:
    template = _template()
    builders.desired_deployment(_userland(), template)
    assert template.spec.pod_spec["containers"][0]["env"][0]["value"] == "${USER}"


def test_suspended_means_zero_replicas_and_a_new_hash() -> None:
    running = builders.desired_deployment(_userland(), _template())
    suspended = builders.desired_deployment(_userland(suspended=True), _template())
    assert suspended["spec"]["replicas"] == 0
    key = "userland.dev/spec-hash"
    assert running["metadata"]["annotations"][key] != suspended["metadata"]["annotations"][key]


def test_the_hash_is_stable_and_follows_the_template() -> None:
    a = builders.desired_deployment(_userland(), _template())
    b = builders.desired_deployment(_userland(), _template())
    c = builders.desired_deployment(_userland(), _template(port=9000))
    key = "userland.dev/spec-hash"
    assert a["metadata"]["annotations"][key] == b["metadata"]["annotations"][key]
    assert (
        builders.desired_service(_userland(), _template())["metadata"]["annotations"][key]
        != builders.desired_service(_userland(), _template(port=9000))["metadata"]["annotations"][key]
    )
    assert c["metadata"]["annotations"][key] == a["metadata"]["annotations"][key]  # port: Service only


def test_restart_annotation_goes_into_the_pod_template_golden() -> None:
    deployment = builders.desired_deployment(_userland(restarted_at="2026-11-23T09:00:00Z"), _template())
    _check_golden("deployment-vscode-koba1t-restarted", deployment)
    assert deployment["spec"]["template"]["metadata"]["annotations"] == {
        "userland.dev/restartedAt": "2026-11-23T09:00:00Z"
    }
    # Only the restart annotation travels; the Userland's other annotations stay on it.
    assert "other" not in deployment["metadata"].get("annotations", {})


def test_a_new_restart_changes_the_hash_and_the_same_one_does_not() -> None:
    key = "userland.dev/spec-hash"

    def hash_for(restarted_at: str | None) -> str:
        deployment = builders.desired_deployment(_userland(restarted_at=restarted_at), _template())
        return str(deployment["metadata"]["annotations"][key])

    never = hash_for(None)
    first = hash_for("2026-11-23T09:00:00Z")
    assert first != never
    assert hash_for("2026-11-23T09:00:00Z") == first
    assert hash_for("2026-11-23T09:05:00.123456+09:00") not in (never, first)


@pytest.mark.parametrize("value", [
    "yesterday", "", "2026-11-23", "2026-13-01T00:00:00Z", "2026-11-23T25:00:00Z", "2026-11-23T09:00:00",
    "2026-11-23T09:00:00Z\n", "2026-11-23T09:00:00+99:00", 12345, ["2026-11-23T09:00:00Z"],
])
def test_a_restart_annotation_that_is_not_a_timestamp_is_ignored(value: Any) -> None:
    # Anyone who may patch a Userland may set it: garbage must neither fail the Userland nor
    # travel into the pod template (nor restart it on every change of garbage).
    userland = _userland(restarted_at=value)
    assert userland.restarted_at is None
    deployment = builders.desired_deployment(userland, _template())
    assert "annotations" not in deployment["spec"]["template"]["metadata"]


@pytest.mark.parametrize(
    ("actual", "desired", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),  # extra fields (server defaults) ignored
        ({"a": 1}, {"a": 2}, False),
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2]}}, True),
        ({"a": [1, 2, 3]}, {"a": [1, 2]}, False),  # lists: same length
        ({"a": [{"x": 1, "y": 2}]}, {"a": [{"x": 1}]}, True),  # defaulted keys inside items
        ({"rollingUpdate": {"maxSurge": 1}}, {"rollingUpdate": None}, False),  # None: must be absent
        ({}, {"rollingUpdate": None}, True),
        ({"cpu": "1"}, {"cpu": 1}, True),  # quantities come back as strings
        ({"flag": 1}, {"flag": True}, False),
        ({"a": "x"}, {"a": {"b": 1}}, False),
    ],
)
def test_contains(actual: Any, desired: Any, expected: bool) -> None:
    assert builders.contains(actual, desired) is expected
