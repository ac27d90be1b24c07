"""The operator's census (operator/rules/census.py): every reason the operator writes sorts into a kind
an operator acts on, and the counts follow adds, changes and deletes exactly."""

from __future__ import annotations

from typing import Any

import pytest

from userland.operator.rules.census import FAILURE_KINDS, KIND_OF_REASON, Census, failure_kind
from userland.operator.rules.progress import BLOCKED_REASONS, FINAL_REASONS


def status(phase: str, reason: str = "") -> dict[str, Any]:
    return {"phase": phase, "conditions": [{"type": "Ready", "status": "False", "reason": reason}]}


@pytest.mark.parametrize("reason", sorted({*FINAL_REASONS, *BLOCKED_REASONS}))
def test_every_pod_reason_the_operator_reports_has_a_kind(reason: str) -> None:
    assert KIND_OF_REASON[reason] in FAILURE_KINDS and KIND_OF_REASON[reason] != "other"


def test_kinds() -> None:
    assert failure_kind(status("Failed", "ImagePullBackOff")) == "image"
    assert failure_kind(status("Failed", "ProgramNotInstalled")) == "image"  # make run's form of it
    assert failure_kind(status("Failed", "CrashLoopBackOff")) == "crash"
    assert failure_kind(status("Failed", "StartTimeout")) == "timeout"
    assert failure_kind(status("Failed", "SomethingNew")) == "other"
    assert failure_kind(status("Starting", "QuotaExceeded")) == "quota"
    assert failure_kind(status("Starting", "StorageUnavailable")) == "storage"
    assert failure_kind(status("Starting", "Unschedulable")) == "scheduling"
    assert failure_kind(status("Pending", "TemplateNotFound")) == "config"
    # Waiting for an ordinary reason, stopped on purpose, or fine: nothing fails.
    for phase, reason in (("Starting", "Starting"), ("Starting", "Waking"), ("Suspended", "Suspended"),
                          ("Ready", "Available"), ("Idle", "Idle")):
        assert failure_kind(status(phase, reason)) is None
    assert failure_kind(None) is None


def userland(name: str, template: str, st: dict[str, Any] | None, ns: str = "c1") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": ns, "name": name},
                           "spec": {"user": name, "template": template}}
    if st is not None:
        obj["status"] = st
    return obj


def test_counts_follow_the_watch() -> None:
    census = Census()
    a0, b0 = userland("a", "vscode", None), userland("b", "vscode", status("Starting", "Starting"))
    census.observe(None, a0)
    census.observe(None, b0)
    assert census.phases == {("c1", "vscode", "Pending"): 1, ("c1", "vscode", "Starting"): 1}
    a1 = userland("a", "vscode", status("Failed", "ImagePullBackOff"))
    census.observe(a0, a1)
    assert census.failing == {("c1", "vscode", "image"): 1}
    census.observe(a1, a1)  # a relist that repeats it changes nothing
    assert census.phases == {("c1", "vscode", "Failed"): 1, ("c1", "vscode", "Starting"): 1}
    census.observe(a1, None)
    census.observe(b0, None)
    assert not census.phases and not census.failing and census.pairs() == []
