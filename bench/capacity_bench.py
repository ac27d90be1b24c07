"""Ready before the lecture, measured on a real cluster (docs/capacity.md; figures go in
docs/benchmarks.md, and capacity.json in bench/results/ once measured). NOT run yet: it needs a
real node with a registry (see below); no figures exist until it is.

  .venv/bin/python bench/capacity_bench.py --kubeconfig KUBECONFIG --registry 127.0.0.1:PORT \\
      --base-image localhost/userland-testenv:TAG [--namespace classroom] [--lecture 50]

Against a cluster where the platform is applied (deploy/ with deploy/capacity.yaml, the
operator's `USERLAND_PAUSE_IMAGE` pullable by the nodes) and a registry the nodes pull from
(the real node of `make test-cluster`: Debian's `docker-registry` on the node network
namespace's loopback, run inside that namespace, as the real-node test on the `capacity`
branch does). Each image is the base image with a fresh 64 MiB layer (buildah), pushed to the
registry, so every "cold" start pulls for real.

1. From a student's first request to a working environment (the Userland made, as
   `selfService` does on the first request, until its Pod is Ready), side by side:
   - cold: a Template whose image no node has;
   - pre-pulled: the same with the image pulled ahead by the Template's puller (another student
     of it, suspended, makes it in use; wait for `ImagesPulled`);
   - pre-started: the environment already runs (the schedule's wakeBefore woke it): the time
     is the gateway's routing only, measured as the time until its Service has a ready endpoint.
   `--repeat` runs of each; the median is reported.
2. A scheduled start of `--lecture` environments: a Template with a lecture 6 minutes ahead
   (wakeBefore 3m, room held from the start), its students asleep; from the lecture's start to
   each environment Ready: p50 and p99 (negative: Ready before the start, as it should be).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from userland.platform.model import naming

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "capacity.json"


class Cluster:
    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.ns = namespace

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", "-n", self.ns, *args],
                                input=stdin, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": list(objects)}))


def fresh_image(registry: str, base: str) -> str:
    """`base` with a random 64 MiB layer, pushed to `registry`: no node has it."""
    tag = secrets.token_hex(4)
    target = f"{registry}/capacity-bench/env:{tag}"
    with tempfile.TemporaryDirectory(prefix="capacity-bench-") as tmp:
        buildah = ["buildah", "--root", f"{tmp}/root", "--runroot", f"{tmp}/run", "--storage-driver", "vfs"]

        def run(*args: str) -> str:
            done = subprocess.run([*buildah, *args], capture_output=True, text=True, check=True)
            return done.stdout.strip()
        container = run("from", "--pull-never", base)
        (Path(tmp) / "layer").write_bytes(secrets.token_bytes(64 << 20))
        run("copy", container, f"{tmp}/layer", f"/bench-{tag}")
        run("commit", "--quiet", container, f"localhost/capacity-bench:{tag}")
        run("push", "--quiet", "--tls-verify=false", f"localhost/capacity-bench:{tag}", f"docker://{target}")
    return target


def template(name: str, image: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": name},
            "spec": {"routing": {"host": f"{name}.bench.test"}, "port": 8080, "podSpec": {
                "containers": [{"name": "env", "image": image, "imagePullPolicy": "IfNotPresent",
                                "ports": [{"containerPort": 8080}],
                                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                                                   "periodSeconds": 1},
                                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}]}, **spec}}


def userland(login: str, tpl: str, suspended: bool = False) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": "Userland",
            "metadata": {"name": f"{tpl}-{login}"}, "spec": {"user": login, "template": tpl,
                                                             "suspended": suspended}}


def ready_at(cluster: Cluster, tpl: str, login: str) -> datetime | None:
    """When the student's Pod became Ready (its Ready condition's own time), if it has."""
    pods = cluster.get("pods", "-l", f"{naming.LABEL_USER}={login},{naming.LABEL_TEMPLATE}={tpl}")["items"]
    for pod in pods:
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "True":
                return datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00"))
    return None


def wait(check: Any, timeout: float = 900) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := check()):
            return value
        time.sleep(0.2)
    raise TimeoutError("gave up waiting")


def first_request_to_ready(cluster: Cluster, tpl: str, login: str) -> float:
    start = time.monotonic()
    cluster.apply(userland(login, tpl))
    wait(lambda: ready_at(cluster, tpl, login))
    return time.monotonic() - start


def images_pulled(cluster: Cluster, tpl: str) -> bool:
    status = cluster.get("template", tpl).get("status") or {}
    return any(c["type"] == "ImagesPulled" and c["status"] == "True" for c in status.get("conditions") or [])


def start_latencies(cluster: Cluster, args: argparse.Namespace) -> dict[str, float]:
    cold, prepulled, prestarted = [], [], []
    for run in range(args.repeat):
        image = fresh_image(args.registry, args.base_image)
        cluster.apply(template(f"cold-{run}", image))
        cold.append(first_request_to_ready(cluster, f"cold-{run}", "student"))
        image = fresh_image(args.registry, args.base_image)
        cluster.apply(template(f"warm-{run}", image), userland("holder", f"warm-{run}", suspended=True))
        wait(lambda run=run: images_pulled(cluster, f"warm-{run}"))
        prepulled.append(first_request_to_ready(cluster, f"warm-{run}", "student"))
        # Pre-started: the environment runs; what is left is its endpoint being there.
        start = time.monotonic()
        wait(lambda run=run: cluster.get("endpoints", f"warm-{run}-student-svc").get("subsets"))
        prestarted.append(time.monotonic() - start)
        cluster.kubectl("delete", "template", f"cold-{run}", f"warm-{run}", "--wait=true")
    return {"cold_s": statistics.median(cold), "prepulled_s": statistics.median(prepulled),
            "prestarted_s": statistics.median(prestarted)}


def lecture(cluster: Cluster, args: argparse.Namespace) -> dict[str, float]:
    start = (datetime.now(UTC) + timedelta(minutes=6)).replace(second=0, microsecond=0)
    end = start + timedelta(minutes=30)
    image = fresh_image(args.registry, args.base_image)
    cluster.apply(template("lecture", image, idleTimeout="20s", schedule={
        "timeZone": "UTC", "wakeBefore": "3m", "lectures": [{
            "days": [start.strftime("%a")], "start": start.strftime("%H:%M"),
            "end": end.strftime("%H:%M")}]}))
    logins = [f"s{i:03d}" for i in range(args.lecture)]
    cluster.apply(*(userland(login, "lecture") for login in logins))
    wait(lambda: datetime.now(UTC) > start + timedelta(minutes=2), timeout=900)
    times = [wait(lambda login=login: ready_at(cluster, "lecture", login)) for login in logins]
    offsets = sorted((t - start).total_seconds() for t in times)
    cluster.kubectl("delete", "template", "lecture", "--wait=true")
    return {"environments": len(offsets), "p50_s": statistics.median(offsets),
            "p99_s": offsets[min(len(offsets) - 1, int(len(offsets) * 0.99))]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--registry", required=True, help="host:port the nodes pull from over plain HTTP")
    parser.add_argument("--base-image", required=True, help="an image of the test environment (buildah's)")
    parser.add_argument("--namespace", default="classroom")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lecture", type=int, default=50)
    args = parser.parse_args()
    cluster = Cluster(args.kubeconfig, args.namespace)
    results = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
               "first_request_to_ready": start_latencies(cluster, args),
               "scheduled_start": lecture(cluster, args)}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
