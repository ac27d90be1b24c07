"""Every Redis key, pattern and channel of platform/model/keyspace.py, byte for byte.

A running Redis outlives an upgrade of the gateway and the web UI: a key spelled differently
after it would sign every student out, lose every grant and every open help request. So the
expected keys here are literals (this file and the keyspace module are the only places allowed to
spell a `userland:` key, tests/unit/test_vocabulary.py), and every name the module exports must
be in one of the tables below.
"""

from __future__ import annotations

import fnmatch
import hashlib
import inspect
from collections.abc import Callable

import pytest

from userland.platform.model import keyspace

SHA_COOKIE = hashlib.sha256(b"cookie-id").hexdigest()
DIGEST = "d" * 64

BUILT: list[tuple[Callable[..., str], tuple[object, ...], str]] = [
    (keyspace.session_key, ("cookie-id",), "userland:session:" + SHA_COOKIE),
    (keyspace.session_key_of, (DIGEST,), "userland:session:" + DIGEST),
    (keyspace.origin_session_key, (DIGEST,), "userland:origin-session:" + DIGEST),
    (keyspace.origin_index_key, (DIGEST,), "userland:origin-index:" + DIGEST),
    (keyspace.handoff_key, ("cookie-id",), "userland:handoff:" + SHA_COOKIE),
    (keyspace.handoff_count_key, (DIGEST,), "userland:handoff-count:" + DIGEST),
    (keyspace.signout_key, ("cookie-id",), "userland:signout:" + SHA_COOKIE),
    (keyspace.login_binding_key, ("MixedCase",), "userland:login-id:mixedcase"),
    (keyspace.oauth_state_key, ("cookie-id",), "userland:oauth-state:" + SHA_COOKIE),
    (keyspace.lti_state_key, ("cookie-id",), "userland:lti-state:" + SHA_COOKIE),
    (keyspace.lti_nonce_key, ("https://lms", "n1"),
     "userland:lti-nonce:" + hashlib.sha256(b"https://lms\0n1").hexdigest()),
    (keyspace.lti_ticket_key, ("cookie-id",), "userland:lti-ticket:" + SHA_COOKIE),
    (keyspace.lti_subject_key, (DIGEST,), "userland:lti-subject:" + DIGEST),
    (keyspace.login_rate_key, (29_000_000, "203.0.113.9"), "userland:login-rate:29000000:203.0.113.9"),
    (keyspace.grant_key, ("g1",), "userland:grant:g1"),
    (keyspace.grant_log_key, ("g1",), "userland:grant-log:g1"),
    (keyspace.grant_sessions_key, ("g1",), "userland:grant-sessions:g1"),
    (keyspace.course_grants_key, ("cs101",), "userland:grants:cs101"),
    (keyspace.grant_pair_key, ("cs101", "alice", "tom"), "userland:grant-pair:cs101:alice:tom"),
    (keyspace.grant_history_key, ("cs101", "alice"), "userland:grant-history:cs101:alice"),
    (keyspace.help_queue_key, ("cs101",), "userland:help:cs101"),
    (keyspace.help_request_key, ("cs101", "alice"), "userland:help-request:cs101:alice"),
    (keyspace.help_asks_key, ("cs101", "alice"), "userland:help-asks:cs101:alice"),
    (keyspace.check_rate_key, ("cs101", "alice"), "userland:check-rate:cs101:alice"),
    (keyspace.help_joins_key, ("cs101", "tom"), "userland:help-joins:cs101:tom"),
    (keyspace.audit_stream_key, ("cs101",), "userland:audit:cs101"),
    (keyspace.audit_stream_key, ("",), "userland:audit"),
    (keyspace.repository_checks_key, ("tom",), "userland:repository-checks:tom"),
    (keyspace.activity_key, ("cs101", "vscode-alice"), "userland:activity:cs101/vscode-alice"),
    (keyspace.activity_lease_key, ("cs101", "vscode-alice"), "userland:activity:lease:cs101/vscode-alice"),
    (keyspace.wake_key, ("cs101", "vscode-alice"), "userland:wake:cs101/vscode-alice"),
    (keyspace.pattern, ("userland:oauth-state:",), "userland:oauth-state:*"),
    (keyspace.digest, ("cookie-id",), SHA_COOKIE),
    (keyspace.lti_course_key, ("cookie-id",), "userland:lti-course:" + SHA_COOKIE),
    (keyspace.lti_sync_key, ("cs101",), "userland:lti-sync:cs101"),
    (keyspace.lti_sync_lock_key, ("cs101",), "userland:lti-sync-lock:cs101"),
    (keyspace.lti_grades_lock_key, ("cs101", "week1"), "userland:lti-grades-lock:cs101/week1"),
    (keyspace.lti_assignment_launches_key, ("cs101",), "userland:lti-assignment-launches:cs101"),
    (keyspace.github_link_key, (4242,), "userland:github-link:4242"),
    (keyspace.lms_link_key, ("Alice",), "userland:lms-link:alice"),
]

