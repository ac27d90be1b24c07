"""deploy/course/: one course as kustomize renders it, alone and as a second course (an overlay).

Real: kubectl's built-in kustomize (no cluster); the rendered Template is read by the project's
own model. What the RoleBinding allows on a real API server: tests/integration/test_rbac_web.py.
"""

from __future__ import annotations

from typing import Any

from tests.web.course_support import REPO, kustomize, render_course
from userland.platform.model import models


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_the_course_alone() -> None:
    docs = kustomize(REPO / "deploy" / "course")
    assert sorted(d["kind"] for d in docs) == ["Namespace", "NetworkPolicy", "NetworkPolicy", "RoleBinding",
                                               "Template"]
    (namespace,) = by_kind(docs, "Namespace")
    assert namespace["metadata"]["name"] == "classroom"
    assert namespace["metadata"]["labels"]["userland.dev/course"] == "true"
    staff = {"userland.dev/instructors", "userland.dev/assistants"}
    assert set(namespace["metadata"]["annotations"]) >= staff
    for doc in docs:
        assert doc["metadata"].get("namespace") in (None, "classroom"), doc["kind"]


def test_a_second_course_moves_everything_but_the_serviceaccount() -> None:
    docs = render_course("databases-2026", instructors="alice,uni/db-staff")
    (namespace,) = by_kind(docs, "Namespace")
    assert namespace["metadata"]["name"] == "databases-2026"
    assert namespace["metadata"]["labels"]["userland.dev/course"] == "true"
    assert namespace["metadata"]["annotations"]["userland.dev/instructors"] == "alice,uni/db-staff"
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "databases-2026"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "userland-web"}
    # kustomize's `namespace:` must not move the subject: the ServiceAccount is in userland-system.
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "userland-web",
                                    "namespace": "userland-system"}]
    for doc in docs:
        assert doc["metadata"].get("namespace") in (None, "databases-2026"), doc["kind"]


def test_course_network_policies() -> None:
    docs = render_course("c1")
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "NetworkPolicy")}
    # Nothing reaches a course's pods but what a policy admits (the operator's per-Template one
    # admits the gateway).
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    egress = policies["userland-environments-egress"]
    # Students' pods carry the operator's managed-by label; they may not reach cloud metadata.
    assert egress["podSelector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "userland-operator"}
    (rule,) = egress["egress"]
    (block,) = [peer["ipBlock"] for peer in rule["to"] if "ipBlock" in peer]
    assert block == {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}
    # Policies add up: the environments' egress must not open the worker and grading Pods, whose
    # own policies let them reach the store only (docs/grading.md: a grading Pod has no network).
    (expression,) = egress["podSelector"]["matchExpressions"]
    assert expression == {"key": "app.kubernetes.io/component", "operator": "NotIn",
                          "values": ["assignment-worker", "assignment-grader"]}


def test_the_course_template_is_a_valid_template() -> None:
    (template,) = by_kind(render_course("c1"), "Template")
    assert template["metadata"]["namespace"] == "c1"
    parsed = models.Template.from_object(template)
    assert parsed.name == "vscode" and parsed.spec.storage is not None
