"""Capacity before a lecture, decided (operator/rules/capacity/): the image puller and the
placeholders against golden data (tests/unit/golden/prepull-*.json, placeholders-*.json), and
each verdict (images on n/N nodes, the rollout hold, the hold window, placeholders wanted, the
lecture's readiness line) as a table. Regenerate the golden files with
`UPDATE_GOLDEN=1 python -m pytest tests/unit/test_capacity.py` and review the diff.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden import check_golden
from userland.operator.rules.capacity import images, room
from userland.operator.rules.capacity.images import ImageProgress, hold_rollout, prepull_progress
from userland.operator.rules.capacity.readiness import Room, readiness, software
from userland.operator.rules.capacity.room import Environment, Window
from userland.operator.rules.status import Problem, template_status
from userland.operator.rules.status_events import EventNote, template_events
from userland.platform.model.models import Template
from userland.platform.model.settings import Settings

GOLDEN = Path(__file__).parent / "golden"
SETTINGS = Settings(pause_image="registry.k8s.io/pause:3.9")
# Monday 23 November 2026, 08:00 in Berlin (07:00 UTC).
MONDAY_8 = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)


def _template(image: str = "ghcr.io/example/datascience:2026.1", generation: int = 3, **pod: Any) -> Template:
    pod_spec = {
        "containers": [{"name": "lab", "image": image,
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                       {"name": "db", "image": "mariadb:11",
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}],
        "initContainers": [{"name": "home", "image": image, "resources": {"requests": {"cpu": "1"}}}],
        **pod,
    }
    return Template.from_object({
        "metadata": {"name": "lab", "namespace": "classroom", "uid": "tpl-uid", "generation": generation},
        "spec": {"routing": {"host": "lab.example.edu"}, "port": 8888, "podSpec": pod_spec,
                 "schedule": {"timeZone": "Europe/Berlin",
                              "lectures": [{"days": ["Mon"], "start": "09:00", "end": "10:30"}]}},
    })


PLACED = {
    "nodeSelector": {"pool": "students"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    "tolerations": [{"key": "classroom", "operator": "Exists", "effect": "NoSchedule"}],
    "imagePullSecrets": [{"name": "registry"}],
}


# ----- the image puller -----

def test_prepull_daemonset_golden() -> None:
    check_golden(GOLDEN / "prepull-lab.json", images.desired_prepull(_template(**PLACED), SETTINGS))


def test_prepull_lands_where_the_environments_may_and_runs_nothing_of_theirs() -> None:
    body = images.desired_prepull(_template(**PLACED), SETTINGS)
    pod = body["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == PLACED["nodeSelector"]
    assert pod["tolerations"] == PLACED["tolerations"]
    assert pod["affinity"] == {"nodeAffinity": PLACED["affinity"]["nodeAffinity"]}  # not pod affinity
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}  # "restricted" admits it
    assert [c["image"] for c in pod["initContainers"]] == ["ghcr.io/example/datascience:2026.1", "mariadb:11"]
    assert [c["image"] for c in pod["containers"]] == ["registry.k8s.io/pause:3.9"]
    for container in pod["initContainers"] + pod["containers"]:
        assert container["resources"]["requests"] == {"cpu": "1m", "memory": "8Mi"}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    owner = body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Template", "lab", "tpl-uid")


def test_a_new_image_is_a_new_puller_and_other_changes_are_not() -> None:
    before = images.desired_prepull(_template(), SETTINGS)["metadata"]["name"]
    after = images.desired_prepull(_template(image="ghcr.io/example/datascience:2026.2"), SETTINGS)
    assert after["metadata"]["name"] != before
    assert after["metadata"]["name"].startswith("lab--pull-")
    same = images.desired_prepull(_template(generation=9), SETTINGS)["metadata"]["name"]
    assert same == before


def test_a_long_template_name_still_gives_a_label() -> None:
    template = Template.from_object({
        "metadata": {"name": "a" * 63, "namespace": "c", "uid": "u"},
        "spec": {"routing": {"host": "x.example.edu"}, "port": 80,
                 "podSpec": {"containers": [{"name": "a", "image": "a"}]}}})
    name = images.desired_prepull(template, SETTINGS)["metadata"]["name"]
    assert len(name) <= 63


PROGRESS = [
    # (case, DaemonSet status, generation, expected reason, message)
    ("not made yet", None, 1, "Pulling", "images on 0 nodes yet: the image puller is being made"),
    ("not counted yet", {}, 1, "Pulling", "images on 0 nodes yet: waiting for the nodes to be counted"),
    ("old generation", {"observedGeneration": 1, "desiredNumberScheduled": 4, "numberReady": 4}, 2,
     "Pulling", "images on 0 nodes yet: waiting for the nodes to be counted"),
    ("some nodes", {"observedGeneration": 1, "desiredNumberScheduled": 4, "numberReady": 3}, 1,
     "Pulling", "images on 3/4 nodes"),
    ("every node", {"observedGeneration": 1, "desiredNumberScheduled": 4, "numberReady": 4}, 1,
     "Pulled", "images on 4/4 nodes"),
    ("no node fits", {"observedGeneration": 1, "desiredNumberScheduled": 0, "numberReady": 0}, 1,
     "NoNodes", "no node can run this Template's environments now (its nodeSelector, affinity and "
                "tolerations match none)"),
]


@pytest.mark.parametrize(("case", "status", "generation", "reason", "message"), PROGRESS,
                         ids=[row[0] for row in PROGRESS])
def test_images_on_nodes(case: str, status: dict[str, Any] | None, generation: int, reason: str,
                         message: str) -> None:
    daemonset = None if status is None else {"metadata": {"generation": generation}, "status": status}
    progress = prepull_progress(daemonset, 2)
    assert (progress.reason, progress.message) == (reason, message)
    assert progress.complete is (reason == "Pulled")


def test_one_image_and_make_run() -> None:
    done = {"metadata": {"generation": 1},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 1, "numberReady": 1}}
    assert prepull_progress(done, 1).message == "image on 1/1 nodes"
    local = prepull_progress(None, 1, local=True)
    assert (local.reason, local.message, local.complete) == (
        "ImagesLocal", "images are local: nothing to pull", True)


# ----- the rollout hold -----

def _deployment(image: str) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": [{"name": "lab", "image": image},
                                                          {"name": "db", "image": "mariadb:11"}],
                                           "initContainers": [{"name": "home", "image": image}]}}}}


def _status(generation: int, status: str | None, reason: str = "Pulling",
            since: datetime = MONDAY_8) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}]
    if status is not None:
        conditions.append({"type": "ImagesPulled", "status": status, "reason": reason,
                           "message": "images on 1/4 nodes",
                           "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return {"observedGeneration": generation, "conditions": conditions}


NEW = "ghcr.io/example/datascience:2026.2"
OLD = "ghcr.io/example/datascience:2026.1"
HOLDS = [
    # (case, deployment's image, template status, minutes after the pull began, held, recheck in minutes)
    ("same image", NEW, _status(4, "False"), 1, False, None),
    ("no deployment yet", None, _status(4, "False"), 1, False, None),
    ("status behind the spec", OLD, _status(3, "True", "Pulled"), 1, True, 1 + 5 / 60),
    ("pulling", OLD, _status(4, "False"), 1, True, 30),
    ("pulled", OLD, _status(4, "True", "Pulled"), 1, False, None),
    ("no node fits", OLD, _status(4, "False", "NoNodes"), 1, False, None),
    ("no images condition (a problem, make run)", OLD, _status(4, None), 1, False, None),
    ("pulling too long", OLD, _status(4, "False"), 31, False, None),
]


@pytest.mark.parametrize(("case", "image", "status", "after", "held", "recheck"), HOLDS,
                         ids=[row[0] for row in HOLDS])
def test_rollout_waits_for_the_image(case: str, image: str | None, status: dict[str, Any], after: int,
                                     held: bool, recheck: float | None) -> None:
    template = _template(image=NEW, generation=4)
    now = MONDAY_8 + timedelta(minutes=after)
    hold = hold_rollout(None if image is None else _deployment(image), template, status, now=now, limit=1800)
    assert hold.held is held
    if recheck is None:
        assert hold.recheck_at is None
    else:
        assert hold.recheck_at == MONDAY_8 + timedelta(minutes=recheck)
    if case == "pulling too long":
        assert "rolled anyway" in hold.message
    if held and case == "pulling":
        assert "images on 1/4 nodes" in hold.message


# ----- room -----

@pytest.mark.parametrize(("text", "value"), [
    ("500m", Fraction(1, 2)), ("1", 1), ("1.5", Fraction(3, 2)), ("2Gi", 2 * 2**30), ("512Mi", 2**29),
    ("1e3", 1000), ("1E3", 1000), ("2E", 2 * 10**18), ("100k", 100_000), ("nonsense", 0),
])
def test_quantities(text: str, value: Fraction) -> None:
    assert room.parse_quantity(text) == value


def test_requests_of_one_pod_as_the_scheduler_counts() -> None:
    # containers: 750m CPU, 1.5Gi; the init container asks 1 CPU alone, which is more.
    assert room.pod_requests(_template().spec.pod_spec) == {"cpu": "1000m", "memory": str(3 * 2**29)}
    assert room.pod_requests({"containers": [{"name": "a", "image": "a"}]}) == {}


def test_lectures_keep_their_local_time_across_daylight_saving() -> None:
    schedule = _template().spec.schedule
    assert schedule is not None
    summer = room.next_lecture(schedule, datetime(2026, 10, 20, tzinfo=UTC))
    winter = room.next_lecture(schedule, datetime(2026, 10, 27, tzinfo=UTC))
    assert summer == datetime(2026, 10, 26, 8, 0, tzinfo=UTC)  # 09:00 CET (after the change)
    assert room.next_lecture(schedule, datetime(2026, 10, 19, 6, 0, tzinfo=UTC)) == \
        datetime(2026, 10, 19, 7, 0, tzinfo=UTC)  # 09:00 CEST
    assert winter == datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


WINDOWS = [
    # (case, now, hold seconds, holding, opens, recheck)
    ("well before", MONDAY_8 - timedelta(hours=1), 1800, False, MONDAY_8 + timedelta(minutes=30),
     MONDAY_8 + timedelta(minutes=30)),
    ("in the window", MONDAY_8 + timedelta(minutes=45), 1800, True, MONDAY_8 + timedelta(minutes=30),
     MONDAY_8 + timedelta(hours=1)),
    ("holding off", MONDAY_8 + timedelta(minutes=45), 0, False, MONDAY_8 + timedelta(hours=1),
     MONDAY_8 + timedelta(hours=1)),
]


@pytest.mark.parametrize(("case", "now", "hold", "holding", "opens", "recheck"), WINDOWS,
                         ids=[row[0] for row in WINDOWS])
def test_hold_window(case: str, now: datetime, hold: int, holding: bool, opens: datetime,
                     recheck: datetime) -> None:
    window = room.hold_window(_template().spec.schedule, now, hold)
    assert window.start == MONDAY_8 + timedelta(hours=1)
    assert (window.holding, window.opens, window.recheck_at(now)) == (holding, opens, recheck)


def test_after_the_start_the_window_is_the_next_lecture() -> None:
    window = room.hold_window(_template().spec.schedule, MONDAY_8 + timedelta(hours=1, seconds=1), 1800)
    assert not window.holding
    assert window.start == MONDAY_8 + timedelta(days=7, hours=1)
    assert room.hold_window(None, MONDAY_8, 1800) == Window(None, None, False)


def test_environment_from_a_userland_status() -> None:
    ready = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}
    scheduled = {"phase": "Starting", "progress": ["Scheduled"],
                 "conditions": [{"type": "Ready", "reason": "Starting"}]}
    waiting = {"phase": "Starting", "conditions": [{"type": "Ready", "reason": "Unschedulable"}]}
    assert room.environment_of(ready) == Environment(has_room=True)
    assert room.environment_of(scheduled) == Environment(has_room=True)
    assert room.environment_of(waiting) == Environment()
    assert room.environment_of({"phase": "Failed"}) == Environment(failed=True)
    assert room.environment_of({"phase": "Idle"}) == Environment()


def test_placeholders_for_each_environment_without_room_while_the_window_is_open() -> None:
    envs = [Environment(has_room=True)] * 3 + [Environment()] * 5 + [Environment(failed=True)] * 2
    open_ = Window(MONDAY_8, MONDAY_8 - timedelta(minutes=30), True)
    shut = Window(MONDAY_8, MONDAY_8 - timedelta(minutes=30), False)
    assert room.placeholders_wanted(envs, open_, {"cpu": "1"}) == 5
    assert room.placeholders_wanted(envs, shut, {"cpu": "1"}) == 0
    assert room.placeholders_wanted(envs, open_, {}) == 0  # nothing to hold


def test_placeholders_golden() -> None:
    body = room.desired_placeholders(_template(**PLACED), SETTINGS, 20)
    check_golden(GOLDEN / "placeholders-lab.json", body)
    pod = body["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "userland-placeholder"
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "1000m", "memory": str(3 * 2**29)}
    assert body["metadata"]["name"] == "lab--room"
    assert "userland.dev/user" not in body["spec"]["template"]["metadata"]["labels"]


# ----- readiness for the next lecture -----

NINE = MONDAY_8 + timedelta(hours=1)
WINDOW = Window(NINE, NINE - timedelta(minutes=30), True)
PULLED = ImageProgress("Pulled", "images on 4/4 nodes", 4, 4)


def _envs(room_: int, without: int, failed: int = 0) -> list[Environment]:
    return ([Environment(has_room=True)] * room_ + [Environment()] * without
            + [Environment(failed=True)] * failed)


READINESS = [
    # (case, environments, images, room, window, status, reason, message)
    ("ready", _envs(20, 280), PULLED, Room(True, placeholders=280), WINDOW, "True", "Ready",
     "Ready for the lecture at 09:00: 300 of 300 environments can start; software on all 4 servers; "
     "room for all 300"),
    ("waiting for nodes", _envs(0, 300), PULLED, Room(True, placeholders=280), WINDOW, "False",
     "WaitingForNodes", "Not ready for the lecture at 09:00: 300 of 300 environments can start; software on "
                        "all 4 servers; room for 280 of 300 (20 would wait for a server to be added)"),
    ("images pulling", _envs(300, 0), ImageProgress("Pulling", "images on 3/4 nodes", 3, 4), Room(True),
     WINDOW, "False", "ImagesPulling",
     "Not ready for the lecture at 09:00: 300 of 300 environments can start; software on 3 of 4 servers, "
     "still copying; room for all 300"),
    ("failing", _envs(290, 0, failed=10), PULLED, Room(True), WINDOW, "False", "EnvironmentsFailing",
     "Not ready for the lecture at 09:00: 290 of 300 environments can start; software on all 4 servers; "
     "room for all 290"),
    ("before the window", _envs(0, 300), PULLED, Room(False, opens=NINE - timedelta(minutes=30)),
     Window(NINE, NINE - timedelta(minutes=30), False), "Unknown", "RoomNotHeldYet",
     "Getting ready for the lecture at 09:00: 300 of 300 environments can start; software on all 4 servers; "
     "room will be held from 08:30"),
    ("make run", _envs(0, 3), ImageProgress("ImagesLocal", "images are local: nothing to pull"),
     Room(False, note="no room to hold ahead"), Window(NINE, None, False),
     "True", "Ready", "Ready for the lecture at 09:00: 3 of 3 environments can start; software on this "
                      "machine; no room to hold ahead"),
    ("placeholders refused", _envs(0, 2), PULLED,
     Room(True, problem='pods "lab--room-x" is forbidden: no PriorityClass with name userland-placeholder'),
     WINDOW, "False", "RoomRefused",
     "Not ready for the lecture at 09:00: 2 of 2 environments can start; software on all 4 servers; room for "
     "0 of 2 (2 would wait: room for them cannot be held ahead, tell your admin)"),
    ("one student, next week", _envs(1, 0), PULLED, Room(True), Window(NINE + timedelta(days=7), None, True),
     "True", "Ready", "Ready for the lecture on Mon at 09:00: 1 of 1 environment can start; software on all "
                      "4 servers; room for 1"),
    ("no server fits", _envs(0, 2), ImageProgress("NoNodes", "no node can run ..."), Room(True), WINDOW,
     "False", "NoNodes",
     "Not ready for the lecture at 09:00: 2 of 2 environments can start; no server can run these "
     "environments: tell your admin; room for 0 of 2 (2 would wait for a server to be added)"),
    # Everyone already on a node before the window opens (they were woken early, or work now):
    # nothing to hold, ready (not "Getting ready", which /metrics counts as not ready).
    ("before the window, everyone on a node", _envs(3, 0), PULLED,
     Room(False, opens=NINE - timedelta(minutes=5)), Window(NINE, NINE - timedelta(minutes=5), False),
     "True", "Ready", "Ready for the lecture at 09:00: 3 of 3 environments can start; software on all 4 "
                      "servers; room for all 3"),
    # Not "0 of 0 environments can start; software ready; room for 0": nothing there is true.
    ("no students", [], ImageProgress("NotInUse", "no environment uses this Template: nothing to pull yet"),
     Room(True), WINDOW, "True", "NoStudents",
     "No students yet for the lecture at 09:00: no environment to start ahead (none in this course, or "
     "all suspended)"),
]


@pytest.mark.parametrize(("case", "envs", "progress", "room_", "window", "status", "reason", "message"),
                         READINESS, ids=[row[0] for row in READINESS])
def test_ready_for_the_lecture(case: str, envs: list[Environment], progress: ImageProgress, room_: Room,
                               window: Window, status: str, reason: str, message: str) -> None:
    verdict = readiness(envs, progress, room_, window, time_zone="Europe/Berlin", now=MONDAY_8)
    assert verdict is not None
    assert (verdict.status, verdict.reason, verdict.message) == (status, reason, message)
    assert verdict.ready is (status == "True")


@pytest.mark.parametrize(("progress", "words"), [
    (ImageProgress("Pulled", "image on 1/1 nodes", 1, 1), "software on the server"),
    (ImageProgress("NotInUse", "no environment uses this Template: nothing to pull yet"), "software ready"),
    (ImageProgress("Pulling", "images on 0 nodes yet: waiting for the nodes to be counted"),
     "software being copied to the servers"),
    (ImageProgress("Pulling", "images on 1/4 nodes; environments no longer wait ...", 1, 4, late=True),
     "software on 1 of 4 servers, still copying (taking long: students may wait for it)"),
])
def test_where_the_software_is_in_a_teachers_words(progress: ImageProgress, words: str) -> None:
    assert software(progress) == words
    assert not any(jargon in words for jargon in ("node", "image", "Pod", "DaemonSet"))


def test_no_lecture_ahead_no_verdict() -> None:
    assert readiness([], PULLED, Room(True), Window(None, None, False), time_zone="UTC", now=MONDAY_8) is None


def test_template_status_carries_images_and_the_lecture() -> None:
    obj = {"metadata": {"name": "lab", "generation": 3}, "status": {}}
    verdict = readiness(_envs(1, 0), PULLED, Room(True), WINDOW, time_zone="Europe/Berlin", now=MONDAY_8)
    status = template_status(obj, 1, None, now="2026-11-23T07:00:00Z", images=PULLED, lecture=verdict)
    kinds = {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}
    assert kinds["ImagesPulled"] == ("True", "Pulled", "images on 4/4 nodes")
    assert kinds["LectureReady"][0:2] == ("True", "Ready")
    broken = template_status(obj, 1, Problem("InvalidSpec", "bad"), now="2026-11-23T07:00:00Z")
    assert [c["type"] for c in broken["conditions"]] == ["Ready"]


def test_the_status_says_when_environments_stop_waiting_for_the_image() -> None:
    pulling = ImageProgress("Pulling", "images on 1/4 nodes", 1, 4)
    status = _status(4, "False")  # pulling since MONDAY_8
    assert images.pull_wait_ends(status, 1800) == MONDAY_8 + timedelta(minutes=30)
    assert images.past_the_wait(pulling, status, now=MONDAY_8 + timedelta(minutes=29), limit=1800) == pulling
    late = images.past_the_wait(pulling, status, now=MONDAY_8 + timedelta(minutes=30), limit=1800)
    assert late.message == ("images on 1/4 nodes; environments no longer wait for it (it has been pulling "
                            "for over 30 min): they pull it as they start")
    assert (late.reason, late.late) == ("Pulling", True)
    assert images.pull_wait_ends(_status(4, "True", "Pulled"), 1800) is None
    assert images.pull_wait_ends(_status(4, "False", "NoNodes"), 1800) is None
    assert images.pull_wait_ends(status, 0) is None


def test_template_events_tell_pulled_images_and_the_lecture_verdict_once() -> None:
    obj = {"metadata": {"name": "lab", "generation": 3}, "status": {}}
    now = "2026-11-23T07:00:00Z"
    pulling = template_status(obj, 1, None, now=now,
                              images=ImageProgress("Pulling", "images on 3/4 nodes", 3, 4))
    pulled = template_status(obj, 1, None, now=now, images=PULLED)
    notes = template_events(pulling, pulled)
    assert EventNote("Normal", "ImagesPulled", "images on 4/4 nodes") in notes
    assert [n for n in template_events(pulled, pulled) if n.reason == "ImagesPulled"] == []
    waiting = readiness(_envs(0, 2), PULLED, Room(True, placeholders=1), WINDOW, time_zone="UTC",
                        now=MONDAY_8)
    ready = readiness(_envs(0, 2), PULLED, Room(True, placeholders=2), WINDOW, time_zone="UTC",
                      now=MONDAY_8)
    not_ready = template_status(obj, 2, None, now=now, images=PULLED, lecture=waiting)
    now_ready = template_status(obj, 2, None, now=now, images=PULLED, lecture=ready)
    assert [n.reason for n in template_events(pulled, not_ready)] == ["NotReadyForLecture"]
    assert template_events(not_ready, now_ready)[-1] == EventNote(
        "Normal", "ReadyForLecture",
        "Ready for the lecture at 08:00: 2 of 2 environments can start; software on all 4 servers; "
        "room for all 2")


def test_a_course_with_no_students_tells_no_lecture_event() -> None:
    """A scheduled Template nobody uses said "Ready ...: 0 of 0 environments can start" in a
    ReadyForLecture event, and "nothing to pull yet" in an ImagesPulled one; now it tells
    neither, and the first verdict once students come is told."""
    obj = {"metadata": {"name": "lab", "generation": 3}, "status": {}}
    now = "2026-11-23T07:00:00Z"
    unused = ImageProgress("NotInUse", "no environment uses this Template: nothing to pull yet")
    nobody = readiness([], unused, Room(True), WINDOW, time_zone="UTC", now=MONDAY_8)
    assert nobody is not None and nobody.ready  # no alert for an empty course
    empty = template_status(obj, 0, None, now=now, images=unused, lecture=nobody)
    assert [n.reason for n in template_events({}, empty)] == ["Valid"]
    assert not any("Lecture" in n.reason for n in template_events(empty, empty))
    ready = template_status(obj, 2, None, now=now, images=PULLED, lecture=readiness(
        _envs(0, 2), PULLED, Room(True, placeholders=2), WINDOW, time_zone="UTC", now=MONDAY_8))
    assert [n.reason for n in template_events(empty, ready)] == ["ImagesPulled", "ReadyForLecture"]
    short = template_status(obj, 2, None, now=now, images=PULLED, lecture=readiness(
        _envs(0, 2), PULLED, Room(True, placeholders=1), WINDOW, time_zone="UTC", now=MONDAY_8))
    assert [n.reason for n in template_events(empty, short)] == ["ImagesPulled", "NotReadyForLecture"]
    # Everyone leaves: nothing to tell.
    assert [n.reason for n in template_events(short, empty)] == []
