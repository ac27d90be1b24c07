"""Shared fixtures. What is real: everything that runs here.

- `control_plane`: a real etcd + kube-apiserver + kube-controller-manager (garbage collector,
  deployment and replicaset controllers) on loopback, one per test session, with the
  project's CRDs installed. No kubelet: tests patch a Deployment's status as a kubelet would.
- `namespace`: a fresh namespace per test, so tests never see each other's objects.
- `kube`: the project's own KubeClient as cluster admin.
- `redis_url`: a real redis-server on a free port, one per test session.
Only GitHub is faked, as a real local HTTP server (tests/fakes/).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tb_guard import pytest_runtest_makereport  # noqa: F401 (a hook: see the module)
from userland.local.controlplane import ControlPlane, crd_files
from userland.local.redisserver import redis_server
from userland.platform.clients.kube import NAMESPACES, KubeClient

# A failed test that ran `userland local` carries its services' logs (see the module).
pytest_plugins = ["tests.support.failure_logs"]

REPO = Path(__file__).resolve().parent.parent

# The real-node suite runs only where a node is up: `make test-cluster` sets this variable and
# runs tests/cluster/ alone; `make test` never collects it (fast, no root needed).
collect_ignore = [] if os.environ.get("USERLAND_NODE_KUBECONFIG") else ["cluster"]

# Identities in the API server's token file, for tests of the project's real RBAC roles.
RBAC_USERS = {
    "operator-token": ("system:serviceaccount:userland-system:userland-operator",
                       ("system:serviceaccounts", "system:authenticated")),
    "gateway-token": ("system:serviceaccount:userland-system:userland-gateway",
                      ("system:serviceaccounts", "system:authenticated")),
    "web-token": ("system:serviceaccount:userland-system:userland-web",
                  ("system:serviceaccounts", "system:authenticated")),
    # A reader bound only by the test that uses it (tests/web/test_state.py: unreadable courses).
    "web-reader-token": ("userland-test:web-reader", ("system:authenticated",)),
}


# What each test needs, read from the fixtures it uses (their whole closure, so a helper
# fixture that uses `kube` counts): every test gets a marker per server it needs, and `unit`
# when it needs none (`make test-fast` runs `-m unit` over the whole tree, wherever the file
# lives). A test that starts such a server by hand rather than through a fixture says so with
# the marker itself (`pytestmark = pytest.mark.make_run`); it is then no unit test either.
NEEDS = {"control_plane": "control_plane", "redis_url": "redis", "browser": "browser", "local": "make_run"}
SERVERS = frozenset({*NEEDS.values(), "apps"})


def needs(item: pytest.Item) -> set[str]:
    fixtures = set(getattr(item, "fixturenames", ()))
    return {marker for fixture, marker in NEEDS.items() if fixture in fixtures} | {
        mark.name for mark in item.iter_markers() if mark.name in SERVERS}


# On several workers (`make test`: pytest-xdist with this file's scheduler): a test file stays
# on one worker (its module fixtures start once), and the files whose tests start `userland
# local` (a control plane, Redis, operator, gateway, web UI and the real apps of their own) are
# two groups, each run one file after the other on one worker, first: four of them at once on
# two cores time out, and as the longest chains they must not be the last to start. The
# controller sees test ids only, hence the list of files; collection fails if a heavy test
# lives in a file not in it.
HEAVY = frozenset({"make_run", "apps"})
HEAVY_FILES = {
    "tests/browser/test_assignment_truth_browser.py": "make-run-browser",
    "tests/browser/test_assignments_browser.py": "make-run-browser",
    "tests/browser/test_help_vscode.py": "make-run-browser",
    "tests/browser/test_real_apps.py": "make-run-browser",
    "tests/browser/test_signed_out_tab.py": "make-run-browser",
    "tests/local/test_local_apps.py": "make-run-local",
    "tests/local/test_make_run.py": "make-run-local",
    "tests/local/test_make_run_holds_up.py": "make-run-local",
    "tests/local/test_make_run_lms.py": "make-run-local",
    "tests/local/test_make_run_restart.py": "make-run-local",
    "tests/local/test_sleep_end_to_end.py": "make-run-local",
    "tests/observability/test_end_to_end.py": "make-run-local",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        found = needs(item)
        for marker in sorted(found):
            item.add_marker(marker)
        if not found:
            item.add_marker(pytest.mark.unit)
        if found & HEAVY and _file_of(item.nodeid) not in HEAVY_FILES:
            raise pytest.UsageError(f"{item.nodeid} starts `userland local` or the real apps: add its file "
                                    "to HEAVY_FILES in tests/conftest.py (they run on one worker, in turn)")
    # The same order on every worker (as xdist needs), the heavy files first.
    items.sort(key=lambda item: _file_of(item.nodeid) not in HEAVY_FILES)  # stable


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


# Files of a minute or more (in a parallel run) that are not heavy: started right after the
# heavy groups, so none of them is what the run waits for at its end. Only the order depends on
# this list (a file missing from it runs later; tests/unit/test_layout.py checks each exists).
LONG_FILES = (
    "tests/operator/test_assignments.py",
    "tests/browser/test_help_attacks.py",
    "tests/web/test_course_pages.py",
    "tests/integration/test_command_errors.py",
    "tests/integration/test_rbac_web.py",
    "tests/integration/test_rbac.py",
    "tests/operator/test_sleep.py",
    "tests/integration/test_crds.py",
    "tests/proxy/test_attack_flood.py",
    "tests/unit/test_java_autograder.py",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByFileHeavyTogether(LoadScopeScheduling):  # type: ignore[misc]
        """A file is a unit; the heavy files are two units, given out first, one per worker;
        then the long files, then the rest (xdist's order: most tests first). A worker running
        a heavy group is given nothing more until the group's last test (xdist would queue the
        next unit behind a group's last two tests, minutes of work still to come)."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = _file_of(nodeid)
            return HEAVY_FILES.get(path, path)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:
                self.ordered = True
                rank = {scope: index for index, scope in enumerate(
                    (*sorted(set(HEAVY_FILES.values())), *LONG_FILES))}
                queue = sorted(self.workqueue.items(), key=lambda item: rank.get(item[0], len(rank)))
                self.workqueue.clear()
                self.workqueue.update(queue)  # stable: the rest keep xdist's order
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            # Until the group's last test: a worker runs a test only once it knows the next one
            # (or is told to stop), so the last one waits for more work or the shutdown.
            heavy = set(HEAVY_FILES.values())
            work = self.assigned_work.get(node, {})
            if sum(list(done.values()).count(False) for scope, done in work.items() if scope in heavy) > 1:
                return
            super()._reschedule(node)

    return ByFileHeavyTogether(config, log)


# The markers cannot lie: a test marked `unit` that starts a server anyway (a fixture of its
# own, a helper that runs `userland local`) is stopped at that very start and fails, naming
# the marker it needs. An audit hook sees every process the test's Python starts.
_SERVER_PROGRAMS = {"etcd": "control_plane", "kube-apiserver": "control_plane",
                    "kube-controller-manager": "control_plane", "redis-server": "redis",
                    "chromium": "browser"}
_unit_test: list[str] = []  # the node id of the unit test running now, if one is
_started_servers: list[str] = []


def _server_in(argv: list[str]) -> str | None:
    words = [str(word) for word in argv]
    names = {Path(word).name for word in words}
    if found := next((_SERVER_PROGRAMS[n] for n in names if n in _SERVER_PROGRAMS), None):
        return found
    if "userland.cli.main" in words and "local" in words:
        return "make_run"
    if "run-driver" in words:  # Playwright's driver, which starts the browser
        return "browser"
    apps = os.environ.get("USERLAND_APPS_PREFIX")
    if apps and any(word.startswith(apps.rstrip("/") + "/") for word in words):
        return "apps"
    return None


def _audit(event: str, args: tuple[object, ...]) -> None:
    if not _unit_test or event != "subprocess.Popen":
        return
    argv = [str(word) for word in args[1]] if isinstance(args[1], (list, tuple)) else [str(args[1])]
    server = _server_in(argv)
    if server is not None:
        _started_servers.append(f"{server} ({' '.join(argv)[:120]})")
        raise RuntimeError(f"{_unit_test[0]} is marked unit but starts a server: give it "
                           f"pytest.mark.{server} (tests/conftest.py, NEEDS)")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def _unit_needs_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    _unit_test[:] = [request.node.nodeid]
    _started_servers.clear()
    try:
        yield
    finally:
        _unit_test.clear()
    if _started_servers:
        pytest.fail(f"marked unit but started {', '.join(_started_servers)}: mark it with what it needs "
                    "(tests/conftest.py, NEEDS)", pytrace=False)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    state = Path(tempfile.mkdtemp(prefix="userland-k8s-"))
    plane = ControlPlane(state_dir=state, users=dict(RBAC_USERS)).start(crd_files())
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    yield name
    # The namespace controller deletes what is left inside; no need to wait for it.
    await kube.delete(NAMESPACES, None, name)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="userland-redis-"))
    try:
        with redis_server(state) as url:
            yield url
    finally:
        shutil.rmtree(state, ignore_errors=True)
