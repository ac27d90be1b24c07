"""Help grants, the pure part (platform/model/grants.py): a course's settings, records, messages."""

from __future__ import annotations

import pytest

from userland.platform.model.grants import (
    DEFAULT_LIMIT_SECONDS,
    MESSAGE_MAX,
    Grant,
    clean_message,
    decode_grant,
    encode_grant,
    help_settings,
)

ACCESS = "userland.dev/staff-access"
LIMIT = "userland.dev/help-limit"

# annotations -> (staff access, limit seconds, number of problems reported)
SETTINGS = [
    ({}, "on-request", DEFAULT_LIMIT_SECONDS, 0),
    ({ACCESS: "on-request"}, "on-request", DEFAULT_LIMIT_SECONDS, 0),
    ({ACCESS: "instructors"}, "instructors", DEFAULT_LIMIT_SECONDS, 0),
    ({ACCESS: " Instructors "}, "instructors", DEFAULT_LIMIT_SECONDS, 0),
    # Unknown values fall to the stricter setting, and staff are told.
    ({ACCESS: "assistants"}, "on-request", DEFAULT_LIMIT_SECONDS, 1),
    ({ACCESS: "anyone"}, "on-request", DEFAULT_LIMIT_SECONDS, 1),
    ({LIMIT: "45m"}, "on-request", 45 * 60, 0),
    ({LIMIT: "1h30m"}, "on-request", 90 * 60, 0),
    ({LIMIT: "8h"}, "on-request", 8 * 3600, 0),
    ({LIMIT: "5m"}, "on-request", 300, 0),
    # Out of range or not a duration: the default, and staff are told.
    ({LIMIT: "4m"}, "on-request", DEFAULT_LIMIT_SECONDS, 1),
    ({LIMIT: "9h"}, "on-request", DEFAULT_LIMIT_SECONDS, 1),
    ({LIMIT: "an hour"}, "on-request", DEFAULT_LIMIT_SECONDS, 1),
    ({LIMIT: "60"}, "on-request", DEFAULT_LIMIT_SECONDS, 1),
    ({ACCESS: "x", LIMIT: "y"}, "on-request", DEFAULT_LIMIT_SECONDS, 2),
]


@pytest.mark.parametrize(("annotations", "access", "limit", "problems"), SETTINGS)
def test_course_help_settings(annotations: dict[str, str], access: str, limit: int, problems: int) -> None:
    settings = help_settings(annotations)
    found = (settings.staff_access, settings.limit_seconds, len(settings.problems))
    assert found == (access, limit, problems)


GRANT = Grant(id="A" * 22, course="cs101", student="alice", staff="tina", role="assistant", basis="request",
              started=1_800_000_000.5, expires=1_800_003_600.5, message="my loop never ends",
              staff_teams="uni/tas")


def test_a_grant_round_trips() -> None:
    assert decode_grant(encode_grant(GRANT)) == GRANT
    ended = GRANT.ended_at(1_800_000_100.0, "alice", "student")
    assert decode_grant(encode_grant(ended)) == ended
    assert ended.until == 1_800_000_100.0 and GRANT.until == GRANT.expires


def test_liveness_is_until_its_end() -> None:
    assert GRANT.live(GRANT.expires - 0.001)
    assert not GRANT.live(GRANT.expires)
    assert not GRANT.ended_at(GRANT.started + 1, "tina", "done").live(GRANT.started + 2)


@pytest.mark.parametrize("raw", [
    None, b"", b"[]", b"{}", b"not json",
    encode_grant(GRANT).replace('"student":"alice"', '"student":"../bob"'),   # not a login
    encode_grant(GRANT).replace('"course":"cs101"', '"course":"CS 101"'),     # not a namespace
    encode_grant(GRANT).replace('"id":"' + "A" * 22, '"id":"a:b'),            # not an id
    encode_grant(GRANT).replace('"expires":1800003600.5', '"expires":"later"'),
])
def test_malformed_records_are_no_grants(raw: str | bytes | None) -> None:
    assert decode_grant(raw) is None


def test_a_message_is_one_short_line() -> None:
    assert clean_message("  my code\n doesn't\trun  ") == "my code doesn't run"
    assert clean_message(None) == ""
    assert len(clean_message("x" * 1000)) == MESSAGE_MAX
