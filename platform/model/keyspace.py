"""The Redis keyspace of Userland: every key, key pattern and pub/sub channel, spelled once.

The keyspace is a contract between the gateway (with auth mounted in it) and the web UI, as the
`userland.dev/` annotations are (platform/model/naming.py): one process writes a key that another
reads, so both build it here. tests/unit/test_vocabulary.py fails when a `userland:` key is
spelled anywhere else; tests/unit/test_keyspace.py holds every key byte for byte, so that a Redis
that outlives an upgrade keeps every session, grant and request.

Each entry says who writes it, who reads it, its Redis type and value, and how long it lives.
"Digest" is always the SHA-256 hex of a secret (`digest`): a copy of Redis never yields a cookie,
a handoff code or an OAuth state. Pure: no I/O.

Sign-in (auth, in the gateway process; platform/clients/sessions.py, auth/*.py):
- `session_key`: a platform session. String, the session's JSON; EX = the session TTL
  (`session_ttl_seconds`). Written by auth at sign-in, read by the gateway on every request,
  deleted at sign-out (then announced on `INVALIDATION_CHANNEL`).
- `origin_session_key`: a student origin's session. String, JSON `{parent, origin, csrf[, grant]}`
  whose `parent` is a `session_key` and `grant` a `grant_key`; EX = the session TTL. Written by the
  gateway's handoff (auth/origin_sessions.py), read by the gateway on the student's origin.
- `origin_index_key`: a platform session's origin sessions. Hash, origin -> `origin_session_key`;
  EX = the session TTL. Written at each handoff, read and deleted at sign-out.
- `handoff_key`: a single-use handoff code. String, JSON `{parent, origin, next[, grant]}`; EX 60 s.
  Written by auth on the platform origin, taken (GETDEL) by the gateway on the student's origin.
- `handoff_count_key`: codes given to one platform session this minute. Integer; EX 60 s.
- `signout_key`: a sign-out chain. String, JSON `{login, origins}`; EX 300 s. Auth only.
- `login_binding_key`: which GitHub account a login is bound to. Hash `{github_id, bound_at}`; no
  TTL (an admin removes it). Auth only.
- `oauth_state_key`: a pending GitHub login. String, JSON `{verifier, next, nonce}`; EX 600 s.
  Written when a login starts, taken (GETDEL) by the callback. Auth only.
- `login_rate_key`: login starts from one address in one minute. Integer; EX 120 s. Auth only.
- `login_binding_key` also holds `lti` (an LMS user's `lti_subject_key` digest) instead of
  `github_id` when an LMS user holds the name (auth/lti_store.py).

LTI launches (auth, in the gateway process; auth/lti_store.py):
- `lti_state_key`: a pending LTI login (OIDC `state`). String, JSON `{nonce, issuer, client_id,
  target, bind, mode, params}`; EX 600 s. Written by `/lti/login`, taken (GETDEL) by `/lti/launch`.
- `lti_nonce_key`: a nonce an id_token already used. String "1", SET NX; EX until that token
  expires (at most 61 minutes).
- `lti_ticket_key`: a checked launch waiting for its browser (the new window, or the Platform
  Storage proof). String, JSON; EX 120 s. Taken (GETDEL) by `/lti/continue`.
- `lti_subject_key`: the login an LMS user (issuer, sub) is bound to. Hash `{login, bound_at}`;
  no TTL.
- `lti_course_key`: what a checked launch from an LMS course tells the web UI's course linking
  (web/lti_link.py): JSON `{login, registration, context, title, role, memberships, lineitems}`;
  EX 1800 s. Written by `/lti/launch` (auth/lti_store.py), read by the web UI, which only
  honours it for the login it names.
- `lti_sync_key`: a course's last LMS roster sync (web/lti_sync.py): JSON `{time, actor, ok,
  summary, error, changes, skipped}`; no TTL (one per course). `lti_sync_lock_key`: one web UI
  replica syncs a course at a time. String "1", SET NX; EX the sync interval.
- `lti_grades_lock_key`: one grade passback pass of an Assignment at a time (web/lti_grades.py).
- `lti_assignment_launches_key`: a course's Assignments the LMS launched through a deep link's
  resource link (auth/lti.py): Hash `{<assignment name>: JSON {registration, context, lineitem}}`;
  EX 86400 s. Written by `/lti/launch`, taken (HGETALL + HDEL) by the web UI, which then finds
  the Assignment's gradebook column through AGS (web/lti_line_items.py).
  String "1", SET NX; EX 50 s, deleted when the pass ends.
- `INVALIDATION_CHANNEL`: the digest of every cleared platform or origin session (sign-out, a
  help grant that ended). Published by auth and by the grant store's `end`; every gateway
  replica listens (proxy/session_cache.py) to drop it from its cache and close its connections.
- `SESSIONS_PATTERN`: a SCAN pattern matching both kinds of session (proxy/session_census.py
  counts them for /metrics).

Help in the lab (platform/clients/grant_store.py: the web UI writes, the gateway and auth read):
- `grant_key`: a live grant. String, the grant's JSON; PX = until the grant ends.
- `grant_log_key`: a grant's record. String, JSON; EX `grants.HISTORY_SECONDS` (30 days).
- `grant_sessions_key`: the origin sessions a grant let in. Set of their digests; PEXPIRE = the
  grant's remaining time + 60 s. Added by the gateway's handoff, read when the grant ends.
- `course_grants_key`: a course's live grants. Sorted set, grant id -> end (ms); no TTL (members
  leave when the grant ends or is claimed as run out).
- `grant_pair_key`: the live grant of one (course, student, staff). String, the grant id; PX =
  until the grant ends.
- `grant_history_key`: a student's grants in a course. Sorted set, id -> start (s); EX 30 days.
- `help_queue_key`: a course's open requests. Sorted set, student -> when they asked; no TTL
  (an entry whose request expired is dropped when read). Web UI only.
- `help_request_key`: one student's open request. String, JSON `{message, asked}`; EX 12 h.
- `help_asks_key`, `help_joins_key`: a student's asks, a staff member's joins in a course in
  the current window. Integer; EX = the window (600 s). Web UI only.
- `HELP_CHANNEL`: the name of a course whose requests or grants changed. Published by the web UI
  (queue and grant store); every web UI replica listens (web/help_monitor.py).

Web UI, elsewhere:
- `audit_stream_key`: the audit log of one course, or across all courses (course ""). Stream,
  capped by MAXLEN (web/audit.py); no TTL.
- `repository_checks_key`: repository checks one member of staff asked for in the current
  window. Integer; EX = the window (web/routes_assignments.py).

Gateway (proxy/activity.py):
- `activity_key`: the newest use of an environment any replica saw. String, RFC 3339; no TTL.
- `activity_lease_key`: which replica writes that use to the API server. String "1", SET NX;
  EX = the API write interval.
- `wake_key`: a wake of a sleeping environment already asked for. String "1", SET NX; EX 10 s.
"""

