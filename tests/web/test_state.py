"""The web UI's watches on a real control plane: courses appear and go, changes reach the
notifier coalesced, failures get plain words, an unreadable namespace is "not set up".

Real: kube-apiserver (RBAC authorizer), the project's KubeClient and Informers. The reader
without permissions is a real token in the API server's token file (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import eventually
from tests.web.support import add_userland, make_course, set_phase
from userland.local.controlplane import ControlPlane
from userland.platform.clients.kube import EVENTS, NAMESPACES, AlreadyExists, KubeClient, Resource
from userland.web import state
from userland.web.notifier import EVERYTHING
from userland.web.rules import row_status

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                                 "ClusterRoleBinding", namespaced=False)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
READER = "userland-test:web-reader"


@pytest.fixture
async def running_state(kube: KubeClient) -> AsyncIterator[state.ClassState]:
    async with state.running(kube, tick=0.1) as st:
        await st.wait_synced()
        yield st


async def test_a_course_is_watched_from_when_it_is_labelled_until_it_is_not(
        kube: KubeClient, namespace: str, running_state: state.ClassState) -> None:
    st = running_state
    await add_userland(kube, namespace, "alice", **{"userland.dev/name": "Alice L"})
    # A course labelled after it: once the state watches that one, it has seen everything
    # before it, and the unlabelled namespace is still not a course (not watched).
    sentinel = f"{namespace}-later"
    await kube.create(NAMESPACES, None, {"metadata": {"name": sentinel}})
    try:
        await make_course(kube, sentinel)
        await eventually(lambda: st.watch(sentinel))
        assert st.course(namespace) is None and st.watch(namespace) is None  # not a course: not watched
    finally:
        await kube.delete(NAMESPACES, None, sentinel)
    await make_course(kube, namespace, instructors="teacher, org/staff", title="Databases")
    watch = await eventually(lambda: st.watch(namespace))
    await eventually(lambda: watch.status == "ready")
    course = st.course(namespace)
    assert course is not None and course.title == "Databases"
    assert course.instructors == {"teacher", "org/staff"} and course.assistants == {"ta1"}
    row = watch.row("alice")
    assert row is not None and row.name == "Alice L" and row.environments[0].phase == "Pending"
    # Synced covers every course of the control plane: the sentinel's watch, or one of an earlier
    # test's course that is being deleted, may still be starting a moment longer.
    await eventually(lambda: st.synced)
    unlabel = {"metadata": {"labels": {"userland.dev/course": None}}}
    await kube.merge_patch(NAMESPACES, None, namespace, unlabel)
    await eventually(lambda: st.watch(namespace) is None and st.course(namespace) is None)


async def test_changes_reach_subscribers_coalesced_with_plain_words(
        kube: KubeClient, namespace: str, running_state: state.ClassState) -> None:
    st = running_state
    await make_course(kube, namespace)
    watch = await eventually(lambda: (w := st.watch(namespace)) is not None and w.status == "ready" and w)
    logins = [f"s{i:02d}" for i in range(40)]
    started = time.monotonic()
    with st.notifier.subscribe(namespace) as sub:
        await asyncio.gather(*(add_userland(kube, namespace, login) for login in logins))
        seen: set[str] = set()
        notices = 0
        while not set(logins) <= seen:
            keys = await sub.next(30.0)
            assert keys, "no notice within 30 s"
            notices += 1
            seen |= keys
        elapsed = time.monotonic() - started
        # 40 students (40 watch events) arrive as at most one notice per tick, not one per event:
        # a bound that grows with the time they took to arrive (a loaded machine spreads them
        # over more ticks), never a count that only a fast machine meets.
        assert notices <= 1 + math.ceil(elapsed / st.notifier.tick), (notices, elapsed)
        assert len(watch.rows()) == 40

        # One status write is one notice, of that student only (how soon: bench/web_bench.py's
        # "sse" figures; the notifier sends a change after a quiet tick at once).
        await set_phase(kube, namespace, "ide-s07", "Ready", url="https://u.example.edu/ide/")
        keys = await sub.next(30.0)
        assert keys == {"s07"}
        env = watch.row("s07").environments[0]  # type: ignore[union-attr]
        assert (env.phase, env.reason, env.url) == ("Ready", "ready to use", "https://u.example.edu/ide/")

        # A Warning Event about the student's pod explains a failure in words.
        await set_phase(kube, namespace, "ide-s08", "Starting")
        await kube.create(EVENTS, namespace, {
            "metadata": {"name": "ide-s08.crash"}, "type": "Warning", "reason": "BackOff",
            "message": "Back-off restarting failed container",
            "involvedObject": {"kind": "Pod", "name": "ide-s08-5d4f8c7b9-x2x7q", "namespace": namespace},
            "source": {"component": "kubelet"}})
        env = await eventually(lambda: (e := watch.row("s08").environments[0]).problems and e)  # type: ignore[union-attr]
        assert env.reason == row_status.CRASH and "Back-off restarting" in env.problems[0].detail


async def _ensure(kube: KubeClient, resource: Resource, body: dict[str, object]) -> None:
    try:
        await kube.create(resource, None, body)
    except AlreadyExists:
        pass


async def test_a_course_the_web_ui_may_not_read_is_not_set_up_and_breaks_nothing(
        kube: KubeClient, control_plane: ControlPlane, tmp_path: Path) -> None:
    # Two course namespaces; the reader may list namespaces and read only the first course.
    readable, unreadable = f"t-read-{time.time_ns() % 10**8}", f"t-noread-{time.time_ns() % 10**8}"
    for ns in (readable, unreadable):
        await kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
        await make_course(kube, ns)
    await _ensure(kube, CLUSTER_ROLES, {"metadata": {"name": "userland-test-web-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]})
    await _ensure(kube, CLUSTER_ROLES, {"metadata": {"name": "userland-test-course-reader"}, "rules": [
        {"apiGroups": ["userland.dev"], "resources": ["userlands", "templates", "assignments"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]}]})
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": READER}]
    await _ensure(kube, CLUSTER_ROLE_BINDINGS, {
        "metadata": {"name": "userland-test-web-reader"}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "userland-test-web-reader"}})
    binding = {"metadata": {"name": "web-reader"}, "subjects": subject,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "userland-test-course-reader"}}
    await kube.create(ROLE_BINDINGS, readable, binding)
    await add_userland(kube, readable, "alice")
    await add_userland(kube, unreadable, "bob")
    path = control_plane.write_kubeconfig(tmp_path / "reader.kubeconfig", "web-reader-token")
    try:
        async with await KubeClient.connect(str(path)) as reader, state.running(
                reader, tick=0.1, probe_interval=0.2) as st:
            await st.wait_synced()
            ok, refused = st.watch(readable), st.watch(unreadable)
            assert ok is not None and refused is not None
            assert ok.status == "ready" and ok.row("alice") is not None
            assert refused.status == "not_set_up" and refused.rows() == []
            # The admin binds the web UI in that course: it comes alive without a restart.
            await kube.create(ROLE_BINDINGS, unreadable, binding)
            with st.notifier.subscribe(unreadable) as sub:
                await eventually(lambda: refused.status == "ready")
                assert refused.row("bob") is not None
                heard: set[str] = set()
                while EVERYTHING not in heard:  # the live dashboards are told to redraw
                    keys = await sub.next(30.0)
                    assert keys, "no notice within 30 s"
                    heard |= keys
    finally:
        for ns in (readable, unreadable):
            await kube.delete(NAMESPACES, None, ns)
