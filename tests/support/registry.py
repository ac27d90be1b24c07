"""A container registry of our own for the real node (tests/cluster, bench/capacity_bench.py):
Debian's `docker-registry` (the CNCF distribution) on loopback, started inside the node's
network namespace (where the suite runs), so the node's containerd pulls from it for real.

containerd's CRI pulls from a loopback registry over plain HTTP (it treats localhost and
127.0.0.1 so), hence no TLS and no registry settings on the node. Images are pushed with the
registry's HTTP API (stdlib only, no buildah storage to leave behind): an image the node already
has (a docker-archive tar of scripts/node-images.sh) plus one fresh layer of random bytes, so
the node has every layer but that one, and a pull really fetches it over the wire (what a first
pull of a Template's new image costs, minus the layers it shares).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import secrets
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin

from tests.support.ports import free_port

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Pushed:
    reference: str  # what a Pod names: 127.0.0.1:PORT/REPOSITORY:TAG
    repository: str
    fresh_layer: str  # the digest of the layer no node has
    fresh_bytes: int


def _digest_of(stream: IO[bytes]) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    while chunk := stream.read(CHUNK):
        sha.update(chunk)
        size += len(chunk)
    return f"sha256:{sha.hexdigest()}", size


def fresh_layer(size: int, name: str) -> bytes:
    """An uncompressed layer holding one file of `size` random bytes at /`name`."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(secrets.token_bytes(size)))
    return out.getvalue()


class Registry:
    """`docker-registry serve` on 127.0.0.1:PORT with its storage and log under `workdir`."""

    def __init__(self, workdir: Path, binary: str = "docker-registry") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.log_path = workdir / "registry.log"
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self._have: set[tuple[str, str]] = set()

    def start(self, timeout: float = 30) -> None:
        config = {"version": 0.1, "log": {"level": "info", "accesslog": {"disabled": False}},
                  "storage": {"filesystem": {"rootdirectory": str(self.workdir / "storage")},
                              "delete": {"enabled": True}},
                  "http": {"addr": self.address}}
        (self.workdir / "config.yml").write_text(json.dumps(config))  # YAML is a superset of JSON
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen([self.binary, "serve", str(self.workdir / "config.yml")],
                                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"docker-registry exited: {log}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/v2/", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"docker-registry did not answer on {self.address} in {timeout}s")

    def close(self) -> None:
        """Stops the process we started (by its handle); its files go with `workdir`."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    # ----- the HTTP API (distribution's, as `docker push` speaks it) -----

    def _request(self, method: str, url: str, body: bytes | IO[bytes] | None = None,
                 headers: dict[str, str] | None = None) -> Any:
        request = urllib.request.Request(urljoin(self.url, url), data=body, method=method,
                                         headers=headers or {})
        return urllib.request.urlopen(request, timeout=300)

    def _has_blob(self, repository: str, digest: str) -> bool:
        if (repository, digest) in self._have:
            return True
        try:
            with self._request("HEAD", f"/v2/{repository}/blobs/{digest}"):
                pass
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return False
            raise
        self._have.add((repository, digest))
        return True

    def _upload(self, repository: str, digest: str, size: int, body: bytes | IO[bytes]) -> None:
        """A monolithic upload: POST for a session, PUT the bytes with their digest."""
        if self._has_blob(repository, digest):
            return
        with self._request("POST", f"/v2/{repository}/blobs/uploads/", b"") as started:
            location = started.headers["Location"]
        separator = "&" if "?" in location else "?"
        with self._request("PUT", f"{location}{separator}digest={digest}", body,
                           {"Content-Type": "application/octet-stream", "Content-Length": str(size)}):
            pass
        self._have.add((repository, digest))

    def push_variant(self, archive: Path, repository: str, tag: str, fresh_bytes: int = 8 << 20) -> Pushed:
        """The image in `archive` (a docker-archive tar) with one fresh layer on top, pushed as
        REPOSITORY:TAG. The archive's layers are uploaded once per registry and repository."""
        layers: list[dict[str, Any]] = []
        with tarfile.open(archive) as tar:
            (entry,) = json.load(_member(tar, "manifest.json"))
            config = json.load(_member(tar, entry["Config"]))
            for path in entry["Layers"]:
                digest, size = _digest_of(_member(tar, path))
                self._upload(repository, digest, size, _member(tar, path))
                layers.append({"mediaType": _layer_type(_member(tar, path)), "digest": digest, "size": size})
        blob = fresh_layer(fresh_bytes, f"capacity-{tag}")
        fresh_digest = f"sha256:{hashlib.sha256(blob).hexdigest()}"
        self._upload(repository, fresh_digest, len(blob), blob)
        layers.append({"mediaType": OCI_LAYER, "digest": fresh_digest, "size": len(blob)})
        config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(fresh_digest)
        config.setdefault("history", []).append({"created_by": f"tests/support/registry.py: {tag}"})
        config_bytes = json.dumps(config).encode()
        config_digest = f"sha256:{hashlib.sha256(config_bytes).hexdigest()}"
        self._upload(repository, config_digest, len(config_bytes), config_bytes)
        manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                               "config": {"mediaType": OCI_CONFIG, "digest": config_digest,
                                          "size": len(config_bytes)},
                               "layers": layers}).encode()
        with self._request("PUT", f"/v2/{repository}/manifests/{tag}", manifest,
                           {"Content-Type": OCI_MANIFEST}):
            pass
        return Pushed(f"{self.address}/{repository}:{tag}", repository, fresh_digest, len(blob))

    def served(self, repository: str, digest: str) -> int:
        """How many times the registry sent this blob (a GET answered 200, by its access log)."""
        needle = f'"GET /v2/{repository}/blobs/{digest} HTTP/1.1" 200'
        return sum(1 for line in self.log_path.read_text(errors="replace").splitlines() if needle in line)


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    stream = tar.extractfile(name)
    if stream is None:
        raise ValueError(f"{name} is not a file in the archive")
    return stream


def _layer_type(stream: IO[bytes]) -> str:
    return f"{OCI_LAYER}+gzip" if stream.read(2) == b"\x1f\x8b" else OCI_LAYER


@contextlib.contextmanager
def running(workdir: Path) -> Iterator[Registry]:
    registry = Registry(workdir)
    try:
        registry.start()
        yield registry
    finally:
        registry.close()


def archive_of(image: str, images_env: Path) -> Path:
    """The docker-archive tar scripts/node-images.sh wrote for `image` (localhost/NAME:TAG), found
    in the folder its output names (`images=`)."""
    folder = next(Path(line.split("=", 1)[1]) for line in images_env.read_text().splitlines()
                  if line.startswith("images="))
    name, tag = image.rsplit("/", 1)[-1].rsplit(":", 1)
    for candidate in (folder / f"{name}-{tag}.tar", folder / f"{name}.tar"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no archive of {image} in {folder}")
