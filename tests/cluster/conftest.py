"""The real-node suite: `make test-cluster` only (scripts/test-cluster.sh brings the node up,
runs this folder inside the node's network namespace, and takes everything down).

What is real: all of it. A single Kubernetes 1.20 node (kubelet, kube-proxy, containerd, runc,
the bridge CNI) runs the images built from deploy/Dockerfile and Debian without any registry;
`kubectl apply -k` applies deploy/ through a small overlay (below) and the example course
deploy/examples/. Students sign in through the gateway's Service with a fake GitHub (a real
HTTP server, tests/fakes/github.py) that the gateway's Pods reach on the node's address, and
their environments are real Pods of a small test image (tests/cluster/envapp.py) with real
volumes (hostPath PersistentVolumes, as a node without a storage provisioner needs).

The overlay is what any site writes for itself: the images it built, its settings and its
Secret. Two things are this node's own: GitHub's URL, and the ClusterIPs of Redis, the web UI
and the assignment store, which USERLAND_REDIS_URL, USERLAND_WEB_URL and USERLAND_STORE_URL
name instead of the DNS names deploy/config.env uses, because this node has no cluster DNS (the
gateway itself needs none to reach students: docs/decisions.md, "reached by its ClusterIP").
Those addresses are never chosen by us: the overlay's Services are applied first, the API
server allocates their addresses, and the settings name what it allocated (a pinned address
inside the service range can be taken by another Service first: Kubernetes 1.20 allocates at
random over the whole range). The store's claim gets a hostPath volume made for it (no
provisioner here).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.fakes.github import FakeGitHub
from tests.support.waiting import eventually as wait_for
from tests.support.waiting import eventually_sync
from userland.platform.clients.kube import KubeClient

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "userland-system"
COURSE = "classroom"
PUBLIC_HOST = "userland.test"
ENV_HOST = "env.test"  # the test Template's host: alice's origin is alice.env.test
GATEWAY_PORT = 8000
PUBLIC_URL = f"http://{PUBLIC_HOST}:{GATEWAY_PORT}"
ORG = "test-university"
INSTRUCTOR = "koba1t"  # deploy/course/namespace.yaml's instructor
# The Services whose ClusterIPs the settings (or the tests, for the gateway) need.
ADDRESSED = ("userland-redis", "userland-web", "userland-gateway", "userland-store")
DEPLOYMENTS = ("userland-operator", "userland-gateway", "userland-web", "userland-redis", "userland-store")


@dataclass(frozen=True)
class Node:
    namespace: str
    state: Path
    ip: str
    name: str
    kubeconfig: Path
    images: dict[str, str]

    @classmethod
    def from_env(cls) -> Node:
        env = os.environ
        images = {k.removeprefix("USERLAND_NODE_IMAGE_"): v for k, v in env.items()
                  if k.startswith("USERLAND_NODE_IMAGE_")}
        return cls(namespace=env["USERLAND_NODE_NS"], state=Path(env["USERLAND_NODE_STATE"]),
                   ip=env["USERLAND_NODE_IP"], name=env["USERLAND_NODE_NAME"],
                   kubeconfig=Path(env["USERLAND_NODE_KUBECONFIG"]), images=images)


NODE = Node.from_env()
# The port of the git server tests/cluster/test_assignments_on_node.py runs on the node's address:
# the store may fetch only from there (USERLAND_STORE_GIT_URLS), and its egress policy gets a rule
# for it, as an admin adds one for a git server on a private address (deploy/networkpolicies.yaml).
GIT_PORT = 20000 + secrets.randbelow(20000)


def kubectl(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 300) -> str:
    result = subprocess.run(["kubectl", f"--kubeconfig={NODE.kubeconfig}", *args], input=stdin,
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}\n{diagnose()}")
    return result.stdout


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def diagnose() -> str:
    """What a failing check needs to be understood: Pods, recent events, the tails of the logs
    of Pods that are not ready (read from the node's log files: the kubelet's API is closed)."""
    parts = [subprocess.run(["kubectl", f"--kubeconfig={NODE.kubeconfig}", "get", "pods", "-A", "-o", "wide"],
                            capture_output=True, text=True).stdout]
    events = subprocess.run(["kubectl", f"--kubeconfig={NODE.kubeconfig}", "get", "events", "-A",
                             "--sort-by=.lastTimestamp"], capture_output=True, text=True).stdout
    parts.append("\n".join(events.splitlines()[-25:]))
    for log in sorted(Path("/var/log/pods").glob("*/*/*.log")):
        tail = log.read_text(errors="replace").splitlines()[-15:]
        parts.append(f"--- {log}\n" + "\n".join(tail))
    return "\n".join(parts)


def wait_until(check: Any, what: str, timeout: float = 180, interval: float = 1) -> Any:
    return eventually_sync(check, timeout, interval, explain=lambda: f"{what}\n{diagnose()}")


async def eventually(check: Any, what: str, timeout: float = 180, interval: float = 1) -> Any:
    return await wait_for(check, timeout, interval, explain=lambda: f"{what}\n{diagnose()}")


# -- GitHub, reachable from the Pods ---------------------------------------------------------


class ThreadedGitHub:
    """The fake GitHub on its own event loop in a thread: it must answer the gateway's Pods for
    the whole session, whichever test's loop is running."""

    def __init__(self, host: str) -> None:
        self.fake = FakeGitHub(client_id="node-client-id", client_secret=secrets.token_hex(16))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-github", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(host=host), self.loop).result(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="session")
