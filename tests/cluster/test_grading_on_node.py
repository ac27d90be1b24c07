"""Grading Pods on the real node (docs/grading.md, "The sandbox"): the operator in its Pod makes
them, the real kubelet runs them with the limits the grader names, and the store in its Pod keeps
what they report.

Two Assignments over the same students' collected copies (their volumes are hostPath
PersistentVolumes here; the students are suspended, so nothing else runs):

- `graded`: the project's sample autograder (tests/data/autograders/python: the harness runs the
  student's code as a uid of its own), in the project's image (it has Python and /bin/sh). alice's
  copy is right, bob's wrong, carol's a probe: at import it tries a TCP connection to a listener
  this test runs on the node's address, and prints what it finds of its sandbox (its uid and
  capabilities, a service account token, whether it can write its own submission, the memory
  limit of its cgroup), which the harness keeps as the failed test's output.
- `limits`: a grader without a harness (it imports the student's code in its own process, as a
  careless grader does): alice's copy allocates far beyond the grader's 96 MiB, bob's never
  returns. They end "out of memory" and "timed out after 30 s", each freeing its slot.

NOTE: this node's bridge CNI enforces no NetworkPolicy (scripts/node.sh), and the grading Pod's
network is closed by its NetworkPolicy alone: the connection test is expected to fail here
(strict xfail: on a node that enforces policies it passes, and the marker must go).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import COURSE, NODE, Platform, kubectl, kubectl_json, userland, wait_until
from tests.cluster.test_assignments_on_node import ThreadedGit
from userland.local.gitserver import make_repository
from userland.platform.model import naming
from userland.platform.model.objects import rfc3339

DATA = Path(__file__).resolve().parents[1] / "data"
UID = 1000  # the test Template's runAsUser: the owner of the students' files
STUDENTS = ("alice", "bob", "carol")
# The sample grader's time limit, and each of its tests' (the harness's own, per process): what a
# loaded machine needs, not what the sandbox proves. Its five tests are five Python processes under
# 500m of CPU; at a load average of 32 on this 2-core machine they took 10-11 s in all, and a 10 s
# limit failed the copies that ran past it as timed out (alice and bob in one run; the first run's
# missing grade of carol's fits the same: a timed-out grading keeps no results).
GRADED_LIMIT = 120
CASE_SECONDS = 10
# The careless grader's: bob's hanging copy must be timed out at it, and alice's memory hog must
# reach its memory limit well before it (it took 8 s to at that load).
TIME_LIMIT = 30
PROBE_PORT = 40000 + int.from_bytes(os.urandom(2), "big") % 20000
POLICY_ENFORCED = False  # this node's CNI (bridge + portmap) has no policy engine: scripts/node.sh
NAIVE_GRADER = """#!/bin/sh
# A grader without a harness: the student's code is imported in the grader's own process.
cd /autograder/submission && exec python3 -c '
import json, sys
sys.path.insert(0, ".")
import calculator
ok = calculator.add(2, 3) == 5
json.dump({"score": 10 if ok else 0}, open("/autograder/results/results.json", "w"))
'
"""
MEMORY_HOG = '''"""Allocates far beyond the grader's memory limit (every byte written: really used)."""
hog = [b"x" * (32 << 20) for _ in range(64)]  # 2 GiB


def add(a, b):
    return a + b
'''


def probe(host: str, port: int) -> str:
    """carol's copy: what a submission finds of its sandbox, printed before its (wrong) answer."""
    return f'''"""Looks at its sandbox; every answer is wrong, so the harness keeps what it printed."""
import json, os, socket

seen = {{"uid": os.getuid()}}
try:
    # Well within the harness's time per test: a connection that hangs must not hide what is printed.
    socket.create_connection(({host!r}, {port}), timeout=1).close()
    seen["connected"] = True
except OSError as err:
    seen["connected"] = False
    seen["connect_error"] = str(err)[:120]
seen["caps"] = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff"))
seen["token"] = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount")
try:
    open("written.txt", "w").write("x")
    seen["wrote"] = True
except OSError as err:
    seen["wrote"] = False
    seen["write_error"] = err.strerror
try:
    seen["memory_limit"] = int(open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read())
except (OSError, ValueError):
    seen["memory_limit"] = None
print("PROBE " + json.dumps(seen))


def add(a, b):
    return a + b + 1000


def multiply(a, b):
    return a * b + 1000


def divide(a, b):
    return a / b + 1000
