"""Naming rules: logins, child object names and labels, shared by every component.

Every name built here is a valid DNS-1123 label (at most 63 characters, lowercase
alphanumerics and '-', starting and ending with an alphanumeric) for every valid login and
template name. Names that would be too long are shortened with a hash of the full name,
so two different inputs never share a name.
"""

from __future__ import annotations

import hashlib
import re

# A GitHub login: 1-39 alphanumerics or single hyphens, not starting or ending with one.
# RE2-compatible (no look-ahead), so the CRD schema uses the very same string; the length
# limit is separate (LOGIN_MAX here, maxLength in the schema).
LOGIN_PATTERN = r"^[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*$"
LOGIN_MAX = 39
_LOGIN_RE = re.compile(LOGIN_PATTERN)
# A Kubernetes object name that is also a DNS-1123 label (Templates must be one).
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_LABEL_RE = re.compile(DNS_LABEL_PATTERN)
DNS_LABEL_MAX = 63
TEMPLATE_NAME_MAX = 63

GROUP = "userland.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_USER = "userland.dev/user"
LABEL_TEMPLATE = "userland.dev/template"
LABEL_USERLAND = "userland.dev/userland"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "userland-operator"
ANNOTATION_SPEC_HASH = "userland.dev/spec-hash"
ANNOTATION_UPSTREAM = "userland.dev/upstream"
# Set on a Userland (by the web UI) to restart its environment; the operator copies it into the
# Deployment's pod template, as `kubectl rollout restart` does with kubectl.kubernetes.io/restartedAt.
ANNOTATION_RESTARTED_AT = "userland.dev/restartedAt"
FINALIZER_PVC = "userland.dev/delete-storage"
# Sleep and wake (docs/sleep.md). On a Userland: when its student last used it (RFC 3339), written
# by the gateway at most once every few minutes, and at once when a request wakes it; the web
# UI's "start" writes it too. On a Template: "start all" (`kubectl annotate templates --all
# userland.dev/wake-all=$(date -u +%FT%TZ)`): every environment of it counts as used at that time.
ANNOTATION_LAST_ACTIVITY = "userland.dev/last-activity"
ANNOTATION_WAKE_ALL = "userland.dev/wake-all"
ANNOTATION_STARTED_AT = "userland.dev/started-at"
ANNOTATION_STARTED_BY = "userland.dev/started-by"
# Assignments (docs/assignments.md). On an Assignment, set by the web UI (or kubectl): "hand out
# again" (re-read the source's ref, give every student the files again), "collect now" (a copy of
# every student's folder as it is at that time), and "feedback uploaded" (the store's feedback
# for some students changed): each an RFC 3339 time, as `userland.dev/restartedAt` is.
ANNOTATION_HANDOUT_AT = "userland.dev/handout-at"
ANNOTATION_COLLECT_NOW = "userland.dev/collect-now"
# Grade again (docs/grading.md): `<time>` for everyone, `<time> alice bob` for those students.
ANNOTATION_REGRADE = "userland.dev/regrade"
# Check my work (platform/model/checks.py): `check.userland.dev/<login>: "<time> <template>"`.
ANNOTATION_CHECK_PREFIX = "check.userland.dev/"
ANNOTATION_FEEDBACK_AT = "userland.dev/feedback-at"
# On a Secret an Assignment names in spec.source.tokenSecret: the URL prefixes (one a line, or
# separated by spaces or commas) its token may be sent to. A Secret without it, or an Assignment
# whose URL matches none, gets no token (reason TokenNotAllowed): naming a Secret must not be a
# way to send its token to a host of one's choosing.
ANNOTATION_GIT_URLS = "userland.dev/git-urls"
# The operator's worker Pods (hand out, collect, return feedback): the Assignment they work for,
# the kind of work, and what they do (a JSON summary: the students, the commit or deadline).
LABEL_ASSIGNMENT = "userland.dev/assignment"
LABEL_WORK = "userland.dev/work"
ANNOTATION_JOB = "userland.dev/job"
# Every worker Pod carries it (NetworkPolicies select them by it).
LABEL_COMPONENT = "app.kubernetes.io/component"
WORKER_COMPONENT = "assignment-worker"
# Every grading Pod (docs/grading.md): its own NetworkPolicy, never the environments' nor the workers'.
GRADER_COMPONENT = "assignment-grader"
# A course is a namespace with this label ("true"); its staff and title are annotations on it,
# written by admins (kubectl, GitOps) and read by the web UI and the gateway.
LABEL_COURSE = "userland.dev/course"
ANNOTATION_COURSE_TITLE = "userland.dev/title"
ANNOTATION_INSTRUCTORS = "userland.dev/instructors"
ANNOTATION_ASSISTANTS = "userland.dev/assistants"
# A course the operator made from a CourseRequest (docs/lti.md): "<namespace>/<name>" of the
# request, on the course's namespace. A namespace without it (or naming another request) is
# never touched by the operator.
ANNOTATION_COURSE_REQUEST = "userland.dev/course-request"
# Help in the lab (platform/model/grants.py): who may open a student's environment without being asked
# (`on-request`, the default: nobody; `instructors`: the course's instructors and admins, never
# assistants), and how long staff access lasts (a duration such as `1h` or `45m`; default 1 h).
ANNOTATION_STAFF_ACCESS = "userland.dev/staff-access"
ANNOTATION_HELP_LIMIT = "userland.dev/help-limit"
# A student's roster details on their Userland (the web UI writes them when adding students),
# and who added them.
ANNOTATION_STUDENT_NAME = "userland.dev/name"
ANNOTATION_STUDENT_EMAIL = "userland.dev/email"
ANNOTATION_STUDENT_SECTION = "userland.dev/section"
ANNOTATION_ADDED_BY = "userland.dev/added-by"
# A student the LMS roster sync added (docs/lti-services.md): the LMS person it was made for, as
# a JSON list [issuer, LMS user id]; and, while the sync keeps it suspended (the student left the
# LMS course), `lms` and when. Staff suspending by hand write neither, so the sync never resumes
# what staff suspended.
ANNOTATION_LTI_PERSON = "userland.dev/lti-person"
ANNOTATION_SUSPENDED_BY = "userland.dev/suspended-by"
ANNOTATION_SUSPENDED_AT = "userland.dev/suspended-at"
# The roster's fields (as the web UI's roster names them) and where each is kept.
ROSTER_DETAILS = {"name": ANNOTATION_STUDENT_NAME, "email": ANNOTATION_STUDENT_EMAIL,
                  "section": ANNOTATION_STUDENT_SECTION}