def github() -> Iterator[FakeGitHub]:
    threaded = ThreadedGitHub(NODE.ip)
    fake = threaded.fake
    for i, login in enumerate(("alice", "bob", "carol", "dave", "erin", "dana", "erik", "fiona", INSTRUCTOR),
                              start=1):
        fake.add_user(login, 1000 + i, orgs=[ORG])
    fake.add_user("mallory", 2000, orgs=["elsewhere"])
    yield fake
    threaded.close()


# -- the platform, applied the way an admin applies it --------------------------------------


def published_name() -> str:
    base = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    (entry,) = [i for i in base["images"] if i["name"] == "userland"]
    return str(entry.get("newName") or "userland")


def overlay(workdir: Path, github: FakeGitHub, addresses: dict[str, str] | None = None) -> Path:
    """A site's overlay of deploy/: images, settings, Secret, and (this node has no DNS) the
    ClusterIPs the API server gave the platform's Services (`addresses`; None before they exist:
    the URLs are then the base's names, only the Services are applied from that rendering)."""
    if not (workdir / "base").exists():
        (workdir / "base").symlink_to(REPO / "deploy")
    userland_name, userland_tag = NODE.images["userland"].rsplit(":", 1)
    redis_name, redis_tag = NODE.images["redis"].rsplit(":", 1)
    settings = {
        "USERLAND_PUBLIC_URL": PUBLIC_URL,
        "USERLAND_COOKIE_SECURE": "false",
        "USERLAND_ALLOWED_ORGS": ORG,
        "USERLAND_GITHUB_URL": github.url,
        "USERLAND_GITHUB_API_URL": github.api_url,
        "USERLAND_STORE_GIT_URLS": f"http://{NODE.ip}:{GIT_PORT}/",
        # Image pullers and placeholders (docs/capacity.md) run the node's own pause image.
        "USERLAND_PAUSE_IMAGE": NODE.images["pause"],
    }
    if addresses is not None:
        settings |= {"USERLAND_REDIS_URL": f"redis://{addresses['userland-redis']}:6379/0",
                     "USERLAND_WEB_URL": f"http://{addresses['userland-web']}:8080",
                     "USERLAND_STORE_URL": f"http://{addresses['userland-store']}:8080"}
    # The store may reach the node's git server (deploy/ allows only public addresses by default).
    patches = [{"target": {"kind": "NetworkPolicy", "name": "userland-store-egress"},
                "patch": json.dumps([{"op": "add", "path": "/spec/egress/-", "value": {
                    "to": [{"ipBlock": {"cidr": f"{NODE.ip}/32"}}],
                    "ports": [{"protocol": "TCP", "port": GIT_PORT}]}}])}]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": SYSTEM,
        "resources": ["base"],
        # The base already points `userland` at its published name: replace that one.
        "images": [{"name": published_name(), "newName": userland_name, "newTag": userland_tag},
                   {"name": "redis", "newName": redis_name, "newTag": redis_tag}],
        "configMapGenerator": [{"name": "userland-config", "behavior": "merge",
                                "literals": [f"{k}={v}" for k, v in settings.items()]}],
        "secretGenerator": [{"name": "userland-secrets", "options": {"disableNameSuffixHash": True},
                             "literals": [f"github-client-id={github.client_id}",
                                          f"github-client-secret={github.client_secret}",
                                          f"identity-secret={secrets.token_hex(32)}",
                                          f"store-secret={secrets.token_hex(32)}"]}],
        "patches": patches,
    }
    (workdir / "kustomization.yaml").write_text(json.dumps(kustomization, indent=1))
    return workdir


