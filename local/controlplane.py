"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

Used by the tests, the benchmarks and `make run`. The binaries come from
scripts/build-control-plane.sh (built once from Debian's source package, cached outside the
repo). There is no kubelet and no scheduler: pods stay Pending, and whoever needs a
Deployment to look available patches its status as a kubelet's results would.
CRDs are installed before the controller-manager starts, so its garbage collector knows
them from its first discovery.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from userland.local.ports import free_port
from userland.platform.model.settings import LocalTools

ADMIN_TOKEN = "userland-admin-token"
DEFAULT_CACHE = Path(LocalTools.from_env().k8s_cache)


def find_repo() -> Path:
    """The source checkout (scripts/, deploy/crds/): from the working directory or this file."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / "deploy" / "crds").is_dir() and (folder / "scripts").is_dir():
                return folder
    raise ControlPlaneError("run this from a Userland source checkout (deploy/crds not found)")


class ControlPlaneError(RuntimeError):
    pass


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGTERM when the thread that started it dies.

    PR_SET_PDEATHSIG follows the creating *thread*: start children from the main thread.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def binaries(cache: Path = DEFAULT_CACHE) -> Path:
    """The folder with kube-apiserver, building it first if needed (minutes, once)."""
    bin_dir = cache / "bin"
    if not (bin_dir / "kube-apiserver").exists():
        script = find_repo() / "scripts" / "build-control-plane.sh"
        subprocess.run(["bash", str(script), str(cache)], check=True)
    return bin_dir


@dataclass
class ControlPlane:
    """Start with `start()`, stop with `stop()`; or use `running(...)` as a context manager."""

    state_dir: Path
    bin_dir: Path = field(default_factory=binaries)
    # Extra API identities: token -> (user, groups), for RBAC tests of real roles.
    users: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    controllers: str = "garbagecollector,deployment,replicaset,namespace"
    port: int = 0
    etcd_port: int = 0  # etcd's client port (its /metrics too), once started
    # True: the children get their own session, so a terminal's Ctrl-C reaches only us and we
    # stop them in order (`userland local`); they still die with us (PR_SET_PDEATHSIG).
    own_session: bool = False
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def kubeconfig_for(self, token: str, namespace: str = "default") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [
                {"name": "local", "context": {"cluster": "local", "user": "user", "namespace": namespace}}
            ],
            "current-context": "local",
        }

    def write_kubeconfig(self, path: Path, token: str, namespace: str = "default") -> Path:
        path.write_text(yaml.safe_dump(self.kubeconfig_for(token, namespace)))
        return path

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.state_dir / f"{name}.log", "ab")  # noqa: SIM115 (owned by the child)
        self.processes[name] = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            start_new_session=self.own_session,
        )
        log.close()

    def start(self, crds: Iterable[Path] = ()) -> ControlPlane:
        if not shutil.which("etcd"):
            raise ControlPlaneError("etcd is not installed (apt-get install etcd-server)")
        certs = self.state_dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        if not (certs / "sa.key").exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(certs / "sa.key"), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(certs / "sa.key"), "-pubout", "-out", str(certs / "sa.pub")],
                check=True,
                capture_output=True,
            )
        lines = [f"{ADMIN_TOKEN},admin,admin-uid,system:masters"]
        for token, (user, groups) in self.users.items():
            lines.append(f'{token},{user},{user}-uid,"{",".join(groups)}"')
        (certs / "tokens.csv").write_text("\n".join(lines) + "\n")
        etcd_port, peer_port = free_port(), free_port()
        self.etcd_port = etcd_port
        self.port = self.port or free_port()
        self.write_kubeconfig(self.kubeconfig, ADMIN_TOKEN)
        self._spawn(
            "etcd",
            [
                "etcd",
                "--data-dir",
                str(self.state_dir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
            ],
        )
        self._spawn(
            "apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--advertise-address=127.0.0.1",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={certs}",
                "--insecure-port=0",
                f"--token-auth-file={certs / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={certs / 'sa.pub'}",
                f"--service-account-signing-key-file={certs / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--disable-admission-plugins=ServiceAccount",
                # Local loads (benchmarks) should meet the server, not its default throttles.
                "--max-requests-inflight=800",
                # ConfigMaps (unused by Userland) are watched straight from etcd, which is
                # compacted every 2 s: tests meet a real 410 Gone within seconds. Everything
                # else is served from the API server's watch cache, as in any cluster.
                "--watch-cache-sizes=configmaps#0",
                "--etcd-compaction-interval=2s",
                "--max-mutating-requests-inflight=400",
            ],
        )
        try:
            self._wait_ready()
            for crd in crds:
                self.apply_crd(crd)
        except BaseException:
            self.stop()
            raise
        self._spawn(
            "controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--port=0",
                "--leader-elect=false",
                f"--controllers={self.controllers}",
                f"--service-account-private-key-file={certs / 'sa.key'}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )
        return self

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": content_type},
        )
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            data = resp.read()
        return json.loads(data) if data.strip().startswith((b"{", b"[")) else data.decode()

    def _wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    log = (self.state_dir / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{log}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                if self.request("GET", "/readyz") == "ok":
                    return
            time.sleep(0.3)
        raise ControlPlaneError(f"kube-apiserver not ready after {timeout}s; see {self.state_dir}")

    def apply_crd(self, path: Path, timeout: float = 30) -> None:
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            self.request("POST", base, crd)
        except urllib.error.HTTPError as err:
            if err.code != 409:
                raise ControlPlaneError(f"CRD {path.name} refused: {err.read().decode()}") from None
            current = self.request("GET", f"{base}/{name}")
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.request("PUT", f"{base}/{name}", crd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.request("GET", f"{base}/{name}").get("status") or {}
            if any(
                c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or []
            ):
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"CRD {name} not established after {timeout}s")

    def stop(self) -> None:
        for name in ("controller-manager", "apiserver", "etcd"):
            proc = self.processes.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def running(state_dir: Path, crds: Iterable[Path] = (), **kwargs: Any) -> Iterator[ControlPlane]:
    plane = ControlPlane(state_dir=state_dir, **kwargs).start(crds)
    try:
        yield plane
    finally:
        plane.stop()


def crd_files() -> list[Path]:
    return sorted((find_repo() / "deploy" / "crds").glob("*.yaml"))
