"""What an action touches and what a teacher is told first (web/selection.py, pure)."""

from __future__ import annotations

from typing import Any

import pytest

from userland.web import selection
from userland.web.courses import Course

COURSE = Course(namespace="db-2026", title="Databases  101")


def userland(object_name: str, user: str, template: str = "vscode", phase: str = "Ready",
             **annotations: str) -> Any:
    return {"metadata": {"name": object_name,
                         "annotations": {f"userland.dev/{k}": v for k, v in annotations.items()}},
            "spec": {"user": user, "template": template}, "status": {"phase": phase}}


CLASS = [
    userland("vscode-alice", "alice", name="Alice Liddell", section="A"),
    userland("vscode-bob", "bob", phase="Failed", email="bob@example.edu"),
    userland("mariadb-bob", "bob", template="mariadb"),
    {**userland("vscode-gone", "gone"), "metadata": {"name": "vscode-gone", "deletionTimestamp": "x"}},
]


@pytest.mark.parametrize(("template", "action", "sentence"), [
    ({"spec": {"storage": {"size": "1Gi", "reclaimPolicy": "Retain"}}}, "remove", selection.STORAGE_RETAIN),
    ({"spec": {"storage": {"size": "1Gi"}}}, "remove", selection.STORAGE_RETAIN),  # the CRD's default
    ({"spec": {"storage": {"size": "1Gi", "reclaimPolicy": "Delete"}}}, "remove", selection.STORAGE_DELETE),
    ({"spec": {}}, "remove", selection.STORAGE_NONE),
    (None, "remove", selection.STORAGE_UNKNOWN),
    ({"spec": {"storage": {"reclaimPolicy": "Delete"}}}, "suspend", selection.SUSPEND_KEEPS),
])
def test_storage_sentence_follows_the_reclaim_policy(template: Any, action: Any, sentence: str) -> None:
    assert selection.storage_sentence(template, action) == sentence


def test_what_asks_first_and_what_it_needs() -> None:
    assert selection.needs_confirmation("remove", 1)
    assert selection.needs_confirmation("suspend", 2) and not selection.needs_confirmation("suspend", 1)
    assert not selection.needs_confirmation("restart", 500) and not selection.needs_confirmation("start", 500)
    assert selection.permission_for("remove", True) == "remove_all"
    assert selection.permission_for("resume", True) == "start_all"
    assert selection.permission_for("restart", False) == "restart"
    assert selection.permission_for("restart", True) == "start_all"  # course-wide: the instructor's
    assert selection.parse_action("remove") == "remove" and selection.parse_action("drop") is None


@pytest.mark.parametrize(("typed", "ok"), [
    ("db-2026", True), ("  DB-2026 ", True), ("databases 101", True), ("Databases   101", True),
    ("", False), ("db", False), ("yes", False), ("databases", False),
])
def test_typed_course_name(typed: str, ok: bool) -> None:
    assert selection.typed_name_matches(typed, COURSE) is ok


def test_names_outside_the_course_or_malformed_are_missing() -> None:
    chosen = selection.select(CLASS, names=["vscode-alice", "vscode-alice", "other-ns-x", "../x",
                                            "vscode-gone", "y" * 200])
    assert [t.name for t in chosen.targets] == ["vscode-alice"]
    assert chosen.missing == ("other-ns-x", "../x", "vscode-gone", "y" * 80)


@pytest.mark.parametrize(("q", "phase", "names"), [
    ("", "", ["mariadb-bob", "vscode-alice", "vscode-bob"]),
    ("ALICE", "", ["vscode-alice"]),
    ("liddell", "", ["vscode-alice"]),
    ("example.edu", "", ["mariadb-bob", "vscode-bob"]),  # bob's email, from one of his Userlands
    ("bob mariadb", "", ["mariadb-bob"]),  # every word: the student and the Template
    ("liddell a", "", ["vscode-alice"]),
    ("liddell b", "", []),
    ("", "failed", ["vscode-bob"]),  # not bob's healthy mariadb
    ("bob", "ready", ["mariadb-bob"]),
    ("", "nonsense", ["mariadb-bob", "vscode-alice", "vscode-bob"]),
])
def test_whole_course_filter_matches_the_dashboards(q: str, phase: str, names: list[str]) -> None:
    chosen = selection.select(CLASS, whole_course=True, q=q, phase=phase)
    assert sorted(t.name for t in chosen.targets) == names and chosen.missing == ()


def test_storage_groups_per_template() -> None:
    chosen = selection.select(CLASS, whole_course=True)
    templates = {"vscode": {"spec": {"displayName": "VS Code", "storage": {"reclaimPolicy": "Delete"}}}}
    groups = selection.storage_groups(chosen.targets, templates, "remove")
    assert [(g.title, g.sentence, len(g.targets)) for g in groups] == [
        ("mariadb", selection.STORAGE_UNKNOWN, 1), ("VS Code", selection.STORAGE_DELETE, 2)]
