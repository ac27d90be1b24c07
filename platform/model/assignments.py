"""The Assignment custom resource as typed, frozen data (docs/assignments.md).

`Assignment.from_object` turns an Assignment from the API server into dataclasses, raising
`InvalidSpec` with the field and what to write instead: the API server checks the CRD's schema
first (deploy/crds/assignments.userland.dev.yaml); the checks here are for what a schema cannot
say (a folder that climbs out with `..`, a due before the release, a ref git would read as an
option) and so that nothing a teacher can write crashes a component. tests/unit/test_crd_schema.py
keeps the two in step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from userland.platform.model import naming
from userland.platform.model.checks import CheckAsk, parse_checks
from userland.platform.model.models import InvalidSpec, ObjectRef, parse_time

TITLE_MAX = 200
TEMPLATES_MAX = 10
STUDENTS_MAX = 2000
PATH_MAX = 255
URL_MAX = 2048
REF_MAX = 200
GRADE_MAX = 50
COMMENT_MAX = 2000
# What each kind of conflict means (docs/assignments.md), for teachers and students alike.
CONFLICT_WORDS: dict[str, str] = {
    "changed": "changed by the student and updated in the source: the student's version was kept",
    "deleted": "deleted by the student and updated in the source: not put back",
    "exists": "the student has a file of their own with this name: theirs was kept",
    "blocked": "something of the student's (a file, folder or link) is in the way: not handed out",
    "kept": "removed from the source, but changed by the student: it stays",
}
# Names a student's folder holds for the platform: never handed out from a source, never
# collected (docs/assignments.md, "Files the platform keeps in the folder").
MANIFEST_NAME = ".userland-handout.json"
FEEDBACK_FOLDER = "feedback"
# Git would read a ref starting with "-" as an option; ".." and "@{" have meanings in revisions.
_REF_RE = re.compile(r"^[A-Za-z0-9._/+-]+$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def relative_path(text: Any, where: str, *, allow_empty: bool = False) -> str:
    """A folder inside another, normalized (`a//b/` is `a/b`); InvalidSpec for anything that
    could leave it (`..`, an absolute path) or that no file system takes (control characters)."""
    if not isinstance(text, str):
        raise InvalidSpec(f"{where} must be a folder name such as week1 or labs/week1")
    if _CONTROL_RE.search(text):
        raise InvalidSpec(f"{where} has a control character; use letters, digits, -, _ and /")
    if text.startswith("/"):
        raise InvalidSpec(f"{where} {text!r} must be relative (inside the student's folder), "
                          "without a leading /")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidSpec(f"{where} {text!r} may not contain '..': it must stay inside the student's folder")
    if not parts and not allow_empty:
        raise InvalidSpec(f"{where} must name a folder, such as week1")
    normalized = "/".join(parts)
    if len(normalized.encode()) > PATH_MAX or any(len(p.encode()) > 255 for p in parts):
        raise InvalidSpec(f"{where} is longer than {PATH_MAX} characters")
    return normalized


@dataclass(frozen=True)
class SecretRef:
    name: str
    key: str = "token"


@dataclass(frozen=True)
class Source:
    url: str
    # "" means the repository's default branch (what `git clone` checks out).
    ref: str = ""
    sub_path: str = ""
    token_secret: SecretRef | None = None

    @classmethod
    def parse(cls, value: Any) -> Source:
        if not isinstance(value, dict):
            raise InvalidSpec("spec.source is required: the git repository to hand out (url, ref)")
        url = value.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidSpec("spec.source.url is required: the repository's address, such as "
                              "https://github.com/course/week1.git")
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname or len(url) > URL_MAX:
            raise InvalidSpec(f"spec.source.url {url[:100]!r} must be an https:// (or http://) address "
                              "of a git repository, as you would clone it")
        if parts.username or parts.password:
            raise InvalidSpec("spec.source.url must not carry a user name or password: put a token in a "
                              "Secret and name it in spec.source.tokenSecret")
        ref = value.get("ref", "")
        if not isinstance(ref, str) or len(ref) > REF_MAX or (ref and (
                not _REF_RE.fullmatch(ref) or ref.startswith(("-", "/")) or ref.endswith(("/", ".lock"))
                or ".." in ref or "//" in ref)):
            raise InvalidSpec(f"spec.source.ref {str(ref)[:100]!r} is not a branch, tag or commit name "
                              "(such as main, v1.0 or a 40-character commit id)")
        sub_path = relative_path(value.get("subPath", ""), "spec.source.subPath", allow_empty=True)
        secret = value.get("tokenSecret")
        token: SecretRef | None = None
        if secret is not None:
            if not isinstance(secret, dict) or not isinstance(secret.get("name"), str) or \
                    not _is_dns_subdomain(secret["name"]):
                raise InvalidSpec("spec.source.tokenSecret.name must name a Secret in this namespace")
            key = secret.get("key", "token")
            if not isinstance(key, str) or not re.fullmatch(r"[-._a-zA-Z0-9]{1,253}", key):
                raise InvalidSpec("spec.source.tokenSecret.key must be a key of that Secret, such as token")
            token = SecretRef(secret["name"], key)
        return cls(url=url, ref=ref, sub_path=sub_path, token_secret=token)


def git_url_prefixes(annotation: str) -> list[str]:
    """The prefixes a Secret's `userland.dev/git-urls` lists (one a line, or separated by spaces
    or commas); only http(s) addresses with a host count (`https://` alone allows nothing)."""
    found = []
    for item in re.split(r"[\s,]+", annotation or ""):
        parts = urlsplit(item)
        if parts.scheme in ("https", "http") and parts.hostname and not parts.username and not parts.password:
            found.append(item)
    return found


def token_may_go_to(url: str, annotation: str) -> bool:
    """Whether a token whose Secret carries `annotation` may be sent to the repository at `url`:
    `url` is a listed prefix, or continues it at a `/` (so `https://git.example.edu/course` allows
    `https://git.example.edu/course/week1.git`, never `https://git.example.edu/course-evil/...` nor
    `https://git.example.edu.evil.com/...`). A URL with `.` or `..` segments never matches."""
    if any(segment in (".", "..") for segment in urlsplit(url).path.split("/")):
        return False
    for prefix in git_url_prefixes(annotation):
        stem = prefix if prefix.endswith("/") else prefix + "/"
        if url == prefix or url.startswith(stem):
            return True
    return False


def _is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and all(naming.is_valid_dns_label(p) for p in name.split("."))


@dataclass(frozen=True)
class Grade:
    grade: str = ""
    comment: str = ""

    @property
    def empty(self) -> bool:
        return not self.grade and not self.comment


def _logins(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InvalidSpec(f"{where} must be a list of GitHub logins")
    if len(value) > STUDENTS_MAX:
        raise InvalidSpec(f"{where} lists {len(value)} students; at most {STUDENTS_MAX}")
    found: list[str] = []
    for item in value:
        try:
            login = naming.normalize_login(str(item)) if isinstance(item, str) else ""
        except naming.InvalidName:
            login = ""
        if not login:
            raise InvalidSpec(f"{where} has {str(item)[:50]!r}, which is not a GitHub login")
        if login not in found:
            found.append(login)
    return tuple(found)


def _login_map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidSpec(f"{where} must map GitHub logins to values")
    if len(value) > STUDENTS_MAX:
        raise InvalidSpec(f"{where} has {len(value)} students; at most {STUDENTS_MAX}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not naming.is_valid_login(key):
            raise InvalidSpec(f"{where} has {str(key)[:50]!r}, which is not a GitHub login")
        out[key.lower()] = item
    return out


def _time(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_time(value) if isinstance(value, str) else None
    if parsed is None:
        raise InvalidSpec(f"{where} {str(value)[:60]!r} is not a time such as 2026-12-01T23:59:00Z")
    return parsed


@dataclass(frozen=True)
class AssignmentSpec:
    title: str
    templates: tuple[str, ...]
    source: Source
    path: str
    release: datetime | None = None
    due: datetime | None = None
    # None: every student of the Templates; else only these logins.
    students: tuple[str, ...] | None = None
    extensions: tuple[tuple[str, datetime], ...] = ()
    grades: tuple[tuple[str, Grade], ...] = ()
    return_feedback: bool = False
    # The grader as written (platform/model/grading.py `parse_grader` reads it): a grader written
    # wrong stops grading only, in words, never the hand-out and the copies.
    grader: Any = None

    def deadline_of(self, login: str) -> datetime | None:
        """When `login`'s copy is taken: their extension, else the assignment's due."""
        return dict(self.extensions).get(login, self.due)

    def grade_of(self, login: str) -> Grade:
        return dict(self.grades).get(login, Grade())

    def includes(self, login: str) -> bool:
        return self.students is None or login in self.students

    @classmethod
    def parse(cls, value: Any) -> AssignmentSpec:
        if not isinstance(value, dict):
            raise InvalidSpec("spec must be an object")
        title = value.get("title")
        if not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX:
            raise InvalidSpec(f"spec.title is required: a name for students, up to {TITLE_MAX} characters")
        templates = value.get("templates")
        if not isinstance(templates, list) or not templates or len(templates) > TEMPLATES_MAX:
            raise InvalidSpec(f"spec.templates must list the Templates (1 to {TEMPLATES_MAX}) whose "
                              "students receive this assignment, such as [jupyterlab]")
        for name in templates:
            if not isinstance(name, str) or not naming.is_valid_dns_label(name):
                raise InvalidSpec(f"spec.templates has {str(name)[:70]!r}, which is not a Template name")
        path = relative_path(value.get("path"), "spec.path")
        if path.split("/")[0] in (MANIFEST_NAME,):
            raise InvalidSpec(f"spec.path may not be {MANIFEST_NAME}")
        release = _time(value.get("release"), "spec.release")
        due = _time(value.get("due"), "spec.due")
        if release is not None and due is not None and due <= release:
            raise InvalidSpec("spec.due must be after spec.release")
        students = value.get("students")
        extensions = {login: _time(when, f"spec.extensions.{login}")
                      for login, when in _login_map(value.get("extensions"), "spec.extensions").items()}
        grades: dict[str, Grade] = {}
        for login, item in _login_map(value.get("grades"), "spec.grades").items():
            if not isinstance(item, dict):
                raise InvalidSpec(f"spec.grades.{login} must have a grade and/or a comment")
            grade, comment = item.get("grade", ""), item.get("comment", "")
            if not isinstance(grade, str) or len(grade) > GRADE_MAX:
                raise InvalidSpec(f"spec.grades.{login}.grade must be text of at most {GRADE_MAX} characters")
            if not isinstance(comment, str) or len(comment) > COMMENT_MAX:
                raise InvalidSpec(f"spec.grades.{login}.comment must be text of at most {COMMENT_MAX} "
                                  "characters")
            grades[login] = Grade(grade.strip(), comment.strip())
        returned = value.get("returnFeedback", False)
        if not isinstance(returned, bool):
            raise InvalidSpec("spec.returnFeedback must be true or false")
        return cls(
            title=title.strip(),
            templates=tuple(dict.fromkeys(templates)),
            source=Source.parse(value.get("source")),
            path=path,
            release=release,
            due=due,
            students=None if students is None else _logins(students, "spec.students"),
            extensions=tuple(sorted((k, v) for k, v in extensions.items() if v is not None)),
            grades=tuple(sorted(grades.items())),
            return_feedback=returned,
            grader=value.get("grader"),
        )


@dataclass(frozen=True)
class Assignment:
    ref: ObjectRef
    spec: AssignmentSpec
    status: dict[str, Any] = field(default_factory=dict)
    deleting: bool = False
    # Staff actions, each the time it was asked (annotations; None: never).
    handout_at: datetime | None = None
    collect_now: datetime | None = None
    feedback_at: datetime | None = None
    # When the Assignment was made: a deadline before it had passed already when it was set,
    # so a copy of it taken later is not "late" (docs/assignments.md, "A due date in the past").
    created: datetime | None = None
    # The last "Regrade" (docs/grading.md): `<time>` for everyone, `<time> alice bob` for some.
    regrade: str = ""
    # Each student's last "Check my work" (platform/model/checks.py), by environment key.
    checks: dict[str, CheckAsk] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.ref.name

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Assignment:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            raise InvalidSpec("metadata must be an object")
        ref = ObjectRef.from_metadata(metadata)
        if not naming.is_valid_dns_label(ref.name):
            raise InvalidSpec(f"Assignment name {ref.name!r} must be a DNS label: at most 63 lowercase "
                              "letters, digits or '-'")
        annotations = metadata.get("annotations") or {}
        status = obj.get("status")
        return cls(
            ref=ref,
            spec=AssignmentSpec.parse(obj.get("spec")),
            status=status if isinstance(status, dict) else {},
            deleting=bool(metadata.get("deletionTimestamp")),
            handout_at=parse_time(annotations.get(naming.ANNOTATION_HANDOUT_AT)),
            collect_now=parse_time(annotations.get(naming.ANNOTATION_COLLECT_NOW)),
            feedback_at=parse_time(annotations.get(naming.ANNOTATION_FEEDBACK_AT)),
            created=parse_time(metadata.get("creationTimestamp")),
            regrade=str(annotations.get(naming.ANNOTATION_REGRADE) or "")[:2000],
            checks=parse_checks(annotations),
        )
