"""The audit trail (web/audit.py): Redis streams per course, Events on Userlands.

Real: redis-server (`redis_url`, database 11 here) and the control plane; the web UI's own
ServiceAccount token where RBAC matters.
"""

from __future__ import annotations

import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from tests.web.course_support import apply_rbac, web_client
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import EVENTS, USERLANDS, KubeClient
from userland.platform.clients.kubeconfig import ClusterAccess
from userland.platform.model.keyspace import audit_stream_key
from userland.web.audit import (
    ALL_COURSES,
    AUDIT_ALL_BUDGET_BYTES,
    AUDIT_COURSE_BUDGET_BYTES,
    MAX_TARGETS,
    AuditEntry,
    AuditLog,
    entry_fields,
    record_event,
)

AUDIT_TEST_DB = 11  # tests/auth use 9, the proxy tests 0, the browser tests 12, the pages tests 14


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url, db=AUDIT_TEST_DB)
    try:
        yield client
    finally:
        await client.aclose()


def course() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def entry(course_name: str, actor: str = "teacher", action: str = "restart", n: int = 0,
          targets: tuple[str, ...] = ("vscode-alice",)) -> AuditEntry:
    return AuditEntry(time=1_800_000_000.0 + n, actor=actor, role="instructor", action=action,
                      course=course_name, targets=targets, result=f"{len(targets)} restarted")


async def test_entries_come_back_newest_first_per_course(redis_client: redis.asyncio.Redis) -> None:
    log = AuditLog(redis_client)
    one, two = course(), course()
    for n in range(5):
        await log.record(entry(one, n=n))
    await log.record(entry(two, actor="other", action="add", n=9, targets=("vscode-bob", "vscode-carol")))
    got = await log.recent(one)
    assert [e.time for e in got] == [1_800_000_000.0 + n for n in (4, 3, 2, 1, 0)]
    assert got[0] == entry(one, n=4)
    assert await log.recent(two) == [entry(two, actor="other", action="add", n=9,
                                           targets=("vscode-bob", "vscode-carol"))]
    assert [e.time for e in await log.recent(one, count=2)] == [1_800_000_004.0, 1_800_000_003.0]
    # The stream across every course has both courses' entries.
    everywhere = await log.recent(ALL_COURSES, count=10_000)
    assert {e.course for e in everywhere} >= {one, two}


async def test_filters_reach_past_the_first_page(redis_client: redis.asyncio.Redis) -> None:
    log = AuditLog(redis_client)
    name = course()
    await log.record(entry(name, actor="ta1", action="start", n=0))
    for n in range(1, 700):  # more than one page of XREVRANGE between the match and the newest
        await log.record(entry(name, n=n))
    assert [e.actor for e in await log.recent(name, actor="ta1")] == ["ta1"]
    assert [e.action for e in await log.recent(name, action="start")] == ["start"]
    assert await log.recent(name, actor="ta1", action="restart") == []
    assert len(await log.recent(name, actor="teacher", count=650)) == 650


async def test_streams_are_capped(redis_client: redis.asyncio.Redis) -> None:
    log = AuditLog(redis_client, maxlen=100)
    name = course()
    for n in range(1000):
        await log.record(entry(name, n=n))
    length = await redis_client.xlen(audit_stream_key(name))
    # MAXLEN ~ trims whole stream nodes (100 entries each by default): about maxlen, never all.
    assert 100 <= length <= 300
    assert (await log.recent(name, count=1))[0].time == 1_800_000_999.0


async def test_a_whole_roster_is_one_bounded_entry(redis_client: redis.asyncio.Redis) -> None:
    log = AuditLog(redis_client)
    name = course()
    targets = tuple(f"vscode-s{i}" for i in range(2000))
    await log.record(entry(name, action="add", targets=targets))
    (got,) = await log.recent(name)
    assert len(got.targets) == MAX_TARGETS
    assert got.targets[: MAX_TARGETS - 1] == targets[: MAX_TARGETS - 1]
    assert got.targets[-1] == f"+{2000 - MAX_TARGETS + 1} more"


async def test_foreign_entries_in_the_stream_are_skipped(redis_client: redis.asyncio.Redis) -> None:
    log = AuditLog(redis_client)
    name = course()
    await log.record(entry(name, n=1))
    await redis_client.xadd(audit_stream_key(name), {"junk": "yes"})
    await redis_client.xadd(audit_stream_key(name), {"time": "not a number", "actor": "x"})
    assert [e.time for e in await log.recent(name)] == [1_800_000_001.0]


async def test_redis_down_raises_after_the_log_line(caplog: pytest.LogCaptureFixture) -> None:
    dead = redis.asyncio.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1,
                               retry=Retry(NoBackoff(), 0))
    try:
        with caplog.at_level(logging.INFO, logger="userland.web.audit"), \
                pytest.raises(redis.exceptions.ConnectionError):
            await AuditLog(dead).record(entry("course-x", actor="teacher"))
    finally:
        await dead.aclose()
    (line,) = [r for r in caplog.records if r.getMessage() == "audit"]
    assert (line.actor, line.action, line.course) == ("teacher", "restart", "course-x")  # type: ignore[attr-defined]