'''


class Listener:
    """A TCP listener on the node's address: counts who connects (a grading Pod must not)."""

    def __init__(self) -> None:
        self.sock = socket.create_server((NODE.ip, PROBE_PORT))
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, name="probe-listener", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@dataclass
class Graded:
    gradings: dict[str, dict[str, dict[str, Any]]]  # assignment -> login -> its status entry's grading
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # grading Pods seen, by name
    probe: dict[str, Any] = field(default_factory=dict)  # what carol's code found
    policy: dict[str, Any] = field(default_factory=dict)
    connections: int = 0
    results: dict[str, Any] = field(default_factory=dict)  # carol's whole results, from the store


def volume_of(login: str) -> Path:
    claim = kubectl_json("-n", COURSE, "get", "pvc", naming.pvc_name("testenv", login))
    volume = kubectl_json("get", "pv", claim["spec"]["volumeName"])
    return Path(volume["spec"]["hostPath"]["path"])


def own_volumes() -> list[dict[str, Any]]:
    """A PersistentVolume of the test's own for each student, bound in advance to their claim.
    The node's shared volumes keep what they hold (Retain), so a volume whose claim the teardown
    deletes is Released and never bound again: taken from the shared ones, the three of this test
    left the later tests' students waiting for storage (a CI pre-check: 3 failed)."""
    pvs = []
    for login in STUDENTS:
        path = NODE.state / "volumes" / f"grading-{login}"
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # fsGroup does not apply to hostPath volumes
        pvs.append({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": f"node-pv-grading-{login}"},
                    "spec": {"capacity": {"storage": "4Gi"}, "accessModes": ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Retain",
                             "hostPath": {"path": str(path), "type": "Directory"},
                             "claimRef": {"namespace": COURSE, "name": naming.pvc_name("testenv", login)}}})
    return pvs


def put(login: str, folder: str, text: str) -> None:
    path = volume_of(login) / folder / "calculator.py"
    path.write_text(text)
    os.chown(path, UID, UID)


def assignment(name: str, source: str, tests: str, time_limit: int, **grader: Any) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Assignment",
            "metadata": {"name": name, "namespace": COURSE},
            "spec": {"title": name.title(), "templates": ["testenv"], "path": name,
                     "students": list(STUDENTS),
                     "source": {"url": source, "ref": "main", "subPath": "week1"},
                     "due": rfc3339(time.time() + 7 * 86400),
                     "grader": {"image": NODE.images["userland"], "tests": {"path": tests}, "maxScore": 10,
                                "timeLimit": f"{time_limit}s", **grader}}}


def gradings(name: str) -> dict[str, dict[str, Any]]:
    status = kubectl_json("-n", COURSE, "get", "assignment", name).get("status") or {}
    return {e["user"]: e.get("grading") or {} for e in status.get("students") or []}


def store_files(root: Path) -> list[str]:
    """The files of the store's volume under this course's assignments (what a failing check
    says it looked among)."""
    return sorted(str(p.relative_to(root)) for p in (root / "assignments" / COURSE).rglob("*")
                  if p.is_file())[:200]


def grade_steps(pods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each grading Pod's grade step as last seen: its Pod's assignment and student, how it ended
    and how long it ran (what the run's output shows of the time each grader took)."""
    out: dict[str, Any] = {}
    for name, pod in sorted(pods.items()):
        status = pod.get("status") or {}
        steps = {c["name"]: c.get("state") or {} for c in status.get("initContainerStatuses") or []}
        ended = (steps.get("grade") or {}).get("terminated") or {}
        seconds = None
        if ended.get("startedAt") and ended.get("finishedAt"):
            seconds = (datetime.fromisoformat(ended["finishedAt"].replace("Z", "+00:00"))
                       - datetime.fromisoformat(ended["startedAt"].replace("Z", "+00:00"))).total_seconds()
        job = json.loads(pod["metadata"].get("annotations", {}).get(naming.ANNOTATION_JOB) or "{}")
        out[name] = {"assignment": pod["metadata"]["labels"].get(naming.LABEL_ASSIGNMENT),
                     "members": job.get("members"), "phase": status.get("phase"),
                     "grade": {"reason": ended.get("reason"), "exitCode": ended.get("exitCode"),
                               "seconds": seconds}}
    return out


def grading_pods() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl_json("-n", COURSE, "get", "pods", "-l",
                                               f"{naming.LABEL_WORK}=grade")["items"]
    return items


@pytest.fixture(scope="module")
def graded(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Graded]:
    git = ThreadedGit(tmp_path_factory.mktemp("git"))
    listener = Listener()
    files: dict[str, bytes | str | None] = {
        "week1/calculator.py": "def add(a, b):\n    raise NotImplementedError\n",
        "naive/run_autograder": NAIVE_GRADER}
    for path in (DATA / "autograders" / "python").iterdir():
        files[f"grading/{path.name}"] = path.read_text()
    # The sample's cases as they are, each with the time a loaded node needs (GRADED_LIMIT above).
    cases = json.loads((DATA / "autograders" / "python" / "cases.json").read_text())
    files["grading/cases.json"] = json.dumps([{**case, "timeout": CASE_SECONDS} for case in cases])
    make_repository(git.root, "course", files)
    source = git.url_of("course")
    names = ("graded", "limits")
    volumes = own_volumes()
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": volumes}))
        # Available: the volume controller has them, so a claim made next meets its own first (one
        # made sooner took a shared volume while the controller had not seen these yet).
        own = [v["metadata"]["name"] for v in volumes]
        wait_until(lambda: all(kubectl_json("get", "pv", name).get("status", {}).get("phase") == "Available"
                               for name in own), "the test's own volumes Available", timeout=120)
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {**userland(login), "spec": {"user": login, "template": "testenv", "suspended": True}}
            for login in STUDENTS]}))
        small = {"requests": {"cpu": "50m", "memory": "64Mi"}}
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            assignment("graded", source, "grading", GRADED_LIMIT, resources={
                "limits": {"cpu": "500m", "memory": "256Mi", "ephemeral-storage": "256Mi"}, **small}),
            assignment("limits", source, "naive", TIME_LIMIT, resources={
                "limits": {"cpu": "500m", "memory": "96Mi", "ephemeral-storage": "256Mi"}, **small})]}))
        for name in names:
            wait_until(lambda name=name: kubectl_json("-n", COURSE, "get", "assignment", name)
                       .get("status", {}).get("handedOut") == f"{len(STUDENTS)}/{len(STUDENTS)}",
                       f"{name} handed out", timeout=300)
        right, wrong = ((DATA / "submissions" / s / "calculator.py").read_text() for s in ("right", "wrong"))
        put("alice", "graded", right)
        put("bob", "graded", wrong)
        put("carol", "graded", probe(NODE.ip, PROBE_PORT))
        put("alice", "limits", MEMORY_HOG)
        put("bob", "limits", (DATA / "submissions" / "hang" / "calculator.py").read_text())
        put("carol", "limits", right)
        # The deadline is now: each copy is taken, then graded.
        for name in names:
            kubectl("-n", COURSE, "patch", "assignment", name, "--type=merge", "-p",
                    json.dumps({"spec": {"due": "2020-01-01T00:00:00Z"}}))
        found = Graded(gradings={})

        def settled() -> bool:
            for pod in grading_pods():  # each grading Pod as the kubelet ran it, while it exists
                found.pods[pod["metadata"]["name"]] = pod
            found.gradings = {name: gradings(name) for name in names}
            done = [[g for g in by.values() if g.get("state") in ("Graded", "Failed")]
                    for by in found.gradings.values()]
            return all(len(ended) == len(STUDENTS) for ended in done)

        wait_until(settled, "every copy graded or failed", timeout=600, interval=0.5)
        print("gradings:", json.dumps(found.gradings, indent=1))
        print("grade steps:", json.dumps(grade_steps(found.pods), indent=1))
        found.policy = kubectl_json("-n", COURSE, "get", "networkpolicy",
                                    naming.grading_policy_name("graded"))
        found.connections = listener.connections
        store = NODE.state / "volumes" / "store"
        stored = sorted(store.rglob(f"assignments/{COURSE}/graded/*/grades/testenv/carol.json"))
        assert len(stored) == 1, (f"carol's results are not in the store: {stored}\n"
                                  f"gradings: {json.dumps(found.gradings, indent=1)}\n"
                                  f"the store's files: {store_files(store)}")
        found.results = json.loads(stored[0].read_text())
        outputs = [t.get("output", "") for t in found.results.get("tests") or []]
        line = next((ln for out in outputs for ln in out.splitlines() if ln.startswith("PROBE ")), None)
        assert line is not None, outputs
        found.probe = json.loads(line.removeprefix("PROBE "))
        yield found
    finally:
        for name in names:
            kubectl("-n", COURSE, "delete", "assignment", name, "--ignore-not-found", "--wait=true")
        kubectl("-n", COURSE, "delete", "userland", *(f"testenv-{login}" for login in STUDENTS),
                "--ignore-not-found", "--wait=true")
        kubectl("-n", COURSE, "delete", "pvc", *(naming.pvc_name("testenv", login) for login in STUDENTS),
                "--ignore-not-found", "--wait=true")
        # The claims were bound to the test's own volumes, which go too: no shared one is Released.
        claims = {naming.pvc_name("testenv", login) for login in STUDENTS}
        kubectl("delete", "pv", *(v["metadata"]["name"] for v in volumes), "--ignore-not-found",
                "--wait=true")
        for volume in volumes:
            shutil.rmtree(volume["spec"]["hostPath"]["path"], ignore_errors=True)
        released = [pv["metadata"]["name"] for pv in kubectl_json("get", "pv")["items"]
                    if ((pv["spec"].get("claimRef") or {}).get("name") in claims
                        and (pv["spec"].get("claimRef") or {}).get("namespace") == COURSE)]
        assert released == [], f"shared volumes held by this test's deleted claims: {released}"
        # The Assignments' grading Pods and NetworkPolicies go with them (owner references).
        wait_until(lambda: grading_pods() == [], "every grading Pod gone", timeout=120)
        policies = kubectl_json("-n", COURSE, "get", "networkpolicies", "-l", naming.LABEL_ASSIGNMENT)
        assert policies["items"] == [], policies["items"]
        listener.close()
        git.close()


def test_a_right_and_a_wrong_copy_are_graded_on_the_node(graded: Graded) -> None:
    scores = {login: (g["state"], g.get("score")) for login, g in graded.gradings["graded"].items()}
    assert scores["alice"] == ("Graded", 10) and scores["bob"] == ("Graded", 4), scores
    # The probe's answers were all wrong, and only its code's own tests count.
    assert scores["carol"][0] == "Graded" and scores["carol"][1] == 0, scores


def test_the_grading_pod_has_no_token_no_privilege_and_a_read_only_submission(graded: Graded) -> None:
    pods = [p for p in graded.pods.values() if p["metadata"]["labels"][naming.LABEL_ASSIGNMENT] == "graded"]
    assert pods, "no grading Pod of the sample grader was seen"
    for pod in pods:
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not [v for v in spec["volumes"] if "projected" in v or "secret" in v], spec["volumes"]
        steps = {c["name"]: c for c in [*spec["initContainers"], *spec["containers"]]}
        for step in steps.values():
            security = step["securityContext"]
            assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
        grade = steps["grade"]
        assert grade["securityContext"]["capabilities"].get("add") == ["SETUID", "SETGID"]
        assert {m["mountPath"]: m.get("readOnly", False) for m in grade["volumeMounts"]}[
            "/autograder/submission"] is True
        assert not [e for e in grade.get("env") or [] if e["name"].startswith("USERLAND_")]
        assert grade["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi",
                                                "ephemeral-storage": "256Mi"}
        assert steps["report"]["securityContext"]["runAsNonRoot"] is True
        assert spec["activeDeadlineSeconds"] > GRADED_LIMIT
    # What the student's code found, from inside the Pod the kubelet ran.
    seen = graded.probe
    assert seen["uid"] >= 200000, seen  # the harness's own uid for this run: not root
    assert seen["caps"] == "0000000000000000", seen  # no capability at all
    assert seen["token"] is False, seen
    assert seen["wrote"] is False and seen["write_error"] == "Read-only file system", seen
    assert seen["memory_limit"] == 256 * 1024 * 1024, seen  # the grader's limit, enforced by the node


def test_the_grading_pods_network_is_closed_by_their_policy(graded: Graded) -> None:
    # The policy the operator applied: it selects the grading Pods, lets nothing in, and lets
    # out only TCP to the store's Pods on its port (no DNS, nothing else). Apart from the
    # connection test below, so that its strict xfail can only be the connection getting through.
    policy = graded.policy["spec"]
    assert policy["podSelector"]["matchLabels"] == {naming.LABEL_ASSIGNMENT: "graded",
                                                    naming.LABEL_COMPONENT: naming.GRADER_COMPONENT}
    assert policy["policyTypes"] == ["Ingress", "Egress"] and not policy.get("ingress")
    (rule,) = policy["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}] and "podSelector" in rule["to"][0]


@pytest.mark.xfail(not POLICY_ENFORCED, strict=True,
                   reason="this node's bridge CNI enforces no NetworkPolicy (scripts/node.sh): the grading "
                          "Pods' network is closed by their NetworkPolicy alone")
def test_a_submission_cannot_connect_out(graded: Graded) -> None:
    # What a submission meets: its connection to the node's address does not get through.
    assert graded.probe["connected"] is False, graded.probe
    assert graded.connections == 0


def test_a_copy_past_its_memory_limit_is_out_of_memory_and_a_hanging_one_timed_out(graded: Graded) -> None:
    limits = graded.gradings["limits"]
    assert (limits["alice"]["state"], limits["alice"]["reason"]) == ("Failed", "OutOfMemory"), limits["alice"]
    assert "ran out of memory" in limits["alice"]["message"]
    assert limits["bob"] == {**limits["bob"], "state": "Failed", "reason": "TimedOut",
                             "message": f"timed out after {TIME_LIMIT} s"}, limits["bob"]
    # The grader without a harness still grades a right copy.
    assert (limits["carol"]["state"], limits["carol"].get("score")) == ("Graded", 10), limits["carol"]