def envapp_template() -> dict[str, Any]:
    """The small test environment as a Template with storage, shaped like the shipped ones."""
    return {
        "apiVersion": "userland.dev/v1alpha1", "kind": "Template",
        "metadata": {"name": "testenv", "namespace": COURSE},
        "spec": {
            "displayName": "Test environment",
            "routing": {"host": ENV_HOST},
            "port": 8080,
            "storage": {"size": "64Mi", "mountPath": "/data", "reclaimPolicy": "Retain"},
            "podSpec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                    "fsGroup": 1000},
                "containers": [{
                    "name": "env",
                    "image": NODE.images["testenv"],
                    "imagePullPolicy": "IfNotPresent",
                    "env": [{"name": "STUDENT", "value": "${USER}"}, {"name": "DATA_DIR", "value": "/data"}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 2},
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                  "limits": {"cpu": "500m", "memory": "256Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                }],
            },
        },
    }


def store_volume() -> dict[str, Any]:
    """The assignment store's volume, bound to its claim in advance (deploy/store.yaml asks 20Gi)."""
    path = NODE.state / "volumes" / "store"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "node-pv-store"},
            "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(path), "type": "Directory"},
                     "claimRef": {"namespace": SYSTEM, "name": "userland-store-data"}}}


def volumes(count: int) -> list[dict[str, Any]]:
    """hostPath PersistentVolumes: this node has no provisioner. Retain keeps a student's data."""
    pvs = []
    for i in range(count):
        path = NODE.state / "volumes" / f"pv-{i}"
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # fsGroup does not apply to hostPath volumes
        pvs.append({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": f"node-pv-{i}"},
                    "spec": {"capacity": {"storage": "4Gi"}, "accessModes": ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Retain",
                             "hostPath": {"path": str(path), "type": "Directory"}}})
    return pvs


def services_first(workdir: Path, github: FakeGitHub) -> dict[str, str]:
    """Apply the overlay's Namespace and Services alone (nothing else yet: no Pod can start
    with settings that name no address) and return the ClusterIPs the API server allocated."""
    rendered = yaml.safe_load_all(kubectl("kustomize", str(overlay(workdir, github))))
    first = [d for d in rendered if d and d.get("kind") in ("Namespace", "Service")]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": first}))
    services = kubectl_json("-n", SYSTEM, "get", "services")["items"]
    addresses = {s["metadata"]["name"]: s["spec"].get("clusterIP") or "" for s in services}
    missing = [name for name in ADDRESSED if not addresses.get(name) or addresses[name] == "None"]
    assert not missing, f"Services without a ClusterIP after they were applied: {missing}\n{diagnose()}"
    return {name: addresses[name] for name in ADDRESSED}


@dataclass
class Platform:
    github: FakeGitHub
    addresses: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def gateway_ip(self) -> str:
        return self.addresses["userland-gateway"]