from __future__ import annotations

import hashlib

SESSION_PREFIX = "userland:session:"
ORIGIN_SESSION_PREFIX = "userland:origin-session:"
# A hash per platform session (it was a set under `origins-of:`; never reuse that name).
ORIGIN_INDEX_PREFIX = "userland:origin-index:"
HANDOFF_PREFIX = "userland:handoff:"
HANDOFF_COUNT_PREFIX = "userland:handoff-count:"
SIGNOUT_PREFIX = "userland:signout:"
LOGIN_BINDING_PREFIX = "userland:login-id:"
OAUTH_STATE_PREFIX = "userland:oauth-state:"
LOGIN_RATE_PREFIX = "userland:login-rate:"
INVALIDATION_CHANNEL = "userland:session-invalidations"
GITHUB_LINK_PREFIX = "userland:github-link:"  # a GitHub id linked to an LMS user's login
LMS_LINK_PREFIX = "userland:lms-link:"  # a GitHub login's armed "link my LMS account"
LTI_STATE_PREFIX = "userland:lti-state:"
LTI_NONCE_PREFIX = "userland:lti-nonce:"
LTI_TICKET_PREFIX = "userland:lti-ticket:"
LTI_SUBJECT_PREFIX = "userland:lti-subject:"
LTI_COURSE_PREFIX = "userland:lti-course:"
LTI_SYNC_PREFIX = "userland:lti-sync:"
LTI_SYNC_LOCK_PREFIX = "userland:lti-sync-lock:"
LTI_GRADES_LOCK_PREFIX = "userland:lti-grades-lock:"
LTI_ASSIGNMENT_LAUNCHES_PREFIX = "userland:lti-assignment-launches:"
# Both session prefixes end in "session:"; one SCAN walk counts both kinds.
SESSIONS_PATTERN = "userland:*session:*"

