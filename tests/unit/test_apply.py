"""The pure parts of writing children: why a child changed, whose it is, what a replace keeps."""

from __future__ import annotations

import copy
from typing import Any

from userland.operator.apply import Applied, change_cause, owner_conflict, replacement
from userland.operator.rules import builders
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland


def _userland(**annotations: str) -> Userland:
    return Userland.from_object({"metadata": {"name": "vscode-ann", "namespace": "c", "uid": "u-1",
                                              "annotations": annotations},
                                 "spec": {"user": "ann", "template": "vscode"}})


def _template(image: str = "ide:1") -> Template:
    return Template.from_object({"metadata": {"name": "vscode", "namespace": "c", "uid": "t-1"},
                                 "spec": {"routing": {"host": "ide.example.edu"}, "port": 8080,
                                          "podSpec": {"containers": [{"name": "ide", "image": image}]}}})


def _as_served(desired: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server hands it back: defaults added."""
    served = copy.deepcopy(desired)
    served["metadata"]["resourceVersion"] = "7"
    served["spec"]["revisionHistoryLimit"] = 10
    served["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    return served


def test_sleep_and_wake_are_a_change_of_replicas_not_of_the_template() -> None:
    awake = _as_served(builders.desired_deployment(_userland(), _template()))
    asleep = builders.desired_deployment(_userland(), _template(), asleep=True)
    assert change_cause(awake, asleep) == "scale"
    assert change_cause(_as_served(asleep), builders.desired_deployment(_userland(), _template())) == "scale"
    assert Applied("scale", "Deployment", "vscode-ann", 0).detail == \
        "Deployment vscode-ann (its number of replicas changed)"


def test_a_new_image_is_the_template_and_a_restart_is_a_restart() -> None:
    actual = _as_served(builders.desired_deployment(_userland(), _template()))
    assert change_cause(actual, builders.desired_deployment(_userland(), _template("ide:2"))) == "template"
    restarted = _userland(**{naming.ANNOTATION_RESTARTED_AT: "2026-11-25T10:00:00Z"})
    assert change_cause(actual, builders.desired_deployment(restarted, _template())) == "restart"
    # A new image while asleep is still the Template (not only the replicas moved).
    new_image_asleep = builders.desired_deployment(_userland(), _template("ide:2"), asleep=True)
    assert change_cause(actual, new_image_asleep) == "template"


def test_the_same_hash_means_someone_else_changed_it() -> None:
    desired = builders.desired_deployment(_userland(), _template())
    edited = _as_served(desired)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "someone-elses:1"
    assert change_cause(edited, desired) == "drift"
    service = builders.desired_service(_userland(), _template())
    moved = copy.deepcopy(service)
    moved["spec"]["ports"][0]["targetPort"] = 9999
    assert change_cause(moved, service) == "drift"


def test_owner_conflicts() -> None:
    desired = builders.desired_service(_userland(), _template())
    assert owner_conflict(desired, _userland(), owned=True) is None
    theirs = copy.deepcopy(desired)
    theirs["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert "not to this Userland" in str(owner_conflict(theirs, _userland(), owned=True))
    labelled = copy.deepcopy(desired)
    labelled["metadata"]["labels"][naming.LABEL_USER] = "bob"
    assert owner_conflict(labelled, _userland(), owned=False) == \
        "Service 'vscode-ann-svc' is labelled for userland.dev/user='bob'"


def test_a_replace_keeps_what_others_added() -> None:
    desired = builders.desired_deployment(_userland(), _template())
    actual = _as_served(desired)
    actual["metadata"]["labels"]["team"] = "blue"
    actual["metadata"]["annotations"]["note"] = "kept"
    body = replacement(actual, desired)
    assert body["metadata"]["labels"]["team"] == "blue" and body["metadata"]["annotations"]["note"] == "kept"
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"] == desired["spec"]
