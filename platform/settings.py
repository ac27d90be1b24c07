"""Settings: read once from the environment into one frozen object per process.

`Settings.from_env(mapping)` reads `USERLAND_*` variables (tests pass a plain dict).
A missing or invalid setting raises `SettingsError` whose message is one line naming it;
the command line prints that line and exits with status 2.
"""

from __future__ import annotations

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
    cookie_domain: str | None = None
    cookie_secure: bool = True
    identity_secret: str = field(default="", repr=False)
    cluster_domain: str = "cluster.local"
    upstream_mode: Literal["dns", "local"] = "dns"
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
        ):
            if (text := get(key)) is not None:
                values[key.lower()] = text.strip()
        for key in ("GITHUB_URL", "GITHUB_API_URL", "PUBLIC_URL", "WEB_URL"):
            if (text := get(key)) is not None:
                values[key.lower()] = _url(f"USERLAND_{key}", text.strip())
        for key in ("NAMESPACES", "ALLOWED_ORGS", "ADMINS", "INSTRUCTORS"):
            if (text := get(key)) is not None:
                values[key.lower()] = _split(text)
        for key in ("ALLOWED_ORGS", "ADMINS", "INSTRUCTORS"):
            # GitHub logins, orgs and teams are case-insensitive: compare them lowercased.
            if key.lower() in values:
                values[key.lower()] = tuple(v.lower() for v in values[key.lower()])  # type: ignore[attr-defined]
        for ns in values.get("namespaces", ()):  # type: ignore[attr-defined]
            if not naming.is_valid_dns_label(ns):
                raise SettingsError(f"USERLAND_NAMESPACES has {ns!r}, which is not a namespace name")
        if (text := get("COOKIE_DOMAIN")) is not None:
            domain = text.strip().lstrip(".").lower()
            if "." not in domain:
                # Browsers drop a cookie whose Domain is a single label such as `localhost`:
                # every login would silently loop back to GitHub.
                raise SettingsError(
                    f"USERLAND_COOKIE_DOMAIN={text.strip()!r} is a single label, which browsers "
                    "refuse for cookies: use a domain such as example.edu, or leave it empty"
                )
            values["cookie_domain"] = domain
        if (text := get("COOKIE_SECURE")) is not None:
            values["cookie_secure"] = _bool("USERLAND_COOKIE_SECURE", text)
        if (text := get("DEV_LOGIN")) is not None:
            values["dev_login"] = _bool("USERLAND_DEV_LOGIN", text)
        if (text := get("CLUSTER_DOMAIN")) is not None:
            values["cluster_domain"] = text.strip().strip(".")
        if (text := get("UPSTREAM_MODE")) is not None:
            mode = text.strip().lower()
            if mode not in ("dns", "local"):
                raise SettingsError(f"USERLAND_UPSTREAM_MODE={text!r} must be dns or local")
            values["upstream_mode"] = mode
        if (text := get("SESSION_TTL_SECONDS")) is not None:
            values["session_ttl_seconds"] = _int("USERLAND_SESSION_TTL_SECONDS", text, minimum=60)
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
