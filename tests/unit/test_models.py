"""Parsing custom objects: anything a user can write gives a clear InvalidSpec, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from userland.platform.model.models import InvalidSpec, Template, Userland, parse_duration

POD = {"containers": [{"name": "c", "image": "i"}]}


def _template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "vscode", "namespace": "c"},
        "spec": {"routing": {"host": "IDE.example.edu"}, "port": 8080, "podSpec": POD, **spec},
    }


def test_a_full_template() -> None:
    template = Template.from_object(
        _template(storage={"size": "2Gi", "mountPath": "/home/coder"}, idleTimeout="1h30m", selfService=True)
    )
    assert template.spec.routing.host == "ide.example.edu"
    assert template.spec.storage is not None and template.spec.storage.reclaim_policy == "Retain"
    assert template.spec.idle_timeout_seconds == 5400
    assert template.spec.self_service is True


def test_activity_rules() -> None:
    template = Template.from_object(_template(activity={
        "backgroundPaths": ["/api/kernels*", "PUT /lab/api/workspaces*"], "quietFrameBytes": 26,
        "webSocketProtocol": "vscode"}))
    activity = template.spec.activity
    assert activity.background_paths == ("/api/kernels*", "PUT /lab/api/workspaces*")
    assert activity.quiet_frame_bytes == 26 and activity.websocket_protocol == "vscode"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"port": 0}, "spec.port"),
        ({"port": "8080"}, "spec.port"),
        ({"port": True}, "spec.port"),
        ({"podSpec": None}, "spec.podSpec"),
        ({"podSpec": {"containers": []}}, "containers"),
        ({"podSpec": {"containers": ["x"]}}, "containers"),
        ({"routing": {}}, "spec.routing"),
        ({"routing": {"pathPrefix": "ide"}}, "pathPrefix"),
        ({"storage": {"size": "lots", "mountPath": "/x"}}, "spec.storage.size"),
        ({"storage": {"size": "1Gi", "mountPath": "x"}}, "mountPath"),
        ({"storage": {"size": "1Gi", "mountPath": "/x", "reclaimPolicy": "Recycle"}}, "reclaimPolicy"),
        ({"storage": "big"}, "spec.storage"),
        ({"idleTimeout": "soon"}, "duration"),
        ({"selfService": "yes"}, "selfService"),
        ({"activity": {"backgroundPaths": ["api/x"]}}, "backgroundPaths"),
        ({"activity": {"backgroundPaths": ["put /api/x"]}}, "backgroundPaths"),
        ({"activity": {"webSocketProtocol": "theia"}}, "webSocketProtocol"),
    ],
)
def test_template_errors_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        Template.from_object(_template(**spec))


def test_template_names_must_be_dns_labels() -> None:
    body = _template()
    body["metadata"]["name"] = "VS.Code"
    with pytest.raises(InvalidSpec, match="DNS label"):
        Template.from_object(body)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"template": "vscode"}, "spec.user is required"),
        ({"user": "a--b", "template": "vscode"}, "spec.user"),
        ({"user": 7, "template": "vscode"}, "spec.user must be a string"),
        ({"user": "ann", "template": "Bad_Name"}, "spec.template"),
        ({"user": "ann", "template": "vscode", "suspended": "no"}, "suspended"),
    ],
)
def test_userland_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        Userland.from_object({"metadata": {"name": "x", "namespace": "c"}, "spec": spec})


def test_userland_logins_are_lowercased() -> None:
    userland = Userland.from_object({"metadata": {"name": "x"}, "spec": {"user": "Ann", "template": "t"}})
    assert userland.spec.user == "ann"


@pytest.mark.parametrize(("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
