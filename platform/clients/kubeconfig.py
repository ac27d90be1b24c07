"""How to reach the API server: in-cluster service account, or a kubeconfig file.

The common cases (in-cluster; a kubeconfig with a bearer token, token file or client
certificate) are read here directly, which keeps kubernetes-asyncio's generated client
(~35 MiB of model classes) out of memory. Anything else a kubeconfig can say (exec
plugins, auth providers, basic auth) is handed to kubernetes-asyncio's own loader.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_SECONDS = 60.0  # bound service account tokens rotate; re-read them


class KubeConfigError(RuntimeError):
    pass


@dataclass
class ClusterAccess:
    host: str
    ssl_context: ssl.SSLContext
    authorization: Callable[[], Awaitable[str | None]]


class _TokenFile:
    """A bearer token read from a file, re-read every minute."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._token = ""
        self._read_at = -TOKEN_REFRESH_SECONDS

    async def __call__(self) -> str | None:
        if time.monotonic() - self._read_at >= TOKEN_REFRESH_SECONDS:
            self._token = self.path.read_text().strip()
            self._read_at = time.monotonic()
        return f"Bearer {self._token}" if self._token else None


def _static(value: str | None) -> Callable[[], Awaitable[str | None]]:
    async def authorization() -> str | None:
        return value

    return authorization


def _context(ca_file: str | None = None, ca_data: str | None = None, verify: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def in_cluster() -> ClusterAccess | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    token = SERVICE_ACCOUNT / "token"
    if not host or not port or not token.exists():
        return None
    if ":" in host:
        host = f"[{host}]"
    return ClusterAccess(
        f"https://{host}:{port}", _context(str(SERVICE_ACCOUNT / "ca.crt")), _TokenFile(token)
    )


def _named(items: list[dict[str, Any]], name: str, what: str, file: Path) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return dict(item.get(what) or {})
    raise KubeConfigError(f"kubeconfig {file} has no {what} named {name!r}")


def _relative(base: Path, value: str) -> str:
    return str(base.parent / value) if not os.path.isabs(value) else value


def from_kubeconfig(path: str | None = None) -> ClusterAccess | None:
    """Access from a kubeconfig; None when it needs kubernetes-asyncio's full loader."""
    file = Path(path or os.environ.get("KUBECONFIG", "").split(":")[0] or Path.home() / ".kube/config")
    try:
        config = yaml.safe_load(file.read_text()) or {}
    except OSError as err:
        raise KubeConfigError(f"cannot read kubeconfig {file}: {err.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        where = getattr(err, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise KubeConfigError(f"kubeconfig {file} is not valid YAML{at}") from None
    if not isinstance(config, dict):
        raise KubeConfigError(f"kubeconfig {file} is not a kubeconfig (no clusters, contexts or users)")
    context = _named(config.get("contexts") or [], str(config.get("current-context") or ""), "context", file)
    cluster = _named(config.get("clusters") or [], str(context.get("cluster") or ""), "cluster", file)
    user = _named(config.get("users") or [], str(context.get("user") or ""), "user", file)
    if any(key in user for key in ("exec", "auth-provider", "username")):
        return None
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise KubeConfigError(f"kubeconfig {file}: cluster has no server")
    ca_file = (
        _relative(file, cluster["certificate-authority"]) if cluster.get("certificate-authority") else None
    )
    ca_data = (
        base64.b64decode(cluster["certificate-authority-data"]).decode()
        if cluster.get("certificate-authority-data")
        else None
    )
    ctx = _context(ca_file, ca_data, verify=not cluster.get("insecure-skip-tls-verify", False))
    _load_client_certificate(ctx, file, user)
    if user.get("token"):
        auth = _static(f"Bearer {user['token']}")
    elif user.get("tokenFile"):
        auth = _TokenFile(Path(_relative(file, user["tokenFile"])))
    else:
        auth = _static(None)
    return ClusterAccess(server, ctx, auth)


def _load_client_certificate(ctx: ssl.SSLContext, file: Path, user: dict[str, Any]) -> None:
    cert, key = user.get("client-certificate"), user.get("client-key")
    if cert and key:
        ctx.load_cert_chain(_relative(file, cert), _relative(file, key))
        return
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data and key_data:
        # ssl only loads certificates from files: a private temporary one, removed at once.
        with tempfile.TemporaryDirectory() as tmp:
            cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            for target, data in ((cert_path, cert_data), (key_path, key_data)):
                target.write_bytes(base64.b64decode(data))
                target.chmod(0o600)
            ctx.load_cert_chain(str(cert_path), str(key_path))


async def _full_loader(path: str | None) -> ClusterAccess:
    # Imported only here: the generated client is large, and most setups never need it.
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import load_kube_config

    config = Configuration()
    await load_kube_config(config_file=path, client_configuration=config)
    ctx = _context(config.ssl_ca_cert, verify=bool(config.verify_ssl))
    if config.cert_file:
        ctx.load_cert_chain(config.cert_file, keyfile=config.key_file)

    async def authorization() -> str | None:
        token = await config.get_api_key_with_prefix("BearerToken")
        if token:
            return str(token)
        return str(config.get_basic_auth_token()) if config.username else None

    return ClusterAccess(str(config.host).rstrip("/"), ctx, authorization)


async def cluster_access(kubeconfig: str | None = None) -> ClusterAccess:
    """In-cluster when running in a pod and no kubeconfig is named, else the kubeconfig.

    Whatever stops it (a missing or unreadable file, a certificate that cannot be loaded, a
    kubeconfig kubernetes-asyncio refuses) is a KubeConfigError whose text says what to fix."""
    try:
        if kubeconfig is None and (access := in_cluster()) is not None:
            return access
        return from_kubeconfig(kubeconfig) or await _full_loader(kubeconfig)
    except KubeConfigError:
        raise
    except OSError as err:
        where = f" {err.filename}" if err.filename else ""
        raise KubeConfigError(f"cannot read{where}: {err.strerror or err}") from None
    except Exception as err:  # kubernetes-asyncio's ConfigException, ssl.SSLError, bad base64 ...
        raise KubeConfigError(f"cannot use the kubeconfig: {err}") from None
