"""Settings: read once from the environment into one frozen object per process.

`Settings.from_env(mapping)` reads `USERLAND_*` variables (tests pass a plain dict).
A missing or invalid setting raises `SettingsError` whose message is one line naming it;
the command line prints that line and exits with status 2.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Literal
from urllib.parse import urlsplit

from userland.platform import naming


class SettingsError(ValueError):
    """A setting that is missing or invalid; str() is one line naming it."""


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.replace("\n", ",").split(",") if part.strip())


def _bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={text!r} is not a boolean: use true or false")


def _int(name: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a whole number") from None
    if value < minimum:
        raise SettingsError(f"{name}={value} must be at least {minimum}")
    return value


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a number of seconds") from None
    if not 0.1 <= value <= 3600:
        raise SettingsError(f"{name}={value} must be between 0.1 and 3600 seconds")
    return value


def is_loopback_host(host: str) -> bool:
    """Whether a listen address or client address is loopback only (`localhost` counts)."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def client_address(peer: str, forwarded_for: Iterable[str], trusted: Iterable[str]) -> str:
    """The client's address: the TCP peer, unless the peer is a trusted proxy (`trusted`, CIDRs):
    then the rightmost address in `X-Forwarded-For` that is not itself a trusted proxy (what
    the proxy nearest to us saw; anything left of it the client may have written itself)."""
    networks = [ipaddress.ip_network(t, strict=False) for t in trusted]

    def is_trusted(addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        return addr is not None and any(addr in net for net in networks)

    if not networks or not is_trusted(_address(peer)):
        return peer
    hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        addr = _address(hop)
        if addr is None:
            return peer  # a malformed entry: stop trusting the list there
        if not is_trusted(addr):
            return str(addr)
    return peer


def dev_login_refusal(settings: Settings, listen_host: str) -> str | None:
    """Why the development login must not run with these settings (one line), or None.

    It signs anyone in as any name, admins included: only a machine's own local setup may
    have it, never anything reachable from elsewhere or configured for production."""
    if not settings.dev_login:
        return None
    if settings.github_client_id or settings.github_client_secret:
        return "USERLAND_DEV_LOGIN=true cannot be used with GitHub credentials (USERLAND_GITHUB_CLIENT_*)"
    if not is_loopback_host(listen_host):
        return f"USERLAND_DEV_LOGIN=true needs a loopback --listen address, not {listen_host!r}"
    if urlsplit(settings.public_url).scheme == "https":
        return "USERLAND_DEV_LOGIN=true cannot be used with an https USERLAND_PUBLIC_URL"
    if settings.cookie_secure:
        return "USERLAND_DEV_LOGIN=true needs USERLAND_COOKIE_SECURE=false (a local HTTP setup)"
    return None


def split_listen(text: str) -> tuple[str, int]:
    """`host:port` (`[::]:8081` for IPv6) as (host, port); ValueError when it is not one."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: use host:port, such as 0.0.0.0:8081")
    return host.strip("[]") or "0.0.0.0", int(port)


def _url(name: str, text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"{name}={text!r} is not an http(s) URL")
    return text.rstrip("/")


@dataclass(frozen=True)
class Settings:
    # Namespaces watched; empty means every namespace.
    namespaces: tuple[str, ...] = ()
    redis_url: str = "redis://127.0.0.1:6379/0"
    github_client_id: str = ""
    github_client_secret: str = field(default="", repr=False)
    github_url: str = "https://github.com"
    github_api_url: str = "https://api.github.com"
    allowed_orgs: tuple[str, ...] = ()
    admins: tuple[str, ...] = ()
    instructors: tuple[str, ...] = ()
    cookie_secure: bool = True
    # Template routes by path prefix serve environments on the platform's own origin (shared by
    # every student): only when an admin opts in (USERLAND_ALLOW_PATH_ROUTES=true).
    allow_path_routes: bool = False
    identity_secret: str = field(default="", repr=False)
    cluster_domain: str = "cluster.local"
    # How the gateway reaches a student's Service: its ClusterIP from the watch (no DNS lookup
    # per connection, works without cluster DNS), its DNS name, or the local runner's address.
    upstream_mode: Literal["clusterip", "dns", "local"] = "clusterip"
    public_url: str = ""
    # The web UI's Service: the gateway forwards the public host's non-/auth/ paths there.
    web_url: str = "http://userland-web.userland-system.svc:8080"
    # Where the operator keeps its leader-election Lease (its own namespace in a cluster).
    lease_namespace: str = "default"
    lease_name: str = "userland-operator"
    # Labels of the gateway's pods, the only pods a student's environment admits.
    gateway_pod_labels: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "userland-gateway"),)
    # Namespace the gateway runs in; empty means the student's own namespace.
    gateway_namespace: str = ""
    session_ttl_seconds: int = 8 * 3600
    dev_login: bool = False
    # Courses may name staff as `org/team`: ask GitHub for read:org and keep each user's teams.
    course_teams: bool = False
    # Gateway limits against resource exhaustion (proxy/connections.py; SECURITY.md).
    # Bytes of one request head (request line + headers); more is a 431.
    max_header_bytes: int = 64 * 1024
    # Seconds a request head may take from its first byte to its end; then a 408.
    header_timeout_seconds: float = 15.0
    # Seconds an idle keep-alive connection (or a new one that sends nothing) is kept.
    keepalive_timeout_seconds: float = 30.0
    # Open connections per client address and gateway process (0: no limit). Behind a load
    # balancer that does not keep client addresses every client shares its address: keep it generous.
    max_connections_per_client: int = 1000
    # Open WebSockets per signed-in user and gateway process (0: no limit).
    max_websockets_per_user: int = 64
    # Where the gateway serves /healthz, /metrics and /auth/verify (forward-auth): a listener of
    # their own, never the public one, so no request from outside can choose them by its Host.
    internal_listen: str = "0.0.0.0:8081"
    # Open live-dashboard streams (server-sent events) per signed-in user and web UI process
    # (0: no limit). Each holds a connection through the gateway and a subscription.
    max_streams_per_user: int = 16
    # OAuth logins (and development-login forms) started per client address per minute.
    login_rate_per_minute: int = 120
    # Reverse proxies (CIDRs) whose X-Forwarded-For names the client, for the per-client login
    # limit. Behind an Ingress every request comes from the Ingress controller's address, so
    # without this every user would share one limit (and anyone could use it up).
    trusted_proxies: tuple[str, ...] = ()
    # Sleep and wake (docs/sleep.md). Operator: environments woken from sleep (or resumed) per
    # second, and how many at once, so "start all" for a class does not arrive as one burst.
    wake_rate: float = 5.0
    wake_burst: int = 20
    # Gateway: how often a student's activity is written to Redis (at most), and to the API
    # server (the Userland's userland.dev/last-activity, once across all replicas). Each is
    # also at most a quarter of the Template's idleTimeout, so a short timeout is still honoured.
    activity_redis_seconds: float = 60.0
    activity_api_seconds: float = 300.0
    # Assignments (docs/assignments.md). The store the operator, the web UI and worker Pods use,
    # and the secret the operator signs jobs (and the web UI its requests) with.
    store_url: str = "http://userland-store.userland-system.svc:8080"
    store_secret: str = field(default="", repr=False)
    # The image of worker Pods: empty means the operator's own (read from its Pod at start).
    worker_image: str = ""
    # Labels of the store's Pods, the only Pods worker Pods may connect to (in gateway_namespace,
    # the platform's own namespace, when it is set).
    store_pod_labels: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "userland-store"),)
    # Students' environments per worker Pod (one Pod per batch, per Template and node).
    assignment_batch: int = 20
    # Collection Pods are made this long before a deadline, so the copy is taken at it.
    collect_lead_seconds: float = 60.0
    # A source past these is refused with a message; so is a student's folder at collection.
    source_max_files: int = 10_000
    source_max_mb: int = 500
    folder_max_files: int = 20_000
    folder_max_mb: int = 500

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, required: Iterable[str] = ()) -> Settings:
        """Build settings from `USERLAND_*` variables; `required` names fields that must be set."""
        env = os.environ if env is None else env

        def get(key: str) -> str | None:
            value = env.get(f"USERLAND_{key}")
            return value if value is None or value.strip() else None

        values: dict[str, object] = {}
        for key in (
            "REDIS_URL",
            "GITHUB_CLIENT_ID",
            "GITHUB_CLIENT_SECRET",
            "IDENTITY_SECRET",
            "LEASE_NAMESPACE",
            "LEASE_NAME",
            "GATEWAY_NAMESPACE",
            "STORE_SECRET",
            "WORKER_IMAGE",
        ):
            if (text := get(key)) is not None:
                values[key.lower()] = text.strip()
        for key in ("GITHUB_URL", "GITHUB_API_URL", "PUBLIC_URL", "WEB_URL", "STORE_URL"):
            if (text := get(key)) is not None:
                values[key.lower()] = _url(f"USERLAND_{key}", text.strip())
        for key in ("NAMESPACES", "ALLOWED_ORGS", "ADMINS", "INSTRUCTORS"):
            if (text := get(key)) is not None:
                values[key.lower()] = _split(text)
        for key in ("ALLOWED_ORGS", "ADMINS", "INSTRUCTORS"):
            # GitHub logins, orgs and teams are case-insensitive: compare them lowercased.
            if key.lower() in values:
                values[key.lower()] = tuple(v.lower() for v in values[key.lower()])  # type: ignore[attr-defined]
        if (text := get("TRUSTED_PROXIES")) is not None:
            proxies = _split(text)
            for cidr in proxies:
                try:
                    ipaddress.ip_network(cidr, strict=False)
                except ValueError:
                    raise SettingsError(f"USERLAND_TRUSTED_PROXIES has {cidr!r}, which is not an address "
                                        "or network (such as 10.0.0.0/8)") from None
            values["trusted_proxies"] = proxies
        for ns in values.get("namespaces", ()):  # type: ignore[attr-defined]
            if not naming.is_valid_dns_label(ns):
                raise SettingsError(f"USERLAND_NAMESPACES has {ns!r}, which is not a namespace name")
        if get("COOKIE_DOMAIN") is not None:
            # Gone on purpose: a cookie shared between origins is what per-student origins remove.
            raise SettingsError(
                "USERLAND_COOKIE_DOMAIN is no longer used: every origin gets its own host-only "
                "cookie (see deploy/README.md); remove it from the configuration")
        if (text := get("COOKIE_SECURE")) is not None:
            values["cookie_secure"] = _bool("USERLAND_COOKIE_SECURE", text)
        if (text := get("ALLOW_PATH_ROUTES")) is not None:
            values["allow_path_routes"] = _bool("USERLAND_ALLOW_PATH_ROUTES", text)
        if (text := get("DEV_LOGIN")) is not None:
            values["dev_login"] = _bool("USERLAND_DEV_LOGIN", text)
        if (text := get("COURSE_TEAMS")) is not None:
            values["course_teams"] = _bool("USERLAND_COURSE_TEAMS", text)
        if (text := get("CLUSTER_DOMAIN")) is not None:
            values["cluster_domain"] = text.strip().strip(".")
        if (text := get("UPSTREAM_MODE")) is not None:
            mode = text.strip().lower()
            if mode not in ("clusterip", "dns", "local"):
                raise SettingsError(f"USERLAND_UPSTREAM_MODE={text!r} must be clusterip, dns or local")
            values["upstream_mode"] = mode
        if (text := get("SESSION_TTL_SECONDS")) is not None:
            values["session_ttl_seconds"] = _int("USERLAND_SESSION_TTL_SECONDS", text, minimum=60)
        for key, minimum in (("MAX_HEADER_BYTES", 1024), ("MAX_CONNECTIONS_PER_CLIENT", 0),
                             ("MAX_WEBSOCKETS_PER_USER", 0), ("LOGIN_RATE_PER_MINUTE", 1),
                             ("MAX_STREAMS_PER_USER", 0), ("ASSIGNMENT_BATCH", 1),
                             ("SOURCE_MAX_FILES", 1), ("SOURCE_MAX_MB", 1), ("FOLDER_MAX_FILES", 1),
                             ("FOLDER_MAX_MB", 1)):
            if (text := get(key)) is not None:
                values[key.lower()] = _int(f"USERLAND_{key}", text, minimum=minimum)
        if (text := get("WAKE_RATE")) is not None:
            try:
                rate = float(text)
            except ValueError:
                raise SettingsError(
                    f"USERLAND_WAKE_RATE={text!r} is not a number (environments per second)") from None
            if not 0.1 <= rate <= 1000:
                raise SettingsError(f"USERLAND_WAKE_RATE={rate} must be between 0.1 and 1000 per second")
            values["wake_rate"] = rate
        if (text := get("WAKE_BURST")) is not None:
            values["wake_burst"] = _int("USERLAND_WAKE_BURST", text, minimum=1)
        for key in ("ACTIVITY_REDIS_SECONDS", "ACTIVITY_API_SECONDS"):
            if (text := get(key)) is not None:
                values[key.lower()] = _seconds(f"USERLAND_{key}", text)
        for key in ("HEADER_TIMEOUT_SECONDS", "KEEPALIVE_TIMEOUT_SECONDS", "COLLECT_LEAD_SECONDS"):
            if (text := get(key)) is not None:
                values[key.lower()] = _seconds(f"USERLAND_{key}", text)
        if (text := get("INTERNAL_LISTEN")) is not None:
            try:
                split_listen(text)
            except ValueError as err:
                raise SettingsError(f"USERLAND_INTERNAL_LISTEN={err}") from None
            values["internal_listen"] = text.strip()
        if (text := get("GATEWAY_POD_LABELS")) is not None:
            pairs = []
            for item in _split(text):
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise SettingsError(
                        f"USERLAND_GATEWAY_POD_LABELS has {item!r}: use key=value[,key=value]"
                    )
                pairs.append((key.strip(), value.strip()))
            values["gateway_pod_labels"] = tuple(pairs)
        settings = cls(**values)  # type: ignore[arg-type]
        settings.require(*required)
        return settings

    def require(self, *names: str) -> None:
        """Raise SettingsError naming the first of `names` (field names) that is unset."""
        known = {f.name for f in fields(self)}
        for name in names:
            if name not in known:
                raise ValueError(f"unknown setting {name}")
            if getattr(self, name) in ("", (), None):
                raise SettingsError(f"USERLAND_{name.upper()} is required but not set")
        if "identity_secret" in names and len(self.identity_secret) < 32:
            raise SettingsError("USERLAND_IDENTITY_SECRET must be at least 32 characters")
        if "store_secret" in names and len(self.store_secret) < 32:
            raise SettingsError("USERLAND_STORE_SECRET must be at least 32 characters")