GRANT_PREFIX = "userland:grant:"
GRANT_LOG_PREFIX = "userland:grant-log:"
GRANT_SESSIONS_PREFIX = "userland:grant-sessions:"
COURSE_GRANTS_PREFIX = "userland:grants:"
GRANT_PAIR_PREFIX = "userland:grant-pair:"
GRANT_HISTORY_PREFIX = "userland:grant-history:"
HELP_QUEUE_PREFIX = "userland:help:"
HELP_REQUEST_PREFIX = "userland:help-request:"
HELP_ASKS_PREFIX = "userland:help-asks:"
HELP_JOINS_PREFIX = "userland:help-joins:"
CHECK_RATE_PREFIX = "userland:check-rate:"  # Check my work: a student's last check in a course
HELP_CHANNEL = "userland:help-changes"

AUDIT_STREAM = "userland:audit"  # across all courses; a course's stream adds ":<course>"
REPOSITORY_CHECKS_PREFIX = "userland:repository-checks:"

ACTIVITY_PREFIX = "userland:activity:"
ACTIVITY_LEASE_PREFIX = ACTIVITY_PREFIX + "lease:"
WAKE_PREFIX = "userland:wake:"


def digest(secret: str) -> str:
    """The SHA-256 hex of a secret (a cookie id, a code, a state): what keys hold instead."""
    return hashlib.sha256(secret.encode()).hexdigest()


def pattern(prefix: str) -> str:
    """The SCAN/KEYS pattern of every key under `prefix`."""
    return prefix + "*"


# -- sign-in

def session_key(cookie_id: str) -> str:
    return session_key_of(digest(cookie_id))


def session_key_of(session_digest: str) -> str:
    """The platform session whose cookie id has this digest."""
    return SESSION_PREFIX + session_digest


def origin_session_key(session_digest: str) -> str:
    """The origin session whose cookie id has this digest."""
    return ORIGIN_SESSION_PREFIX + session_digest


def origin_index_key(platform_digest: str) -> str:
    """The origin sessions of the platform session whose cookie id has this digest."""
    return ORIGIN_INDEX_PREFIX + platform_digest


def handoff_key(code: str) -> str:
    return HANDOFF_PREFIX + digest(code)


def handoff_count_key(platform_digest: str) -> str:
    return HANDOFF_COUNT_PREFIX + platform_digest


def signout_key(chain: str) -> str:
    return SIGNOUT_PREFIX + digest(chain)


def login_binding_key(login: str) -> str:
    """GitHub logins are case-insensitive: one key per login whatever its case."""
    return LOGIN_BINDING_PREFIX + login.lower()


def github_link_key(github_id: int) -> str:
    """The login an LMS user linked this GitHub account to (auth/account_link.py)."""
    return GITHUB_LINK_PREFIX + str(int(github_id))


def lms_link_key(login: str) -> str:
    """`login`'s armed link of an LMS account: single use, 10 minutes (auth/account_link.py)."""
    return LMS_LINK_PREFIX + login.lower()


def oauth_state_key(state: str) -> str:
    return OAUTH_STATE_PREFIX + digest(state)