# On a Template: the LMS courses (LTI contexts) whose launches open it, as
# `<LtiRegistration name>:<context id>` entries, comma-separated (docs/lti.md). A Learner
# launched from one lands in their own environment of this Template.
ANNOTATION_LTI_CONTEXTS = "userland.dev/lti-contexts"
# A course namespace's LMS links and the staff the LMS made (platform/model/lti_links.py), and an
# Assignment's LMS gradebook column (web/rules/lti_grades.py).
ANNOTATION_LTI_LINKS = "userland.dev/lti-links"
ANNOTATION_LTI_INSTRUCTORS = "userland.dev/lti-instructors"
ANNOTATION_LTI_ASSISTANTS = "userland.dev/lti-assistants"
ANNOTATION_LTI_LINE_ITEM = "userland.dev/lti-line-item"
# On a course namespace: what the roster sync does with a student dropped from the LMS course
# (web/rules/lti_sync.py): absent, suspend (files kept); `N` (days, 1-365): suspend, then remove
# N days later unless they come back.
ANNOTATION_LTI_REMOVE_AFTER_DAYS = "userland.dev/lti-remove-after-days"
# On an audit Event: the signed-in person who acted (the Event's source is the web UI).
ANNOTATION_ACTOR = "userland.dev/actor"
# On an example Template of `make run`: the digest of its spec as last written there
# (local/rules/template_apply.py), so a restart tells an untouched one from a user's change.
ANNOTATION_LOCAL_APPLIED_SPEC = "userland.dev/local-applied-spec"
# What the operator makes for a Template's capacity (docs/capacity.md): `images` on the
# DaemonSets that pull its images ahead, `room` on the placeholders that hold room before a
# lecture; the value of LABEL_CAPACITY_FOR is the Template. Their Pods carry these two labels
# and not the managed-by one, so nothing that watches students' Pods (the local runner, the web
# UI, the environments' NetworkPolicy) takes them for an environment.
LABEL_CAPACITY = "userland.dev/capacity"
LABEL_CAPACITY_FOR = "userland.dev/capacity-for"
# On an image puller's Pods: the digest of the image set it pulls.
LABEL_IMAGE_SET = "userland.dev/image-set"

_SUFFIX_SERVICE = "-svc"
_SUFFIX_DATA = "-data"
# The longest suffix any child adds; base names leave room for it.
_LONGEST_SUFFIX = max(len(_SUFFIX_SERVICE), len(_SUFFIX_DATA))
_HASH_LEN = 10
# Longest plain `<template>-<user>`; a shortened name is exactly one longer (see base_name).
_PLAIN_MAX = DNS_LABEL_MAX - _LONGEST_SUFFIX - 1


