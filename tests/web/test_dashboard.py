"""The class dashboard as data (pure): rows, words, search, filter, sort, pages; golden data.

Regenerate the golden file after an intended change with
`UPDATE_GOLDEN=1 python -m pytest tests/web/test_dashboard.py` and review the diff.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden import check_golden
from userland.platform.model import naming
from userland.web.rules import dashboard, row_status, selection, slim

GOLDEN = Path(__file__).parent / "golden"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
T0 = "2027-01-15T07:58:00Z"  # two minutes before NOW


def _check_golden(name: str, actual: Any) -> None:
    check_golden(GOLDEN / f"{name}.json", actual)


def userland(user: str, template: str = "vscode", *, phase: str | None = "Ready", reason: str = "Available",
             message: str = "the environment is running", since: str = T0, suspended: bool = False,
             annotations: dict[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{template}-{user}", "namespace": "cs101", "resourceVersion": "1",
                            "creationTimestamp": "2027-01-15T07:00:00Z", "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T07:59:00Z"
    status: dict[str, Any] = {}
    if phase is not None:
        status = {"phase": phase, "url": f"https://u.example.edu/{template}/",
                  "conditions": [{"type": "Ready", "status": "True" if phase == "Ready" else "False",
                                  "reason": reason, "message": message, "lastTransitionTime": since}]}
    # Through the real slimming, as the watch cache stores them.
    return slim.userland({"metadata": meta, "spec": {"user": user, "template": template,
                                                      "suspended": suspended}, "status": status})


TEMPLATES = {
    "vscode": slim.template({"metadata": {"name": "vscode", "namespace": "cs101"},
                             "spec": {"displayName": "VS Code", "storage": {"size": "1Gi", "mountPath": "/h",
                                                                             "reclaimPolicy": "Delete"}}}),
    "db": slim.template({"metadata": {"name": "db", "namespace": "cs101"}, "spec": {}}),
}


def pod(waiting_reason: str, message: str = "", unschedulable: str = "") -> dict[str, Any]:
    conditions = ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": unschedulable}] if unschedulable else [])
    statuses = ([{"name": "c", "restartCount": 3, "state": {"waiting": {"reason": waiting_reason,
                                                                        "message": message}}}]
                if waiting_reason else [])
    return slim.pod({"metadata": {"name": "p", "namespace": "cs101", "managedFields": [{"x": 1}]},
                     "status": {"phase": "Pending", "containerStatuses": statuses, "conditions": conditions}})


def warning(reason: str, message: str, when: str = T0) -> dict[str, Any]:
    return slim.event({"metadata": {"name": f"e-{reason}", "namespace": "cs101"}, "type": "Warning",
                       "reason": reason, "message": message, "lastTimestamp": when,
                       "involvedObject": {"kind": "Pod", "name": "p"}})


def class_rows() -> list[dashboard.StudentRow]:
    alice = [userland("alice", annotations={naming.ANNOTATION_STUDENT_NAME: "Alice Liddell",
                                            naming.ANNOTATION_STUDENT_EMAIL: "alice@uni.edu",
                                            naming.ANNOTATION_STUDENT_SECTION: "A",
                                            naming.ANNOTATION_LAST_ACTIVITY: "2027-01-15T07:30:00Z"}),
             userland("alice", "db", phase="Starting", reason="Starting", message="waiting")]
    bob = [userland("bob", phase="Starting", reason="Starting", message="waiting for the Deployment",
                    since="2027-01-15T07:45:00Z")]
    carol = [userland("carol", phase="Suspended", reason="Suspended", message="suspended", suspended=True,
                      annotations={naming.ANNOTATION_STUDENT_SECTION: "B"})]
    dave = [userland("dave", phase="Failed", reason="ProgressDeadlineExceeded", message="deadline")]
    erin = [userland("erin", phase=None)]
    frank = [userland("frank", phase="Pending", reason="TemplateNotFound", message="Template 'x' not found")]
    rows = [
        dashboard.student_row("alice", alice, [dashboard.environment(u, TEMPLATES.get(u["spec"]["template"]))
                                               for u in alice]),
        dashboard.student_row("bob", bob, [dashboard.environment(
            bob[0], TEMPLATES["vscode"], [pod("ImagePullBackOff", 'Back-off pulling image "nope:1"')],
            [warning("Failed", "Failed to pull image \"nope:1\": not found")])]),
        dashboard.student_row("carol", carol, [dashboard.environment(carol[0], TEMPLATES["vscode"])]),
        dashboard.student_row("dave", dave, [dashboard.environment(
            dave[0], TEMPLATES["vscode"],
            [pod("CrashLoopBackOff", "back-off 5m0s restarting failed container")],
            [warning("BackOff", "Back-off restarting failed container"),
             warning("FailedCreate", 'pods "x" is forbidden: exceeded quota: compute, requested: cpu=2',
                     "2027-01-15T07:10:00Z")])]),
        dashboard.student_row("erin", erin, [dashboard.environment(erin[0], None)]),
        dashboard.student_row("frank", frank, [dashboard.environment(
            frank[0], None, [pod("", unschedulable="0/3 nodes are available: 3 Insufficient memory.")])]),
    ]
    return rows


def test_rows_golden() -> None:
    rows = class_rows()
    _check_golden("dashboard-rows", [dataclasses.asdict(r) for r in rows])


def test_failures_are_explained_in_plain_words() -> None:
    rows = {r.login: r for r in class_rows()}
    assert rows["bob"].environments[0].reason == "the image cannot be downloaded"
    assert rows["bob"].environments[0].problems[0].detail.startswith("ImagePullBackOff: Back-off pulling")
    dave = rows["dave"].environments[0]
    assert [p.words for p in dave.problems] == ["keeps crashing", "not enough room in the course's quota"]
    assert "exceeded quota" in dave.problems[1].detail
    assert rows["frank"].environments[0].reason == "not enough room in the cluster"
    assert rows["erin"].environments[0].phase_words == "Waiting"
    assert rows["erin"].environments[0].reason == "waiting to be set up"
    # No Kubernetes word reaches the plain-words fields.
    for row in rows.values():
        for env in row.environments:
            for jargon in ("pod", "deployment", "namespace", "BackOff", "Pull"):
                assert jargon.lower() not in env.reason.lower()


@pytest.mark.parametrize(("reason", "message", "words"), [
    ("ErrImagePull", "", row_status.IMAGE),
    ("BackOff", 'Back-off pulling image "x"', row_status.IMAGE),
    ("BackOff", "Back-off restarting failed container", row_status.CRASH),
    ("CrashLoopBackOff", "", row_status.CRASH),
    ("FailedScheduling", "0/1 nodes are available", row_status.ROOM),
    ("FailedCreate", "exceeded quota: q", row_status.QUOTA),
    ("FailedMount", "timeout", row_status.STORAGE),
    ("Scheduled", "ok", None),
])
def test_classify(reason: str, message: str, words: str | None) -> None:
    assert row_status.classify(reason, message) == words


def test_student_phase_is_the_worst_environment_and_times_are_kept() -> None:
    rows = {r.login: r for r in class_rows()}
    alice = rows["alice"]
    assert alice.phase == "Starting" and alice.name == "Alice Liddell" and alice.section == "A"
    assert [e.template_title for e in alice.environments] == ["db", "VS Code"]
    assert dashboard.since_words(alice.since, NOW) == "2 min"
    assert dashboard.ago_words(alice.last_activity, NOW) == "30 min ago"
    assert dashboard.ago_words(None, NOW) == "not known"
    assert rows["carol"].environments[0].since is None  # suspended: not "starting"
    assert rows["alice"].environments[1].reclaim_policy == "Delete"


def test_words_for_durations() -> None:
    assert dashboard.duration_words(5) == "less than a minute"
    assert dashboard.duration_words(125) == "2 min"
    assert dashboard.duration_words(3600 + 300) == "1 h 5 min"
    assert dashboard.duration_words(5 * 86400) == "5 days"


def test_search_filter_sort_and_pages() -> None:
    rows = class_rows()
    by = lambda **p: [r.login for r in dashboard.select(rows, dashboard.Query.from_params(p), NOW).rows]  # noqa: E731
    assert by() == ["alice", "bob", "carol", "dave", "erin", "frank"]
    assert by(q="LIDDELL") == ["alice"]
    assert by(q="alice@uni") == ["alice"]
    assert by(q="bo") == ["bob"]
    assert by(q="carol b") == ["carol"]  # every word: carol by login, "b" by section B
    assert by(q="liddell db") == ["alice"]  # the name and a Template
    assert by(q="liddell nothing") == []
    assert by(q="alice", phase="ready") == ["alice"]  # her VS Code is ready (her db is not)
    assert by(q="db", phase="ready") == []  # the same environment must match both
    assert by(phase="starting") == ["alice", "bob"]
    assert by(phase="failed") == ["dave"]
    assert by(phase="suspended") == ["carol"]
    assert by(sort="phase") == ["dave", "alice", "bob", "erin", "frank", "carol"]
    assert by(sort="starting") == ["erin", "bob", "alice", "dave", "frank", "carol"]  # waiting longest first
    assert by(sort="activity")[0] == "alice"
    assert by(sort="login", desc="1")[0] == "frank"
    many = [dashboard.StudentRow(login=f"s{i:03d}", search_text=f"s{i:03d}") for i in range(120)]
    page = dashboard.select(many, dashboard.Query.from_params({"page": "3"}))
    assert (page.page, page.pages, page.matched, len(page.rows)) == (3, 3, 120, 20)
    assert page.rows[0].login == "s100"
    beyond = dashboard.select(many, dashboard.Query.from_params({"page": "99"}))
    assert beyond.page == 3


@pytest.mark.parametrize("params", [{"page": "x"}, {"page": "-4"}, {"sort": "<script>"}, {"phase": "nope"},
                                    {"q": "a" * 500}])
def test_bad_query_parameters_fall_back_to_defaults(params: dict[str, str]) -> None:
    query = dashboard.Query.from_params(params)
    assert query.page >= 1 and query.sort in dashboard.SORTS
    assert query.phase in ("", *dashboard.STATUS_FILTERS) and len(query.q) <= dashboard.MAX_QUERY


def test_query_links_keep_the_view() -> None:
    query = dashboard.Query.from_params({"q": "a b&c", "phase": "ready", "sort": "phase", "page": "2"})
    assert query.params() == "q=a+b%26c&phase=ready&sort=phase&page=2"
    assert query.params(page=1) == "q=a+b%26c&phase=ready&sort=phase"
    assert dashboard.Query().params() == ""


def test_advice_for_students_has_no_jargon() -> None:
    for row in class_rows():
        for env in row.environments:
            text = dashboard.advice(env).lower()
            assert text and "pod" not in text and "namespace" not in text and "deployment" not in text


def test_slim_objects_keep_only_what_pages_read() -> None:
    full = {"metadata": {"name": "vscode-a", "namespace": "cs101", "resourceVersion": "7",
                         "managedFields": [{"big": "x" * 1000}], "labels": {"x": "y"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 1000,
                                         naming.ANNOTATION_STUDENT_NAME: "A"}},
            "spec": {"user": "a", "template": "vscode", "extra": 1},
            "status": {"phase": "Ready", "url": "u", "service": "s",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                                       "message": "m", "lastTransitionTime": T0,
                                       "observedGeneration": 1}]}}
    small = slim.userland(full)
    assert small == {"metadata": {"name": "vscode-a", "namespace": "cs101", "resourceVersion": "7",
                                  "annotations": {naming.ANNOTATION_STUDENT_NAME: "A"}},
                     "spec": {"user": "a", "template": "vscode"},
                     "status": {"phase": "Ready", "url": "u",
                                "conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                                                "message": "m", "lastTransitionTime": T0}]}}
    normal = slim.event({"metadata": {"name": "e", "namespace": "n"}, "type": "Normal", "reason": "Pulled",
                         "message": "x" * 500, "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"}})
    assert "message" not in normal and normal["involvedObject"] == {"kind": "Pod", "name": "p"}


@pytest.mark.parametrize("q", ["", "liddell", "carol b", "db", "vscode", "alice"])
@pytest.mark.parametrize("phase", ["", *row_status.STATUS_FILTERS])
def test_course_wide_runs_take_exactly_the_environments_the_dashboard_lists(q: str, phase: str) -> None:
    """Every Status filter value: "Suspend all" under a search acts on the environments shown, on
    every page (the integration test, tests/web/pages/test_filter_truth.py, walks the real page)."""
    rows = class_rows()
    query = dataclasses.replace(dashboard.Query.from_params({"q": q, "phase": phase}), per_page=2)
    listed: set[str] = set()
    for page in range(1, dashboard.select(rows, query).pages + 1):  # every page, two students each
        shown = dashboard.select(rows, dataclasses.replace(query, page=page))
        listed |= {e.name for r in shown.rows for e in r.environments}
        assert shown.matched_environments == len({e.name for r in dashboard.matching(rows, query)
                                                  for e in r.environments})
    chosen = selection.from_rows(dashboard.matching(rows, query))
    assert {t.name for t in chosen.targets + chosen.skipped} == listed
    if phase:
        assert {t.phase for t in chosen.targets} <= {row_status.STATUS_FILTERS[phase]}


@pytest.mark.parametrize("value", ["pending", "idle", "Ready", " ready", "x"])
def test_an_unknown_status_filter_is_an_error_for_actions_and_a_notice_for_the_page(value: str) -> None:
    with pytest.raises(row_status.UnknownFilter):
        row_status.filter_phase(value)
    query = dashboard.Query.from_params({"phase": value})
    assert query.phase == "" and query.unknown_phase == value


def test_filters_pick_environments_not_students() -> None:
    """Under Ready, a student's other environments (asleep, suspended) are not listed."""
    alice = [userland("alice"), userland("alice", "db", phase="Idle", reason="Asleep"),
             userland("alice", "demo", phase="Suspended", suspended=True)]
    envs = [dashboard.environment(u, TEMPLATES.get(u["spec"]["template"])) for u in alice]
    row = dashboard.student_row("alice", alice, envs)
    picked = dashboard.select([row], dashboard.Query.from_params({"phase": "ready"}))
    assert [e.name for r in picked.rows for e in r.environments] == ["vscode-alice"]
    assert picked.rows[0].phase == "Ready"  # the row's own status follows what it shows
    assert (picked.matched, picked.matched_environments, picked.environments) == (1, 1, 3)


