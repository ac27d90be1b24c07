"""What an action touches and what a teacher is told first (web/rules/selection.py, pure)."""

from __future__ import annotations

from typing import Any

import pytest

from userland.platform.model import storage_words
from userland.web.rules import selection
from userland.web.rules.courses import Course

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


RETAIN = storage_words.for_staff("remove", "retain")
DELETE = storage_words.for_staff("remove", "delete")
NONE = storage_words.for_staff("remove", "none")
UNKNOWN = storage_words.for_staff("remove", "unknown")


@pytest.mark.parametrize(("template", "action", "sentence"), [
    ({"spec": {"storage": {"size": "1Gi", "reclaimPolicy": "Retain"}}}, "remove", RETAIN),
    ({"spec": {"storage": {"size": "1Gi"}}}, "remove", RETAIN),  # the CRD's default
    ({"spec": {"storage": {"size": "1Gi", "reclaimPolicy": "Delete"}}}, "remove", DELETE),
    ({"spec": {}}, "remove", NONE),
    (None, "remove", UNKNOWN),
    ({"spec": {"storage": {"reclaimPolicy": "Delete"}}}, "suspend",
     storage_words.for_staff("suspend", "delete")),
    # Suspending or restarting one that keeps no files loses them: the page says so, not "kept".
    ({"spec": {}}, "suspend", storage_words.for_staff("suspend", "none")),
    ({"spec": {}}, "restart", storage_words.for_staff("restart", "none")),
])
def test_storage_sentence_follows_the_reclaim_policy(template: Any, action: Any, sentence: str) -> None:
    assert selection.storage_sentence(template, action) == sentence


def test_what_asks_first_and_what_it_needs() -> None:
    one = [selection.Target("a", "a", "t", "Ready")]
    two = [selection.Target(x, x, "t", "Ready") for x in "ab"]
    ask = selection.needs_confirmation
    assert ask("remove", one, whole_course=False, may_resume=True)
    assert ask("suspend", two, whole_course=False, may_resume=True)
    assert not ask("suspend", one, whole_course=False, may_resume=True)
    assert ask("restart", two, whole_course=False, may_resume=True)  # unsaved work is lost: asks first
    assert not ask("restart", one, whole_course=False, may_resume=True)  # a row's own button
    assert not ask("start", two * 250, whole_course=False, may_resume=True)
    for action in selection.COURSE_ACTIONS:  # a course-wide run always lists what it touches first
        assert ask(action, [], whole_course=True, may_resume=False)
    suspended = [selection.Target("a", "a", "t", "Suspended")]
    assert ask("start", suspended, whole_course=False, may_resume=True)  # resuming is chosen there
    assert not ask("start", suspended, whole_course=False, may_resume=False)  # an assistant's: left suspended
    assert selection.is_course_wide(two) and not selection.is_course_wide(one + one)
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


def test_storage_groups_per_template() -> None:
    chosen = selection.select(CLASS, ["vscode-alice", "vscode-bob", "mariadb-bob"])
    templates = {"vscode": {"spec": {"displayName": "VS Code", "storage": {"reclaimPolicy": "Delete"}}}}
    groups = selection.storage_groups(chosen.targets, templates, "remove")
    assert [(g.title, g.sentence, len(g.targets)) for g in groups] == [
        ("mariadb", UNKNOWN, 1), ("VS Code", DELETE, 2)]


def test_start_groups_say_what_start_does_to_each() -> None:
    targets = [selection.Target(p.lower(), p.lower(), "t", p) for p in
               ("Idle", "Suspended", "Ready", "Starting", "Failed", "Pending")]
    groups = {g.key: [t.name for t in g.targets] for g in selection.start_groups(targets)}
    assert groups == {"wake": ["idle"], "suspended": ["suspended"], "running": ["ready", "starting"],
                      "cannot": ["failed", "pending"]}
