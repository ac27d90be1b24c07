"""LMS course links and the LMS course page's decisions (platform/model/lti_links.py,
web/rules/lti_link.py): plain data in, decisions out."""

from __future__ import annotations

import json

from userland.platform.model.identity import Identity
from userland.platform.model.lti_links import (
    ANNOTATION_LINKS,
    ANNOTATION_LTI_ASSISTANTS,
    ANNOTATION_LTI_INSTRUCTORS,
    LmsLink,
    linked_courses,
    links_value,
    parse_links,
    staff_patch,
    with_link,
)
from userland.web.rules.courses import Course, course_role
from userland.web.rules.lti_link import LaunchCourse, decide, may_link

LINK = LmsLink("canvas", "ctx-1", "lab", "Databases", "https://lms/nrps", "https://lms/lineitems")


def namespace(name: str, **annotations: str) -> dict[str, object]:
    return {"metadata": {"name": name, "annotations": annotations}}


def test_links_round_trip_and_bad_entries_are_left_out() -> None:
    text = links_value([LINK, LmsLink("moodle", "17", "lab")])
    assert parse_links(text) == (LINK, LmsLink("moodle", "17", "lab"))
    bad = [{"registration": "x"}, "junk", {"registration": 1, "context": "c", "template": "t"}]
    raw = [*json.loads(text), *bad]
    assert parse_links(json.dumps(raw)) == (LINK, LmsLink("moodle", "17", "lab"))
    assert parse_links("not json") == () and parse_links(None) == () and parse_links("{}") == ()


def test_one_lms_context_of_a_registration_is_one_link_several_feed_one_course() -> None:
    links = with_link((), LINK)
    links = with_link(links, LmsLink("canvas", "ctx-2", "lab"))
    # A newer launch of ctx-1 with new service URLs updates it; its Template stays.
    links = with_link(links, LmsLink("canvas", "ctx-1", "other", "", "https://lms/nrps2"))
    assert [link.key for link in links] == [("canvas", "ctx-1"), ("canvas", "ctx-2")]
    assert links[0].template == "lab" and links[0].memberships == "https://lms/nrps2"
    assert links[0].lineitems == LINK.lineitems and links[0].title == "Databases"


def test_linked_courses_match_registration_and_context_both() -> None:
    spaces = [namespace("cs", **{ANNOTATION_LINKS: links_value([LINK])}),
              namespace("db", **{ANNOTATION_LINKS: links_value([LmsLink("moodle", "ctx-1", "ide")])}),
              namespace("plain")]
    assert [ns for ns, _ in linked_courses(spaces, "canvas", "ctx-1")] == ["cs"]
    assert [ns for ns, _ in linked_courses(spaces, "moodle", "ctx-1")] == ["db"]
    assert linked_courses(spaces, "canvas", "ctx-2") == []


def test_staff_patch_adds_once_and_moves_between_lms_lists_only() -> None:
    assert staff_patch({}, "Tina", "instructor") == {ANNOTATION_LTI_INSTRUCTORS: "tina"}
    assert staff_patch({ANNOTATION_LTI_INSTRUCTORS: "tina"}, "tina", "instructor") == {}
    # The LMS made tina an assistant now: off its instructors, onto its assistants.
    assert staff_patch({ANNOTATION_LTI_INSTRUCTORS: "bob,tina"}, "tina", "assistant") == {
        ANNOTATION_LTI_ASSISTANTS: "tina", ANNOTATION_LTI_INSTRUCTORS: "bob"}
    # The hand-written lists are never in a patch.
    assert "userland.dev/instructors" not in staff_patch({"userland.dev/instructors": "tina"}, "tina",
                                                         "assistant")


def test_lms_staff_count_as_course_staff() -> None:
    course = Course.from_namespace(namespace("cs", **{ANNOTATION_LTI_INSTRUCTORS: "tina",
                                                      ANNOTATION_LTI_ASSISTANTS: "tim",
                                                      "userland.dev/instructors": "teacher"}))
    assert course_role(Identity(login="tina"), course) == "instructor"
    assert course_role(Identity(login="tim"), course) == "assistant"
    assert course_role(Identity(login="teacher"), course) == "instructor"
    assert course_role(Identity(login="sam"), course) is None