def test_lecture_lines_say_what_the_operator_says_of_each_scheduled_template() -> None:
    def template(name: str, title: str, status: str | None, message: str = "") -> dict[str, Any]:
        conditions = [{"type": "Ready", "status": "True", "reason": "Valid", "message": "ok"}]
        if status is not None:
            conditions.append({"type": "LectureReady", "status": status, "reason": "x", "message": message})
        return slim.template({"metadata": {"name": name, "namespace": "cs101"},
                              "spec": {"displayName": title}, "status": {"conditions": conditions}})
    templates = {"b": template("b", "Lab", "True", "Ready for 09:00: 3 of 3 environments can start"),
                 "a": template("a", "", "Unknown", "Getting ready for 09:00"),
                 "c": template("c", "Plain", None)}
    assert dashboard.lecture_lines(templates) == [
        dashboard.LectureLine("a", None, "Getting ready for 09:00"),
        dashboard.LectureLine("Lab", True, "Ready for 09:00: 3 of 3 environments can start")]
    # Shown as a headline and its details (the operator's message is "<verdict>: <parts>").
    line = dashboard.lecture_lines(templates)[1]
    assert (line.headline, line.details) == ("ready for 09:00", "3 of 3 environments can start")
    first = dashboard.lecture_lines(templates)[0]
    assert (first.headline, first.details) == ("getting ready for 09:00", "")
    # The slim Template keeps only the Ready condition and the lecture's words.
    assert templates["b"]["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "Valid", "message": "ok", "lastTransitionTime": None}]