@pytest.fixture(scope="session")
def platform(github: FakeGitHub) -> Iterator[Platform]:
    with tempfile.TemporaryDirectory(prefix="userland-overlay-") as tmp:
        start = time.monotonic()
        kubectl("apply", "-f", "-", stdin=json.dumps(store_volume()))
        addresses = services_first(Path(tmp), github)
        result = Platform(github, addresses)
        # The same Services again (unchanged: their addresses stay), and everything else.
        kubectl("apply", "-k", str(overlay(Path(tmp), github, addresses)))
        for name in DEPLOYMENTS:
            kubectl("-n", SYSTEM, "rollout", "status", f"deployment/{name}", "--timeout=240s")
        result.timings["apply_to_available_s"] = time.monotonic() - start
    kubectl("apply", "-k", str(REPO / "deploy" / "examples"))
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": [*volumes(10), envapp_template()]}))
    yield result


# -- clients ------------------------------------------------------------------------------


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(NODE.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


class NodeHosts(AbstractResolver):
    """Every *.test (and *.example.edu) name is the gateway's Service, as a site's DNS would
    point it at its load balancer; anything else is refused."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        if not host.endswith((".test", ".example.edu")):  # the example Templates' hosts too
            raise OSError(f"{host} is not a name of this test")
        return [{"hostname": host, "host": self.address, "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None


def browser(gateway_ip: str) -> aiohttp.ClientSession:
    """A client with its own cookie jar that reaches the gateway the way a browser would."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=NodeHosts(gateway_ip)),
                                 cookie_jar=aiohttp.CookieJar(),
                                 # What a browser's navigation asks for (the gateway redirects
                                 # such requests to sign in; others get a 401).
                                 headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
                                 timeout=aiohttp.ClientTimeout(total=60))


def origin(login: str) -> str:
    return f"http://{login}.{ENV_HOST}:{GATEWAY_PORT}"


async def sign_in(client: aiohttp.ClientSession, github: FakeGitHub, login: str, url: str
                  ) -> aiohttp.ClientResponse:
    """Open `url` as `login`: every redirect (handoff, GitHub, callback) is followed."""
    github.sign_in(login)
    return await browse(client, url)


REFRESH = re.compile(r'<meta http-equiv="refresh" content="(\d+)">')


async def browse(client: aiohttp.ClientSession, url: str, *, patience: float = 90,
                 **kwargs: Any) -> aiohttp.ClientResponse:
    """GET `url` as a browser would: follow redirects, and while the gateway says "starting"
    (its page reloads itself; a script's request gets 503 with Retry-After) wait and ask again,
    for at most `patience` seconds. A Service routes a moment after its Pod is Ready."""
    deadline = time.monotonic() + patience
    while True:
        response = await client.get(url, max_redirects=15, **kwargs)
        text = await response.text(errors="replace")
        again = REFRESH.search(text) if response.status == 200 else None
        wait = float(again.group(1)) if again else (
            float(response.headers.get("Retry-After", "0")) if response.status == 503 else 0)
        if not wait or time.monotonic() + wait > deadline:
            return response
        url = str(response.url)
        await asyncio.sleep(wait)


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def userland(login: str, template: str = "testenv") -> dict[str, Any]:
    return {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
            "metadata": {"name": f"{template}-{login}", "namespace": COURSE},
            "spec": {"user": login, "template": template}}


def student_pods(login: str, template: str = "testenv") -> list[dict[str, Any]]:
    pods = kubectl_json("-n", COURSE, "get", "pods", "-l",
                        f"userland.dev/user={login},userland.dev/template={template}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready_userland(login: str, template: str = "testenv", timeout: float = 180) -> dict[str, Any]:
    """Add `login` to the course (kubectl, as an instructor could) and wait for a ready Pod."""
    kubectl("apply", "-f", "-", stdin=json.dumps(userland(login, template)))

    def ready_pod() -> dict[str, Any] | None:
        for pod in student_pods(login, template):
            statuses = pod["status"].get("containerStatuses") or []
            if statuses and all(s["ready"] for s in statuses):
                return pod
        return None

    pod = wait_until(ready_pod, f"{login}'s Pod ready", timeout=timeout)
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in (
        kubectl_json("-n", COURSE, "get", "userland", f"{template}-{login}").get("status") or {}
    ).get("conditions") or []), f"{login}'s Userland Ready", timeout=60)
    return pod


@pytest.fixture
def student_pod(platform: Platform) -> dict[str, Any]:
    return ready_userland("alice")
