"""Ready before the lecture, measured on the real node (docs/capacity.md; figures in the README
and docs/benchmarks.md; the run's results go to capacity.json in bench/results/).

Runs inside the node's network namespace, against the platform the node suite applied:
`USERLAND_BENCH=capacity make test-cluster` runs it after the whole suite (both parts);
`USERLAND_BENCH=lecture make test-cluster` applies the platform alone (the suite's first test,
nothing else) and runs only part 2 (`--only lecture`) on a node that holds nothing but the
platform, for a clean figure. scripts/test-cluster.sh passes the node's kubeconfig, test image
and image list; by hand on a node that is up, run it under `nsenter
--net=/run/netns/userland-node` with those three arguments. A registry of its own (Debian's
docker-registry, tests/support/registry.py) on the namespace's loopback serves every image: the
test environment's image plus a fresh 64 MiB layer of random bytes, so the node has every layer
but that one and a "cold" start really pulls it (over loopback: the cost of the pull itself is
small here; on a real site it is minutes).

1. From a student's first request to a working environment (the Userland made, as
   `selfService` does on a first request, until its Service answers GET /healthz), side by side
   in each round:
   - cold: a Template whose image the node does not have;
   - pre-pulled: the same, once the Template's puller has pulled its image (a suspended student
     makes it in use; wait for `ImagesPulled`);
   - pre-started: the environment already runs (the schedule woke it): a request answered.
   `--repeat` rounds; medians, and each as a ratio of pre-started.
2. A scheduled start of `--lecture` environments: a Template with a lecture about 5 minutes
   ahead (wakeBefore 2m), its students asleep (idleTimeout 20s); from the lecture's start to each
   environment Ready (its Pod's Ready time): p50 and p99 (negative: Ready before the start, as
   it should be), over those Ready within three minutes of the start, and how many were Ready
   before the start; how many were not Ready by then (a node without room for all leaves some
   Pending) is reported beside them. Each environment requests an equal share of
   `--lecture-share` (80%) of the CPU the node has left (its allocatable less what its Pods
   request) and 32 MiB, so all of them fit, each placeholder holding one's room; it stops with
   a clear error when the node has too little left for that.
`--only` runs one part. Everything it makes is deleted at the end, whatever happened. The
results go to bench/results/capacity.json; a part not run keeps what an earlier run wrote.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.registry import Registry, archive_of  # noqa: E402
from userland.operator.rules.capacity.room import parse_quantity, pod_requests  # noqa: E402
from userland.platform.model import naming  # noqa: E402

RESULTS = REPO / "bench" / "results" / "capacity.json"
REPOSITORY = "capacity-bench/env"
PREFIX = "bench-cap"
T = TypeVar("T")


class Cluster:
    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.ns = namespace

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", "-n", self.ns, *args],
                                input=stdin, capture_output=True, text=True, timeout=600)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": list(objects)}))


def template(name: str, image: str, requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
            "spec": {"routing": {"host": f"{name}.bench.test"}, "port": 8080, "podSpec": {
                "automountServiceAccountToken": False, "enableServiceLinks": False,
                "containers": [{"name": "env", "image": image, "imagePullPolicy": "IfNotPresent",
                                "env": [{"name": "STUDENT", "value": "${USER}"}],
                                "ports": [{"containerPort": 8080}],
                                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                                                   "periodSeconds": 1},
                                "resources": {"requests": requests or {"cpu": "10m", "memory": "32Mi"}}}]},
                     **spec}}


def userland(login: str, tpl: str, suspended: bool = False) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Userland",
            "metadata": {"name": f"{tpl}-{login}"}, "spec": {"user": login, "template": tpl,
                                                             "suspended": suspended}}


def wait(check: Callable[[], T | None], what: str, timeout: float = 600, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := check()):
            return value
        time.sleep(interval)
    raise TimeoutError(f"gave up waiting for {what}")


ADDRESSES: dict[str, str] = {}


def answers(cluster: Cluster, tpl: str, login: str) -> bool:
    """The environment's Service answers GET /healthz (a working environment). Its address is
    asked of the API server once, so a poll costs one HTTP request once the Service exists."""
    name = naming.service_name(tpl, login)
    try:
        if name not in ADDRESSES:
            ADDRESSES[name] = cluster.get("service", name)["spec"]["clusterIP"]
        with urllib.request.urlopen(f"http://{ADDRESSES[name]}:8080/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except (RuntimeError, OSError, KeyError):
        return False


def first_request_to_working(cluster: Cluster, tpl: str, login: str) -> float:
    start = time.monotonic()
    cluster.apply(userland(login, tpl))
    wait(lambda: answers(cluster, tpl, login), f"{tpl}-{login} answering")
    return time.monotonic() - start


def images_pulled(cluster: Cluster, tpl: str) -> bool:
    """ImagesPulled True, counted on the nodes (not "nothing to pull yet", before the operator
    has seen the Template's first Userland)."""
    status = cluster.get("template", tpl).get("status") or {}
    return any(c["type"] == "ImagesPulled" and c["status"] == "True" and "nodes" in c.get("message", "")
               for c in status.get("conditions") or [])


def remove(cluster: Cluster, templates: list[str]) -> None:
    """Delete the bench's Userlands and Templates and wait until their Pods are gone."""
    userlands = [u["metadata"]["name"] for u in cluster.get("userlands")["items"]
                 if u["spec"].get("template") in templates]
    if userlands:
        cluster.kubectl("delete", "userlands", *userlands, "--ignore-not-found", "--wait=true")
    if templates:
        cluster.kubectl("delete", "templates", *templates, "--ignore-not-found", "--wait=true")

    def no_pods() -> bool:
        for pod in cluster.get("pods")["items"]:
            labels = pod["metadata"].get("labels") or {}
            if (labels.get(naming.LABEL_TEMPLATE) in templates
                    or labels.get(naming.LABEL_CAPACITY_FOR) in templates):
                return False
        return True
    wait(no_pods, "the bench's Pods gone", timeout=300, interval=1)


def start_latencies(cluster: Cluster, registry: Registry, archive: Path, args: argparse.Namespace
                    ) -> dict[str, Any]:
    cold, prepulled, prestarted = [], [], []
    for run in range(args.repeat):
        tag = secrets.token_hex(3)
        names = [f"{PREFIX}-cold-{run}", f"{PREFIX}-warm-{run}"]
        try:
            image = registry.push_variant(archive, REPOSITORY, f"cold-{tag}", args.layer_mib << 20).reference
            cluster.apply(template(names[0], image))
            cold.append(first_request_to_working(cluster, names[0], "student"))
            image = registry.push_variant(archive, REPOSITORY, f"warm-{tag}", args.layer_mib << 20).reference
            cluster.apply(template(names[1], image), userland("holder", names[1], suspended=True))
            wait(partial(images_pulled, cluster, names[1]), "ImagesPulled", interval=0.5)
            prepulled.append(first_request_to_working(cluster, names[1], "student"))
            # Pre-started: it runs (the schedule woke it); a student's request is answered.
            start = time.monotonic()
            wait(partial(answers, cluster, names[1], "student"), "an answer", interval=0.01)
            prestarted.append(time.monotonic() - start)
        finally:
            remove(cluster, names)
        print(f"round {run + 1}: cold {cold[-1]:.2f} s, pre-pulled {prepulled[-1]:.2f} s, "
              f"pre-started {prestarted[-1]:.3f} s", file=sys.stderr)
    medians = {"cold_s": statistics.median(cold), "prepulled_s": statistics.median(prepulled),
               "prestarted_s": statistics.median(prestarted)}
    return {**medians, "rounds": {"cold_s": cold, "prepulled_s": prepulled, "prestarted_s": prestarted},
            "cold_over_prepulled": medians["cold_s"] / medians["prepulled_s"],
            "cold_over_prestarted": medians["cold_s"] / medians["prestarted_s"],
            "prepulled_over_prestarted": medians["prepulled_s"] / medians["prestarted_s"]}


def ready_times(cluster: Cluster, tpl: str) -> dict[str, datetime]:
    """Each student's environment's Ready time (its Pod's Ready condition), by login."""
    found: dict[str, datetime] = {}
    for pod in cluster.get("pods", "-l", f"{naming.LABEL_TEMPLATE}={tpl}")["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        login = (pod["metadata"].get("labels") or {}).get(naming.LABEL_USER, "")
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "True":
                found[login] = datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00"))
    return found


def lecture_ready(cluster: Cluster, tpl: str) -> str:
    """The course's line for its next lecture (the Template's LectureReady condition)."""
    status = cluster.get("template", tpl).get("status") or {}
    return next((f"{c['status']}: {c.get('message', '')}" for c in status.get("conditions") or []
                 if c["type"] == "LectureReady"), "")


def room_left(cluster: Cluster) -> dict[str, Fraction]:
    """CPU (cores) and memory (bytes) the scheduler has left on the node: its allocatable less
    what the Pods on it request (as tests/cluster/test_capacity_on_node.py counts it)."""
    (node,) = cluster.get("nodes")["items"]
    left = {r: parse_quantity(node["status"]["allocatable"][r]) for r in ("cpu", "memory")}
    for pod in cluster.get("pods", "--all-namespaces")["items"]:
        if pod["spec"].get("nodeName") == node["metadata"]["name"] and \
                pod["status"].get("phase") not in ("Succeeded", "Failed"):
            requested = pod_requests(pod["spec"])
            for resource in left:
                left[resource] -= parse_quantity(requested.get(resource, "0"))
    return left


MEMORY_MI = 32  # what the test environment needs; the node has GiBs: CPU is what runs out


def lecture_requests(left: dict[str, Fraction], environments: int, share: float) -> dict[str, str]:
    """Each environment's requests: CPU an equal part of `share` of what is left (so that all fit,
    the rest slack for the puller and for Pods that come and go, as the room test sizes its
    environments), memory 32 MiB if `share` of what is left holds that for all."""
    cpu_m = int(left["cpu"] * 1000 * Fraction(share) / environments)
    memory_mi = min(MEMORY_MI, int(left["memory"] * Fraction(share) / environments) >> 20)
    if cpu_m < 1 or memory_mi < MEMORY_MI:
        raise SystemExit(f"the node has {float(left['cpu']) * 1000:.0f}m CPU and "
                         f"{int(left['memory']) >> 20} MiB left: too little for {environments} environments "
                         f"(at least 1m and {MEMORY_MI} MiB each); run the lecture alone "
                         "(USERLAND_BENCH=lecture) or with fewer (--lecture)")
    return {"cpu": f"{cpu_m}m", "memory": f"{memory_mi}Mi"}


def lecture(cluster: Cluster, registry: Registry, archive: Path, args: argparse.Namespace) -> dict[str, Any]:
    name = f"{PREFIX}-lecture"
    begun = datetime.now(UTC).isoformat(timespec="seconds")
    left = room_left(cluster)
    requests = lecture_requests(left, args.lecture, args.lecture_share)
    print(f"lecture: {float(left['cpu']) * 1000:.0f}m CPU and {int(left['memory']) >> 20} MiB left on the "
          f"node; each of {args.lecture} environments requests {requests}", file=sys.stderr)
    start = (datetime.now(UTC) + timedelta(minutes=5, seconds=59)).replace(second=0, microsecond=0)
    zone = "UTC" if 1 <= start.hour <= 22 else "Etc/GMT+6"
    local = start.astimezone(ZoneInfo(zone))
    logins = [f"s{i:03d}" for i in range(args.lecture)]
    try:
        image = registry.push_variant(archive, REPOSITORY, f"lecture-{secrets.token_hex(3)}",
                                      args.layer_mib << 20).reference
        cluster.apply(template(name, image, requests, idleTimeout="20s", schedule={
            "timeZone": zone, "wakeBefore": "2m", "lectures": [{
                "days": [local.strftime("%a")], "start": local.strftime("%H:%M"),
                "end": (local + timedelta(minutes=30)).strftime("%H:%M")}]}))
        cluster.apply(*(userland(login, name) for login in logins))

        def asleep() -> bool:
            items = cluster.get("userlands")["items"]
            return sum(1 for u in items if u["spec"].get("template") == name
                       and (u.get("status") or {}).get("phase") == "Idle") == len(logins)
        wait(asleep, "every student asleep before the wake",
             timeout=(start - datetime.now(UTC)).total_seconds() - 125, interval=1)
        asleep_at = datetime.now(UTC).replace(microsecond=0)  # Pod times are whole seconds
        # What the course says ahead, with everyone asleep and room held (after a few seconds
        # for the placeholders), and the last thing it said before the start.
        time.sleep(min(20.0, max(0.0, (start - datetime.now(UTC)).total_seconds() - 121)))
        said_ahead = said_last = lecture_ready(cluster, name)

        def woken() -> dict[str, datetime]:
            return {k: t for k, t in ready_times(cluster, name).items() if t >= asleep_at}

        # Every environment Ready, or three minutes past the start: a node without room for
        # all of them leaves some Pending (the course says so), and those are counted, not waited for.
        give_up = start + timedelta(minutes=3)
        while len(ready := woken()) < len(logins) and datetime.now(UTC) < give_up:
            if datetime.now(UTC) < start - timedelta(seconds=2):
                said_last = lecture_ready(cluster, name)
            time.sleep(1)
        offsets = sorted((t - start).total_seconds() for t in ready.values())
    finally:
        remove(cluster, [name])
    return {"measured_at": begun, "environments": len(logins),
            "node_left_before": {"cpu_m": int(left["cpu"] * 1000), "memory_mib": int(left["memory"]) >> 20},
            "requests_each": requests, "ready": len(offsets),
            "ready_before_start": sum(1 for o in offsets if o < 0),
            "not_ready_3_min_after": len(logins) - len(offsets),
            "lecture_start": start.isoformat(), "wake_before_s": 120,
            "p50_s": statistics.median(offsets) if offsets else None,
            "p99_s": offsets[min(len(offsets) - 1, int(len(offsets) * 0.99))] if offsets else None,
            "max_s": offsets[-1] if offsets else None,
            "course_said_before_the_wake": said_ahead, "course_said_before_the_start": said_last}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True, help="the node's admin kubeconfig")
    parser.add_argument("--image", required=True,
                        help="an image the node has, with a docker-archive tar from scripts/node-images.sh")
    parser.add_argument("--images-env", required=True, help="what scripts/node-images.sh printed")
    parser.add_argument("--namespace", default="classroom")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lecture", type=int, default=50)
    parser.add_argument("--lecture-share", type=float, default=0.8,
                        help="the part of the node's room left that the lecture's environments request")
    parser.add_argument("--layer-mib", type=int, default=64)
    parser.add_argument("--only", choices=("first-request", "lecture"),
                        help="run one part (default: both)")
    args = parser.parse_args()
    cluster = Cluster(args.kubeconfig, args.namespace)
    archive = archive_of(args.image, Path(args.images_env))
    workdir = Path(tempfile.mkdtemp(prefix="capacity-bench-"))
    registry = Registry(workdir)
    try:
        registry.start()
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results["fresh_layer_mib"] = args.layer_mib
        if args.only in (None, "first-request"):
            results["first_request_to_working"] = {
                "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
                **start_latencies(cluster, registry, archive, args)}
        if args.only in (None, "lecture"):
            results["scheduled_start"] = lecture(cluster, registry, archive, args)
    finally:
        registry.close()
        shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