class InvalidName(ValueError):
    """A login or template name that breaks the naming rules."""


def is_valid_login(login: str) -> bool:
    # fullmatch: `$` alone would also accept a trailing newline, which the API server refuses.
    return len(login) <= LOGIN_MAX and _LOGIN_RE.fullmatch(login) is not None


def normalize_login(login: str) -> str:
    """Lowercase a GitHub login (logins are case-insensitive) after checking it."""
    if not is_valid_login(login):
        raise InvalidName(
            f"invalid GitHub login {login!r}: use 1-39 letters, digits or single hyphens, "
            "not starting or ending with a hyphen"
        )
    return login.lower()


def login_of(user: object) -> str:
    """The login a Userland's `spec.user` names, as every component compares it: lowercased
    (`Alice` written with kubectl is alice; GitHub logins are case-insensitive). "" when it is
    not a string; validity is the CRD's and `normalize_login`'s business."""
    return user.lower() if isinstance(user, str) else ""


def is_valid_dns_label(name: str) -> bool:
    return len(name) <= DNS_LABEL_MAX and _DNS_LABEL_RE.fullmatch(name) is not None


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LEN]


def base_name(template: str, user: str) -> str:
    """`<template>-<user>`, shortened with a hash when a child's name would exceed 63.

    Unshortened names are at most `_PLAIN_MAX` long; shortened ones are always exactly one
    character longer and end in a hash of the full template and user, so a shortened name
    can never equal an unshortened one, and two shortened ones differ by their hash.
    (`a-b` + `c` and `a` + `b-c` would share `a-b-c`: the operator's ownership check
    refuses to adopt a child owned by another Userland, see the operator's reconcile.)
    """
    user = normalize_login(user)
    full = f"{template}-{user}"
    if len(full) <= _PLAIN_MAX:
        return full
    prefix = full[: _PLAIN_MAX - _HASH_LEN]
    if prefix.endswith("-"):
        prefix = prefix[:-1] + "0"  # keep the length fixed; the hash keeps it unique
    return f"{prefix}-{_short_hash(template + '/' + user)}"


def deployment_name(template: str, user: str) -> str:
    return base_name(template, user)


def service_name(template: str, user: str) -> str:
    return base_name(template, user) + _SUFFIX_SERVICE


def pvc_name(template: str, user: str) -> str:
    return base_name(template, user) + _SUFFIX_DATA


def userland_name(template: str, user: str) -> str:
    """The name the web UI gives a Userland: the same rule as its Deployment."""
    return base_name(template, user)


def network_policy_name(template: str) -> str:
    """One NetworkPolicy per Template covers all its students' pods."""
    return label_value(f"userland-{template}")


def label_value(text: str) -> str:
    """A label value (<= 63 chars); logins and template names already fit."""
    if len(text) <= DNS_LABEL_MAX:
        return text
    return f"{text[: DNS_LABEL_MAX - _HASH_LEN - 1]}-{_short_hash(text)}"


def worker_pod_name(assignment: str, kind: str, digest: str) -> str:
    """A worker Pod's name: `<assignment>-<kind>-<digest[:10]>`, the assignment part shortened
    with a hash of it when the whole would pass 63 characters (Pod names are DNS subdomains,
    but Pods' hostnames are labels)."""
    tail = f"-{kind}-{digest[:_HASH_LEN]}"
    head = assignment
    if len(head) + len(tail) > DNS_LABEL_MAX:
        keep = DNS_LABEL_MAX - len(tail) - _HASH_LEN - 1
        head = f"{assignment[:keep].rstrip('-')}-{_short_hash(assignment)}"
    return head + tail


def grading_policy_name(assignment: str) -> str:
    """The NetworkPolicy that fences one Assignment's grading Pods."""
    return label_value(f"assignment-{assignment}-grade")


def prepull_name(template: str, digest: str) -> str:
    """The DaemonSet pulling one image set of a Template: `<template>--pull-<digest[:10]>`. A
    double hyphen never appears in a student's `<template>-<user>` (a login has no leading or
    double hyphen, a Template name no trailing one), and a new image set gets a new name."""
    return worker_pod_name(f"{template}-", "pull", digest)


def placeholders_name(template: str) -> str:
    """The Deployment of a Template's placeholder Pods: `<template>--room` (see prepull_name)."""
    return label_value(f"{template}--room")


def assignment_policy_name(assignment: str) -> str:
    """The NetworkPolicy that fences one Assignment's worker Pods."""
    return label_value(f"assignment-{assignment}-work")