def lti_state_key(state: str) -> str:
    return LTI_STATE_PREFIX + digest(state)


def lti_nonce_key(issuer: str, nonce: str) -> str:
    return LTI_NONCE_PREFIX + digest(f"{issuer}\0{nonce}")


def lti_ticket_key(ticket: str) -> str:
    return LTI_TICKET_PREFIX + digest(ticket)


def lti_subject_key(subject_digest: str) -> str:
    """The LMS user whose (issuer, sub) has this digest (auth/rules/lti_identity.py)."""
    return LTI_SUBJECT_PREFIX + subject_digest


def lti_course_key(launch: str) -> str:
    """A checked launch's LMS course, for the web UI's course linking (web/lti_link.py)."""
    return LTI_COURSE_PREFIX + digest(launch)


def lti_sync_key(namespace: str) -> str:
    """A course's last LMS roster sync (web/lti_sync.py)."""
    return LTI_SYNC_PREFIX + namespace


def lti_sync_lock_key(namespace: str) -> str:
    return LTI_SYNC_LOCK_PREFIX + namespace


def lti_assignment_launches_key(namespace: str) -> str:
    """The course's Assignments the LMS launched since the web UI last looked (web/lti_line_items.py)."""
    return LTI_ASSIGNMENT_LAUNCHES_PREFIX + namespace


def lti_grades_lock_key(namespace: str, assignment: str) -> str:
    """One grade passback pass of an Assignment at a time (web/lti_grades.py)."""
    return f"{LTI_GRADES_LOCK_PREFIX}{namespace}/{assignment}"


def login_rate_key(minute: int, address: str) -> str:
    """Login starts from `address` in minute `minute` (Unix time // 60)."""
    return f"{LOGIN_RATE_PREFIX}{minute}:{address}"


# -- help in the lab

def grant_key(grant_id: str) -> str:
    return GRANT_PREFIX + grant_id


def grant_log_key(grant_id: str) -> str:
    return GRANT_LOG_PREFIX + grant_id


def grant_sessions_key(grant_id: str) -> str:
    return GRANT_SESSIONS_PREFIX + grant_id


def course_grants_key(course: str) -> str:
    return COURSE_GRANTS_PREFIX + course


def grant_pair_key(course: str, student: str, staff: str) -> str:
    # The grant store's `end` script builds the same key from a record (platform/clients/grant_store.py).
    return f"{GRANT_PAIR_PREFIX}{course}:{student}:{staff}"


def grant_history_key(course: str, student: str) -> str:
    return f"{GRANT_HISTORY_PREFIX}{course}:{student}"


def help_queue_key(course: str) -> str:
    return HELP_QUEUE_PREFIX + course


def help_request_key(course: str, student: str) -> str:
    return f"{HELP_REQUEST_PREFIX}{course}:{student}"


def help_asks_key(course: str, student: str) -> str:
    return f"{HELP_ASKS_PREFIX}{course}:{student}"


def check_rate_key(course: str, student: str) -> str:
    """Set (with an expiry of USERLAND_CHECK_INTERVAL_SECONDS) when `student` checks their work."""
    return f"{CHECK_RATE_PREFIX}{course}:{student}"


def help_joins_key(course: str, staff: str) -> str:
    return f"{HELP_JOINS_PREFIX}{course}:{staff}"


# -- web UI

def audit_stream_key(course: str) -> str:
    """A course's audit stream; "" is the stream across every course."""
    return f"{AUDIT_STREAM}:{course}" if course else AUDIT_STREAM


def repository_checks_key(login: str) -> str:
    return REPOSITORY_CHECKS_PREFIX + login


# -- gateway

def activity_key(namespace: str, name: str) -> str:
    return f"{ACTIVITY_PREFIX}{namespace}/{name}"


def activity_lease_key(namespace: str, name: str) -> str:
    return f"{ACTIVITY_LEASE_PREFIX}{namespace}/{name}"


def wake_key(namespace: str, name: str) -> str:
    return f"{WAKE_PREFIX}{namespace}/{name}"