CONSTANTS = {
    "SESSION_PREFIX": "userland:session:",
    "ORIGIN_SESSION_PREFIX": "userland:origin-session:",
    "ORIGIN_INDEX_PREFIX": "userland:origin-index:",
    "HANDOFF_PREFIX": "userland:handoff:",
    "HANDOFF_COUNT_PREFIX": "userland:handoff-count:",
    "SIGNOUT_PREFIX": "userland:signout:",
    "LOGIN_BINDING_PREFIX": "userland:login-id:",
    "OAUTH_STATE_PREFIX": "userland:oauth-state:",
    "LOGIN_RATE_PREFIX": "userland:login-rate:",
    "INVALIDATION_CHANNEL": "userland:session-invalidations",
    "GITHUB_LINK_PREFIX": "userland:github-link:",
    "LMS_LINK_PREFIX": "userland:lms-link:",
    "LTI_STATE_PREFIX": "userland:lti-state:",
    "LTI_NONCE_PREFIX": "userland:lti-nonce:",
    "LTI_TICKET_PREFIX": "userland:lti-ticket:",
    "LTI_SUBJECT_PREFIX": "userland:lti-subject:",
    "LTI_COURSE_PREFIX": "userland:lti-course:",
    "LTI_SYNC_PREFIX": "userland:lti-sync:",
    "LTI_SYNC_LOCK_PREFIX": "userland:lti-sync-lock:",
    "LTI_GRADES_LOCK_PREFIX": "userland:lti-grades-lock:",
    "LTI_ASSIGNMENT_LAUNCHES_PREFIX": "userland:lti-assignment-launches:",
    "SESSIONS_PATTERN": "userland:*session:*",
    "GRANT_PREFIX": "userland:grant:",
    "GRANT_LOG_PREFIX": "userland:grant-log:",
    "GRANT_SESSIONS_PREFIX": "userland:grant-sessions:",
    "COURSE_GRANTS_PREFIX": "userland:grants:",
    "GRANT_PAIR_PREFIX": "userland:grant-pair:",
    "GRANT_HISTORY_PREFIX": "userland:grant-history:",
    "HELP_QUEUE_PREFIX": "userland:help:",
    "HELP_REQUEST_PREFIX": "userland:help-request:",
    "HELP_ASKS_PREFIX": "userland:help-asks:",
    "CHECK_RATE_PREFIX": "userland:check-rate:",
    "HELP_JOINS_PREFIX": "userland:help-joins:",
    "HELP_CHANNEL": "userland:help-changes",
    "AUDIT_STREAM": "userland:audit",
    "REPOSITORY_CHECKS_PREFIX": "userland:repository-checks:",
    "ACTIVITY_PREFIX": "userland:activity:",
    "ACTIVITY_LEASE_PREFIX": "userland:activity:lease:",
    "WAKE_PREFIX": "userland:wake:",
}


@pytest.mark.parametrize(("build", "args", "expected"), BUILT, ids=lambda v: getattr(v, "__name__", None))
def test_every_key_is_built_as_before(build: Callable[..., str], args: tuple[object, ...],
                                      expected: str) -> None:
    assert build(*args) == expected


@pytest.mark.parametrize(("name", "expected"), sorted(CONSTANTS.items()))
def test_every_prefix_and_channel_is_spelled_as_before(name: str, expected: str) -> None:
    assert getattr(keyspace, name) == expected


def test_the_tables_cover_everything_the_module_exports() -> None:
    functions = {name for name, value in vars(keyspace).items()
                 if inspect.isfunction(value) and value.__module__ == keyspace.__name__}
    constants = {name for name, value in vars(keyspace).items() if name.isupper() and isinstance(value, str)}
    assert functions == {build.__name__ for build, _, _ in BUILT}
    assert constants == set(CONSTANTS)


def test_the_session_census_pattern_matches_both_kinds_of_session_and_nothing_else() -> None:
    def matches(key: str) -> bool:
        return fnmatch.fnmatchcase(key, keyspace.SESSIONS_PATTERN)

    assert matches(keyspace.session_key("a")) and matches(keyspace.origin_session_key(DIGEST))
    others = [build(*args) for build, args, _ in BUILT
              if build not in (keyspace.session_key, keyspace.session_key_of, keyspace.origin_session_key,
                               keyspace.digest, keyspace.pattern)]
    assert not [key for key in others if matches(key)]


def test_each_prefix_is_spelled_once() -> None:
    values = list(CONSTANTS.values())
    assert len(values) == len(set(values))
