"""The LMS content picker's decisions and content items (web/rules/lti_deep_link.py), and the
signed answer's claims they make (platform/model/lti_services_deeplink.py): plain data in."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import jwt
import pytest
from joserfc.jwk import RSAKey

from userland.platform.model import lti_services_deeplink as dl
from userland.platform.model.lti_services_keys import ToolKey
from userland.web.rules import lti_deep_link as rules
from userland.web.rules import lti_grades
from userland.web.rules.lti_link import Decision

SETTINGS = {"deployment_id": "dep-1", "deep_link_return_url": "https://lms.example/dl/return",
            "accept_types": ["ltiResourceLink"], "accept_multiple": False, "data": "opaque"}
LAUNCH_URL = "http://userland.test/lti/launch"
LINKED = Decision("linked", role="instructor", linked=("cs101",))


def request() -> rules.DeepLinkRequest:
    found = rules.DeepLinkRequest.parse(SETTINGS)
    assert found is not None
    return found


def picker(**kwargs: object) -> rules.Picker:
    args: dict[str, object] = {"templates": [("lab", "Python IDE")],
                               "assignments": [("week-2", "Week 2", ""), ("week-1", "Week 1", "Mon 7 Dec")],
                               "may_create": True}
    return rules.decide(LINKED, request(), namespace_title="CS 101", **{**args, **kwargs})  # type: ignore[arg-type]


def test_the_refusals_of_the_linking_page_are_the_pickers() -> None:
    for outcome in ("expired", "not-yours", "not-staff"):
        assert rules.decide(Decision(outcome), request()).outcome == outcome  # type: ignore[arg-type]
    assert rules.decide(Decision("choose", role="instructor"), request()).outcome == "not-linked"
    assert rules.decide(Decision("wait-for-instructor", role="assistant"), request()).outcome == "not-linked"
    none = rules.decide(LINKED, None,
                        settings_problem="The LMS's deep-linking settings have no return address.")
    assert none.outcome == "no-settings" and "no return address" in none.message


def test_a_linked_course_offers_its_environment_its_assignments_and_a_new_one() -> None:
    found = picker()
    assert found.outcome == "choose" and found.namespace == "cs101"
    assert [o.key for o in found.offers] == ["template:cs101/lab", "assignment:cs101/week-1",
                                             "assignment:cs101/week-2", "new:cs101/"]
    assert found.offers[1].detail == "Mon 7 Dec"
    # Who may not create assignments (an assistant) is offered none to create.
    assert [o.kind for o in picker(may_create=False, assignments=[]).offers] == ["template"]


def test_a_posted_choice_counts_only_when_the_page_offered_it() -> None:
    found = picker()
    assert rules.chosen(found, "assignment:cs101/week-1") == found.offers[1]
    for forged in ("assignment:other-course/week-1", "template:cs101/admin", "assignment:cs101/week-3",
                   "new:kube-system/", "", "template:cs101/lab/../x"):
        assert rules.chosen(found, forged) is None, forged
    assert rules.chosen(rules.Picker("not-staff"), "template:cs101/lab") is None


def test_an_lms_that_accepts_no_tool_links_here_is_told_plainly() -> None:
    other = rules.DeepLinkRequest.parse({**SETTINGS, "accept_types": ["file", "html"]})
    found = rules.decide(LINKED, other, templates=[("lab", "IDE")])
    assert found.outcome == "no-settings" and "does not accept a link" in found.message


def test_settings_that_cannot_be_answered_say_why() -> None:
    assert rules.DeepLinkRequest.parse(None) is None
    assert rules.DeepLinkRequest.parse({**SETTINGS, "deployment_id": ""}) is None
    with pytest.raises(dl.DeepLinkError, match="https"):
        rules.DeepLinkRequest.parse({**SETTINGS, "deep_link_return_url": "http://lms.example/r"})


def test_points_are_a_positive_number() -> None:
    assert rules.points("") == 100 and rules.points(" 10,5 ") == 10.5
    for bad in ("ten", "0", "-3", "nan", "1e9"):
        with pytest.raises(dl.DeepLinkError):
            rules.points(bad)


def test_an_assignments_item_carries_its_gradebook_column_found_again_by_its_uid() -> None:
    offer = rules.Offer("assignment", "cs101", "week-1", "Week 1")
    due = datetime(2026, 12, 7, 23, 59, tzinfo=UTC)
    item = rules.content_item(offer, launch_url=LAUNCH_URL, title="Week 1", uid="uid-1", maximum=10, due=due)
    assert item["type"] == "ltiResourceLink" and item["url"] == LAUNCH_URL and item["title"] == "Week 1"
    assert item["lineItem"] == {"scoreMaximum": 10, "label": "Week 1", "resourceId": "uid-1",
                                "tag": "userland"}
    assert item["custom"] == {"userland_assignment": "cs101/week-1"}
    assert item["submission"]["endDateTime"].startswith("2026-12-07T23:59:00")
    with pytest.raises(dl.DeepLinkError):  # an assignment without its uid has no column to find again
        rules.content_item(offer, launch_url=LAUNCH_URL, title="Week 1")


def test_the_environments_item_has_no_column() -> None:
    offer = rules.Offer("template", "cs101", "lab", "IDE")
    item = rules.content_item(offer, launch_url=LAUNCH_URL, title="IDE")
    assert "lineItem" not in item and item["custom"] == {"userland_template": "cs101/lab"}
    # Only the tool's own (configured) address may be plain http: any other link must be https.
    with pytest.raises(dl.DeepLinkError, match="https"):
        dl.resource_link(url="http://elsewhere.example/x", title="x")


def test_the_line_item_annotation_is_what_grade_passback_reads() -> None:
    text = rules.line_item_annotation("canvas", "ctx-1", 10.0, "Week 1")
    assert lti_grades.parse_link(text) == lti_grades.LineItemLink("canvas", "ctx-1", 10.0, "Week 1")
    assert json.loads(text)["scoreMaximum"] == 10.0


def test_the_signed_answer_has_the_claims_the_lms_checks() -> None:
    key = ToolKey(kid="kid-1", private_pem=RSAKey.generate_key(2048).as_pem(private=True).decode())
    offer = rules.Offer("assignment", "cs101", "week-1", "Week 1")
    item = rules.content_item(offer, launch_url=LAUNCH_URL, title="Week 1", uid="uid-1", maximum=10)
    token = dl.deep_linking_response(key, client_id="client-1", platform_issuer="https://lms.example",
                                     deployment_id="dep-1", settings=request().settings, items=[item],
                                     now=1_800_000_000, nonce="n-1")
    assert jwt.get_unverified_header(token)["kid"] == "kid-1"
    public = jwt.PyJWK(key.public_jwk()).key
    claims = jwt.decode(token, public, algorithms=["RS256"], audience="https://lms.example",
                        options={"verify_exp": False, "verify_iat": False})
    assert (claims["iss"], claims["nonce"], claims["exp"] - claims["iat"]) == ("client-1", "n-1", 300)
    assert claims[dl.CLAIM + "deployment_id"] == "dep-1" and claims[dl.DL_CLAIM + "data"] == "opaque"
    assert claims[dl.CLAIM + "message_type"] == "LtiDeepLinkingResponse"
    assert claims[dl.DL_CLAIM + "content_items"] == [item]


def test_the_due_date_follows_the_columns_end_date_when_it_changes() -> None:
    monday = datetime(2026, 12, 7, 23, 59, tzinfo=UTC)
    friday = datetime(2026, 12, 11, 12, 0, tzinfo=UTC)
    assert rules.followed_due(monday, friday, None) == friday  # first seen: the LMS's date wins
    assert rules.followed_due(None, friday, None) == friday
    assert rules.followed_due(friday, friday, None) is None  # the same already
    assert rules.followed_due(monday, None, None) is None  # the column has none: the due date stays
    # Followed once; staff moved the due date in Userland since: it stays until the LMS's changes.
    assert rules.followed_due(monday, friday, friday) is None
    later = datetime(2026, 12, 14, 12, 0, tzinfo=UTC)
    assert rules.followed_due(monday, later, friday) == later
