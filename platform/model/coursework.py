"""What the operator, the web UI, the assignment store and its worker Pods say to each other.

Pure data and signatures, no I/O (docs/assignments.md, "Where things live"):

- a **job** is what one worker Pod does for one Assignment: hand out a commit, collect a round,
  or return feedback, for a batch of students' environments (`Member`s, each with the place its
  volume is mounted in the Pod). Its `JobScope` is what the store lets the Pod do, signed by the
  operator with the store secret (`job_token`): the Pod carries the scope and the token, never
  the secret, and the store checks every request against the scope (this student, this round,
  this commit, until this time). A student's own Pod has neither.
- the operator's and the web UI's own requests to the store are signed per request
  (`request_signature`: purpose, method, path, an expiry, a nonce and the body's sha256, or for
  a streamed body a MAC after its last byte, `body_trailer`), so the store needs no API server
  access to know who is asking, a captured header carries no other body, and the store takes
  each nonce once (`NonceBook`); the web UI decides which staff may ask (course roles).
- a **round** is one moment at which copies are taken: a student's deadline, or "collect now".
  Its id (`round_id`) is the UTC time to the second, safe in paths and URLs.
- a **tree digest** is the sha256 of a folder's files (path and content digest, sorted): the
  same files give the same digest, however and whenever they were copied.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

# check: a student's "Check my work" (a snapshot of their folder, graded with the visible tests).
WorkKind = Literal["handout", "collect", "feedback", "grade", "check"]
WORK_KINDS: tuple[WorkKind, ...] = ("handout", "collect", "feedback", "grade", "check")
Purpose = Literal["operator", "web"]
SIGNATURE_HEADER = "X-Userland-Store-Auth"
SCOPE_HEADER = "X-Userland-Job"
TOKEN_HEADER = "X-Userland-Job-Token"
TAKEN_AT_HEADER = "X-Userland-Taken-At"
# How long a signed request of the operator or the web UI stays valid (a clock skew allowance).
REQUEST_SECONDS = 120
_ROUND_FORMAT = "%Y%m%dT%H%M%SZ"


class ScopeRefused(ValueError):
    """A job scope or signature that does not check out; str() says why (for the log)."""


def round_id(moment: datetime) -> str:
    """`2026-12-07T23:59:00Z` -> `20261207T235900Z` (a round's name in paths and URLs)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime(_ROUND_FORMAT)


def round_time(identifier: str) -> datetime:
    """The moment of a round id; ValueError for anything else."""
    return datetime.strptime(identifier, _ROUND_FORMAT).replace(tzinfo=UTC)


def is_round_id(text: str) -> bool:
    try:
        round_time(text)
    except ValueError:
        return False
    return round_id(round_time(text)) == text


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """sha256 over (path, content sha256) pairs, sorted by path: a folder's content, nothing else
    (not the times, owners or order in which it was copied)."""
    hasher = hashlib.sha256()
    for path, digest in sorted(files):
        hasher.update(f"{path}\0{digest}\n".encode())
    return hasher.hexdigest()


def feedback_digest(upload_digest: str, grade: str, comment: str) -> str:
    """What one student's feedback is: the files staff uploaded for them, their grade and comment.
    A change of any of them is feedback to return again."""
    return hashlib.sha256(f"{upload_digest}\0{grade}\0{comment}".encode()).hexdigest()


def env_key(template: str, login: str) -> str:
    """One student's environment of one Template: `jupyterlab/alice`."""
    return f"{template}/{login}"


@dataclass(frozen=True)
class Member:
    login: str
    template: str
    mount: str = ""  # where the environment's volume is mounted in the worker Pod

    @property
    def key(self) -> str:
        return env_key(self.template, self.login)


@dataclass(frozen=True)
class JobScope:
    """What a worker Pod may do at the store (and nothing else)."""

    kind: WorkKind
    namespace: str
    assignment: str
    members: tuple[Member, ...]
    expires: int  # unix time
    source: str = ""  # handout: the source's key at the store; grade: the tests'
    round: str = ""  # collect: the round id; grade: the round of the copy graded
    # The Assignment object's uid: the store keeps each object's work apart, so a name deleted and
    # made again is another assignment (it never sees the first one's copies).
    uid: str = ""

    def to_json(self) -> str:
        return json.dumps({
            "kind": self.kind, "namespace": self.namespace, "assignment": self.assignment,
            "members": [[m.template, m.login] for m in self.members], "expires": self.expires,
            "source": self.source, "round": self.round, "uid": self.uid,
        }, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobScope:
        try:
            data = json.loads(text)
            kind = data["kind"]
            if kind not in WORK_KINDS:
                raise ScopeRefused(f"unknown kind of work {kind!r}")
            return cls(kind=kind, namespace=str(data["namespace"]), assignment=str(data["assignment"]),
                       members=tuple(Member(login=str(login), template=str(template))
                                     for template, login in data["members"]),
                       expires=int(data["expires"]), source=str(data.get("source") or ""),
                       round=str(data.get("round") or ""), uid=str(data.get("uid") or ""))
        except (ValueError, KeyError, TypeError) as err:
            raise ScopeRefused(f"unreadable job scope: {err}") from None

    def has(self, template: str, login: str) -> bool:
        return any(m.template == template and m.login == login for m in self.members)

    def header(self) -> str:
        return base64.urlsafe_b64encode(self.to_json().encode()).decode()

    @classmethod
    def from_header(cls, value: str) -> JobScope:
        try:
            text = base64.urlsafe_b64decode(value.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            raise ScopeRefused("the job scope header is not base64") from None
        return cls.from_json(text)


@dataclass(frozen=True)
class Job:
    """Everything a worker Pod is told (the env variable USERLAND_JOB): its scope and the work."""

    scope: JobScope
    path: str  # the assignment's folder in each volume
    # collect: when to take the copies (RFC 3339); the Pod waits for it.
    at: str = ""
    # handout: the commit; feedback: per login, (grade, comment, digest to report).
    commit: str = ""
    feedback: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    max_files: int = 20_000
    max_bytes: int = 500 * 1024 * 1024
    # Seals the hand-out records in students' folders (manifest_key); "" trusts none of them.
    manifest_key: str = ""

    def to_json(self) -> str:
        return json.dumps({
            "scope": json.loads(self.scope.to_json()),
            "mounts": {m.key: m.mount for m in self.scope.members},
            "path": self.path, "at": self.at, "commit": self.commit,
            "feedback": {k: list(v) for k, v in sorted(self.feedback.items())},
            "maxFiles": self.max_files, "maxBytes": self.max_bytes, "manifestKey": self.manifest_key,
        }, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Job:
        try:
            data = json.loads(text)
            scope = JobScope.from_json(json.dumps(data["scope"]))
            mounts: dict[str, str] = data.get("mounts") or {}
            members = tuple(Member(m.login, m.template, str(mounts.get(m.key, ""))) for m in scope.members)
            return cls(
                scope=JobScope(kind=scope.kind, namespace=scope.namespace, assignment=scope.assignment,
                               members=members, expires=scope.expires, source=scope.source,
                               round=scope.round, uid=scope.uid),
                path=str(data["path"]), at=str(data.get("at") or ""), commit=str(data.get("commit") or ""),
                feedback={str(k): (str(v[0]), str(v[1]), str(v[2])) for k, v in
                          (data.get("feedback") or {}).items()},
                max_files=int(data.get("maxFiles") or 20_000), max_bytes=int(data.get("maxBytes") or 0),
                manifest_key=str(data.get("manifestKey") or ""),
            )
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise ScopeRefused(f"unreadable job: {err}") from None


def _mac(secret: str, purpose: str, message: str) -> str:
    return hmac.new(secret.encode(), f"userland-store-v1\n{purpose}\n{message}".encode(),
                    hashlib.sha256).hexdigest()


def manifest_key(secret: str, namespace: str, assignment: str) -> str:
    """The key that seals the hand-out records of one assignment (docs/assignments.md): derived
    from the store secret by the operator and given to its worker Pods in the job (their spec,
    which no student can read), never to a student's environment."""
    return _mac(secret, "manifest", f"{namespace}/{assignment}")


def manifest_seal(key: str, env: str, folder: str, files: Mapping[str, str]) -> str:
    """The seal of one hand-out record: which files, with which digests, were handed out to this
    environment (`jupyterlab/alice`) in this folder. A record with another seal, or none, is not
    the platform's: a student could have written it. "" when there is no key (never trusted)."""
    if not key:
        return ""
    text = json.dumps([env, folder, sorted(files.items())], separators=(",", ":"))
    return hmac.new(key.encode(), f"userland-manifest-v1\n{text}".encode(), hashlib.sha256).hexdigest()


def job_token(secret: str, scope: JobScope) -> str:
    return _mac(secret, "job", scope.to_json())


def verify_job(secret: str, header: str, token: str, *, now: float | None = None) -> JobScope:
    """The scope a worker presents, if the operator signed it and it has not expired."""
    scope = JobScope.from_header(header)
    if not hmac.compare_digest(token, job_token(secret, scope)):
        raise ScopeRefused("the job token does not match its scope")
    if (time.time() if now is None else now) > scope.expires:
        raise ScopeRefused("the job has expired")
    return scope


EMPTY_BODY = hashlib.sha256(b"").hexdigest()
# The body hash of a streamed body: its MAC follows its last byte (`body_trailer`, 64 hex digits).
STREAMED = "streamed"
TRAILER_BYTES = 64


@dataclass(frozen=True)
class SignedRequest:
    """What a good signature says: who, until when, its nonce, and the body it covers."""

    purpose: Purpose
    expires: int
    nonce: str
    body: str  # the body's sha256 (hex), or STREAMED


def request_signature(secret: str, purpose: Purpose, method: str, path_qs: str, *,
                      body: str = EMPTY_BODY, nonce: str | None = None, now: float | None = None) -> str:
    """The header value that signs one request of the operator or the web UI: `body` is the
    sha256 (hex) of the body it sends, or STREAMED (its MAC then follows the body)."""
    expires = int((time.time() if now is None else now) + REQUEST_SECONDS)
    nonce = nonce or secrets.token_hex(16)
    mac = _mac(secret, purpose, _request_message(method, path_qs, expires, nonce, body))
    return f"{purpose}.{expires}.{nonce}.{body}.{mac}"


def body_trailer(secret: str, nonce: str, body_sha256: str) -> bytes:
    """What follows a streamed body: the MAC of its sha256 under the request's nonce."""
    return _mac(secret, "body", f"{nonce}\n{body_sha256}").encode()


def _request_message(method: str, path_qs: str, expires: int, nonce: str, body: str) -> str:
    return "\n".join((method.upper(), path_qs, str(expires), nonce, body))


def verify_request(secret: str, value: str, method: str, path_qs: str, *,
                   now: float | None = None) -> SignedRequest:
    """Who signed a request, its nonce and the body it covers, if the signature is good and
    current (the caller checks the body, and that the nonce is new: NonceBook)."""
    parts = value.split(".")
    if len(parts) != 5:
        raise ScopeRefused("not a store signature")
    purpose, expires_text, nonce, body, mac = parts
    if (purpose not in ("operator", "web") or not expires_text.isdigit() or not mac
            or not 16 <= len(nonce) <= 64 or not (body == STREAMED or len(body) == 64)):
        raise ScopeRefused("not a store signature")
    expires = int(expires_text)
    current = time.time() if now is None else now
    if current > expires or expires > current + 2 * REQUEST_SECONDS:
        raise ScopeRefused("the signature has expired or is dated in the future")
    expected = _mac(secret, purpose, _request_message(method, path_qs, expires, nonce, body))
    if not hmac.compare_digest(mac, expected):
        raise ScopeRefused("the signature does not match")
    return SignedRequest(purpose, expires, nonce, body)  # type: ignore[arg-type]


class NonceBook:
    """The nonces of signed requests seen while they could still be valid: a signature is good
    once. In memory: the store is one process (one replica over its one volume); a store that
    restarts forgets them, and the window a captured header could be replayed in after a restart
    is its remaining validity (at most 2 x REQUEST_SECONDS), each nonce still once."""

    def __init__(self) -> None:
        self._until: dict[str, int] = {}
        self._pruned = 0.0

    def first_use(self, nonce: str, expires: int, *, now: float | None = None) -> bool:
        current = time.time() if now is None else now
        if current - self._pruned > 10:
            self._until = {n: until for n, until in self._until.items() if until >= current}
            self._pruned = current
        if nonce in self._until:
            return False
        self._until[nonce] = expires
        return True


def receipt_words(receipt: Mapping[str, Any]) -> str:
    """`14 files, 1.2 MB, receipt 3f2a9c01`: a copy as a student is told of it."""
    files = int(receipt.get("files") or 0)
    return (f"{files} file{'' if files == 1 else 's'}, {size_words(int(receipt.get('bytes') or 0))}, "
            f"receipt {str(receipt.get('sha256') or '')[:8]}")


def size_words(size: int) -> str:
    """Bytes as people read them: 900 bytes, 14 KB, 1.2 MB, 3.4 GB (powers of 1000)."""
    if size < 1000:
        return f"{size} byte{'' if size == 1 else 's'}"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1000
        if value < 999.5:
            return f"{value:.1f} {unit}" if value < 9.95 else f"{value:.0f} {unit}"
    return f"{value / 1000:.1f} TB"
