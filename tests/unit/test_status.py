"""Status computation: phase, Ready condition, and when lastTransitionTime moves."""

from __future__ import annotations

from typing import Any

import pytest

from userland.operator.status import Problem, status_changed, template_status, userland_status
from userland.platform.models import Template, Userland

T0, T1 = "2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z"


def _userland(status: dict[str, Any] | None = None, suspended: bool = False) -> Userland:
    return Userland.from_object(
        {
            "metadata": {"name": "vscode-ann", "namespace": "c", "uid": "u", "generation": 4},
            "spec": {"user": "ann", "template": "vscode", "suspended": suspended},
            "status": status or {},
        }
    )


def _template(routing: dict[str, str]) -> Template:
    return Template.from_object(
        {
            "metadata": {"name": "vscode", "namespace": "c"},
            "spec": {
                "routing": routing,
                "port": 8080,
                "podSpec": {"containers": [{"name": "c", "image": "i"}]},
            },
        }
    )


AVAILABLE = {"status": {"availableReplicas": 1}}
STUCK = {
    "status": {
        "conditions": [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "too slow",
            }
        ]
    }
}


@pytest.mark.parametrize(
    ("deployment", "problem", "suspended", "phase", "ready", "reason"),
    [
        (None, None, False, "Starting", "False", "Starting"),
        ({"status": {}}, None, False, "Starting", "False", "Starting"),
        (AVAILABLE, None, False, "Ready", "True", "Available"),
        (AVAILABLE, None, True, "Suspended", "False", "Suspended"),
        (STUCK, None, False, "Failed", "False", "ProgressDeadlineExceeded"),
        (
            None,
            Problem("TemplateNotFound", "no", phase="Pending"),
            False,
            "Pending",
            "False",
            "TemplateNotFound",
        ),
        (AVAILABLE, Problem("InvalidPodSpec", "bad"), False, "Failed", "False", "InvalidPodSpec"),
    ],
)
def test_phase_and_ready(
    deployment: Any, problem: Problem | None, suspended: bool, phase: str, ready: str, reason: str
) -> None:
    status = userland_status(
        _userland(suspended=suspended),
        _template({"host": "ide.example.edu"}),
        deployment,
        problem,
        public_url="https://u.example.edu",
        now=T0,
    )
    assert status["phase"] == phase
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Ready", ready, reason)
    assert condition["observedGeneration"] == status["observedGeneration"] == 4
    assert status["service"] == "vscode-ann-svc"


def test_urls_for_host_and_path_routing() -> None:
    by_host = userland_status(
        _userland(),
        _template({"host": "ide.example.edu"}),
        None,
        None,
        public_url="http://localhost:8000",
        now=T0,
    )
    by_path = userland_status(
        _userland(),
        _template({"pathPrefix": "/ide/"}),
        None,
        None,
        public_url="https://u.example.edu/",
        now=T0,
    )
    # A host route serves each student on their own origin, on the platform's port.
    assert by_host["url"] == "http://ann.ide.example.edu:8000/"
    assert by_path["url"] == "https://u.example.edu/ide/"
    deployed = userland_status(_userland(), _template({"host": "IDE.example.edu"}), None, None,
                               public_url="https://u.example.edu", now=T0)
    assert deployed["url"] == "https://ann.ide.example.edu/"


def test_no_template_means_no_url_or_service() -> None:
    status = userland_status(
        _userland(), None, None, Problem("TemplateNotFound", "x", "Pending"), public_url="", now=T0
    )
    assert "url" not in status and "service" not in status


def test_transition_time_moves_only_when_the_value_changes() -> None:
    first = userland_status(
        _userland(), None, None, Problem("TemplateNotFound", "x", "Pending"), public_url="", now=T0
    )
    same_value = userland_status(
        _userland(first), _template({"host": "h"}), None, None, public_url="", now=T1
    )
    assert same_value["conditions"][0]["reason"] == "Starting"
    assert same_value["conditions"][0]["lastTransitionTime"] == T0
    flipped = userland_status(
        _userland(first), _template({"host": "h"}), AVAILABLE, None, public_url="", now=T1
    )
    assert flipped["conditions"][0]["lastTransitionTime"] == T1


def test_status_changed_ignores_nothing_that_matters() -> None:
    status = userland_status(_userland(), None, None, None, public_url="", now=T0)
    assert not status_changed(status, dict(status))
    assert status_changed({**status, "phase": "Ready"}, status)
    assert status_changed({}, status)


def test_template_status() -> None:
    obj = {"metadata": {"generation": 3}, "status": {}}
    ok = template_status(obj, 5, None, now=T0)
    assert ok["userlands"] == 5 and ok["observedGeneration"] == 3
    assert ok["conditions"][0]["status"] == "True"
    bad = template_status({**obj, "status": ok}, 5, Problem("InvalidPodSpec", "refused"), now=T1)
    assert bad["conditions"][0] == {
        "type": "Ready",
        "status": "False",
        "reason": "InvalidPodSpec",
        "message": "refused",
        "lastTransitionTime": T1,
        "observedGeneration": 3,
    }