def launch(role: str, login: str = "tina") -> LaunchCourse:
    return LaunchCourse(login=login, registration="canvas", context="ctx-1", title="Databases", role=role)


COURSES = [Course("cs", "CS 101", instructors=frozenset({"tina"})),
           Course("db", "DB 202", instructors=frozenset({"other"})),
           Course("empty", "No templates", instructors=frozenset({"tina"}))]
TEMPLATES = {"cs": ["lab", "ide"], "db": ["db"]}


def test_the_page_decides_by_launch_role_and_links() -> None:
    tina = Identity(login="tina")
    assert decide(None, tina, [], COURSES, TEMPLATES).outcome == "expired"
    assert decide(launch("instructor", "bob"), tina, [], COURSES, TEMPLATES).outcome == "not-yours"
    assert decide(launch("student"), tina, [], COURSES, TEMPLATES).outcome == "not-staff"
    assert decide(launch(""), tina, [], COURSES, TEMPLATES).outcome == "not-staff"
    linked = decide(launch("assistant"), tina, ["cs"], COURSES, TEMPLATES)
    assert (linked.outcome, linked.role, linked.linked) == ("linked", "assistant", ("cs",))
    assert decide(launch("assistant"), tina, [], COURSES, TEMPLATES).outcome == "wait-for-instructor"
    choose = decide(launch("instructor"), tina, [], COURSES, TEMPLATES)
    assert choose.outcome == "choose"
    # Only the courses they teach, with Templates to give students.
    assert [(c.course.namespace, c.templates) for c in choose.choices] == [("cs", ("ide", "lab"))]
    assert decide(launch("instructor"), Identity(login="tina"), [], COURSES[1:2], TEMPLATES).outcome == (
        "nothing-to-choose")
    # An admin may link to any course.
    admin = decide(launch("instructor", "root"), Identity(login="root", role="admin"), [], COURSES, TEMPLATES)
    assert [c.course.namespace for c in admin.choices] == ["cs", "db"]


def test_a_posted_choice_must_be_one_the_page_offered() -> None:
    choose = decide(launch("instructor"), Identity(login="tina"), [], COURSES, TEMPLATES)
    assert may_link(choose, "cs", "lab")
    assert not may_link(choose, "db", "db")  # not theirs
    assert not may_link(choose, "cs", "nope")
    student = decide(launch("student"), Identity(login="tina"), [], COURSES, TEMPLATES)
    assert not may_link(student, "cs", "lab")


def test_a_launch_record_is_read_strictly() -> None:
    good = {"login": "tina", "registration": "canvas", "context": "ctx-1", "title": "", "role": "instructor"}
    assert LaunchCourse.parse(good) == launch("instructor").__class__(**{**good, "memberships": "",
                                                                        "lineitems": ""})
    assert LaunchCourse.parse({**good, "login": 5}) is None
    assert LaunchCourse.parse({**good, "context": ""}) is None
    assert LaunchCourse.parse("x") is None


def test_a_roster_sync_changes_only_the_lms_staff_lists() -> None:
    from userland.platform.model.lti_links import staff_sync_patch
    notes = {ANNOTATION_LTI_INSTRUCTORS: "prof", ANNOTATION_LTI_ASSISTANTS: "tam",
             "userland.dev/instructors": "teacher"}
    assert staff_sync_patch(notes, [("tam", "instructor")], ["prof"]) == {
        ANNOTATION_LTI_INSTRUCTORS: "tam", ANNOTATION_LTI_ASSISTANTS: ""}
    assert staff_sync_patch(notes, [("prof", "instructor")], []) == {}
    assert staff_sync_patch(notes, [], ["teacher"]) == {}  # hand-written: never in a patch