# --- Events ------------------------------------------------------------------------------------------


USERLAND = {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland", "metadata": {"name": "vscode-alice"},
            "spec": {"user": "alice", "template": "vscode"}}


async def test_record_event_puts_an_event_on_the_userland(kube: KubeClient, namespace: str) -> None:
    obj = await kube.create(USERLANDS, namespace, USERLAND)
    started = time.time()
    await record_event(kube, obj, reason="Restarted", message="Restart requested", actor="teacher")
    (event,) = (await kube.list(EVENTS, namespace))["items"]
    assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert event["involvedObject"]["kind"] == "Userland"
    assert event["reason"] == "Restarted"
    assert event["message"] == "Restart requested (by teacher in the web UI)"
    assert event["reportingComponent"] == "userland-web"
    assert event["source"]["component"] == "userland-web"
    assert event["metadata"]["annotations"]["userland.dev/actor"] == "teacher"
    assert abs(time.mktime(time.strptime(event["lastTimestamp"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
               - started) < 60


async def test_record_event_never_raises(control_plane: ControlPlane, kube: KubeClient, namespace: str,
                                         tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    obj = await kube.create(USERLANDS, namespace, USERLAND)
    apply_rbac(control_plane)
    with caplog.at_level(logging.WARNING, logger="userland.web.audit"):
        # The web UI may not write Events outside a course: refused (403), logged, not raised.
        async with web_client(control_plane, tmp_path) as as_web:
            await record_event(as_web, obj, reason="Restarted", message="x", actor="teacher")
        # An API server that is not there.
        async with KubeClient(kube_access_to_nowhere()) as nowhere:
            await record_event(nowhere, obj, reason="Restarted", message="x", actor="teacher")
        # An object without metadata.
        await record_event(kube, {}, reason="Restarted", message="x", actor="teacher")
    assert (await kube.list(EVENTS, namespace))["items"] == []
    warnings = [r for r in caplog.records if r.getMessage() == "could not record event"]
    assert len(warnings) == 3


def kube_access_to_nowhere() -> ClusterAccess:
    async def no_token() -> str | None:
        return None

    # Port 1 on loopback: nothing listens, the connection is refused at once.
    return ClusterAccess(host="http://127.0.0.1:1", ssl_context=ssl.create_default_context(),
                         authorization=no_token)


async def test_a_courses_audit_log_stays_within_its_memory_budget(redis_client: redis.asyncio.Redis) -> None:
    """Attack review: audit stream growth. Redis runs with `noeviction` (deploy/redis.yaml, 200 MB):
    if the audit log fills it, no student can sign in on any course. Staff of one course (an
    assistant restarting the whole class over and over, or a term of whole-roster actions) write
    the largest entries there can be; the course's stream and the one across courses stay within
    a fixed budget (docs: `AUDIT_COURSE_BUDGET_BYTES`), so Redis can be sized per course."""
    log = AuditLog(redis_client)
    name = course()
    # 500 environments, each named by the longest login and a long Template title.
    worst = tuple(f"{i:04d}" + "s" * 35 + " (" + "T" * 60 + ")" for i in range(500))
    big = AuditEntry(time=1_800_000_000.0, actor="a" * 39, role="assistant", action="restart_all",
                     course=name, targets=worst, result="500 restarted, 0 already there, 0 failed" * 3,
                     filter="status Waiting, search " + '"' + "x" * 200 + '"')
    for _ in range(6):
        async with redis_client.pipeline(transaction=False) as pipe:
            for _n in range(1000):
                for key in {audit_stream_key(name), audit_stream_key(ALL_COURSES)}:
                    pipe.xadd(key, entry_fields(big), maxlen=log.course_maxlen if key != audit_stream_key(
                        ALL_COURSES) else log.all_maxlen, approximate=True)
            await pipe.execute()
    await log.record(big)  # the real write path, once more
    course_bytes = await redis_client.memory_usage(audit_stream_key(name), samples=0)
    all_bytes = await redis_client.memory_usage(audit_stream_key(ALL_COURSES), samples=0)
    assert course_bytes is not None and all_bytes is not None
    assert course_bytes <= AUDIT_COURSE_BUDGET_BYTES, f"one course's audit log holds {course_bytes} bytes"
    assert all_bytes <= AUDIT_ALL_BUDGET_BYTES, f"the audit log across courses holds {all_bytes} bytes"
    (newest,) = await log.recent(name, count=1)
    assert newest.targets[-1] == f"+{500 - MAX_TARGETS + 1} more"  # the rest: Events and log lines
