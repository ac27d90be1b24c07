"""Settings: read once from the environment into one frozen object per process.

Each setting is declared once, as a field of `Settings`: its name (`USERLAND_` + the field's
name in capitals), its type, its default and a help line (`setting(...)`). From that one
declaration come the parsing (`Settings.from_env`, one clear line naming the variable for any
bad value), the environment other programs pass (`environment(...)`: `make run` starts the
services with it) and the README's table of settings (`markdown_table()`, checked by a test).
Tests pass a plain dict to `from_env`. How each one's text is read: platform/model/setting_parsers.py.

Two smaller groups are declared the same way, for programs that are told rather than
configured: `JobSettings`, what the operator tells an assignment worker Pod, and `LocalTools`,
where `userland local` finds what `make control-plane` and `make local-apps` built. No module
reads a `USERLAND_` variable but through these declarations (tests/unit/test_settings.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from userland.platform.model.setting_parsers import (
    Parser,
    boolean,
    choice,
    domain,
    label_pairs,
    listen,
    log_level,
    logins,
    namespaces,
    networks,
    paths,
    per_second,
    seconds,
    text,
    url,
    url_prefixes,
    whole,
)
from userland.platform.model.setting_parsers import (
    SettingsError as SettingsError,  # raised by from_env: its callers catch it from here
)

PREFIX = "USERLAND_"


def setting(default: Any, parse: Parser, help: str, *, secret: bool = False) -> Any:
    """Declare a setting: its default, how its text is read, and one line for the README."""
    return field(default=default, repr=not secret, metadata={"parse": parse, "help": help, "secret": secret})


# Settings that no longer exist, refused with a line that says what to do (a value left in a
# configuration must not be silently ignored when ignoring it changes what is safe).
RETIRED = {
    "COOKIE_DOMAIN": "USERLAND_COOKIE_DOMAIN is no longer used: every origin gets its own host-only "
                     "cookie (see deploy/README.md); remove it from the configuration",
}


@dataclass(frozen=True)
class Settings:
    # --- who and where ---
    public_url: str = setting(
        "", url,
        "The platform's own address (`https://userland.example.edu`): sign-in, sign-out and the web "
        "UI; GitHub's callback is `<this>/auth/callback`.")
    namespaces: tuple[str, ...] = setting(
        (), namespaces,
        "Namespaces served (comma-separated); empty: all.")
    redis_url: str = setting(
        "redis://127.0.0.1:6379/0", text,
        "Redis: sessions, sign-in state, activity.")
    identity_secret: str = setting(
        "", text,
        "The key signing who is asking (`X-User`) for the web UI and the environments; at least 32 "
        "characters, the same for the gateway and the web UI.", secret=True)
    github_client_id: str = setting(
        "", text,
        "The GitHub OAuth app's client id.")
    github_client_secret: str = setting(
        "", text,
        "The GitHub OAuth app's client secret.", secret=True)
    github_url: str = setting(
        "https://github.com", url,
        "GitHub's address (GitHub Enterprise Server: `https://ghe.example.edu`).")
    github_api_url: str = setting(
        "https://api.github.com", url,
        "GitHub's API (GitHub Enterprise Server: `https://ghe.example.edu/api/v3`).")
    allowed_orgs: tuple[str, ...] = setting(
        (), logins,
        "Orgs (or `org/team`) whose members may sign in; empty: anyone with a GitHub account.")
    admins: tuple[str, ...] = setting(
        (), logins,
        "Logins or `org/team` entries who manage every course.")
    instructors: tuple[str, ...] = setting(
        (), logins,
        "Logins or `org/team` entries who teach every course (courses name their own staff on their "
        "namespace).")
    # Courses may name staff as `org/team`: ask GitHub for read:org and keep each user's teams.
    course_teams: bool = setting(
        False, boolean,
        "`true`: courses name staff as `org/team`, so sign-in asks GitHub for `read:org` and the web "
        "UI is told each user's teams (signed).")
    # --- cookies, origins, routes ---
    cookie_secure: bool = setting(
        True, boolean,
        "`true`: Secure cookies named `__Host-...`; `false` only for a local http setup.")
    # Template routes by path prefix serve environments on the platform's own origin (shared by
    # every student): only when an admin opts in.
    allow_path_routes: bool = setting(
        False, boolean,
        "`true` serves path-prefix Templates on the platform's own origin, shared by every student "
        "(see deploy/README.md).")
    session_ttl_seconds: int = setting(
        8 * 3600, whole(60),
        "How long a sign-in lasts, in seconds.")
    dev_login: bool = setting(
        False, boolean,
        "The development login (any name, no GitHub): only for `make run` on loopback; refused next "
        "to GitHub credentials or https.")
    # LTI 1.3 (docs/lti.md): where the LMS registrations and the tool's key Secret live.
    lti_namespace: str = setting(
        "", text,
        "The namespace of the LMS registrations (`LtiRegistration`) and the tool's key Secret "
        "`userland-lti-keys`; empty: LTI is off (no `/lti/` pages).")
    lti_sync_minutes: int = setting(
        15, whole(0),
        "How often the web UI syncs every LMS-linked course's roster, in minutes (0: only when "
        "staff press \"Sync roster now\").")
    lti_grade_seconds: float = setting(
        60.0, seconds,
        "How often the web UI passes grades waiting for an LMS gradebook back (the LMS was down), in "
        "seconds; a grade staff return or change, or a grader's new score, goes at once anyway.")
    # --- how the gateway reaches things ---
    # How the gateway reaches a student's Service: its ClusterIP from the watch (no DNS lookup
    # per connection, works without cluster DNS), its DNS name, or the local runner's address.
    upstream_mode: Literal["clusterip", "dns", "local"] = setting(
        "clusterip", choice("clusterip", "dns", "local"),
        "How the gateway reaches an environment: its Service's ClusterIP, its DNS name, or (make run)"
        " the local runner's address.")
    cluster_domain: str = setting(
        "cluster.local", domain,
        "The cluster's DNS domain (upstream mode `dns`).")
    web_url: str = setting(
        "http://userland-web.userland-system.svc:8080", url,
        "Where the gateway forwards the platform host's pages (the web UI's Service).")
    internal_listen: str = setting(
        "0.0.0.0:8081", listen,
        "Where the gateway serves `/healthz`, `/metrics` and `/auth/verify` (forward-auth), and the web "
        "UI `/healthz` and `/metrics`: a listener of their own, never the public one.")
    # --- the operator ---
    lease_namespace: str = setting(
        "default", text,
        "Where the operator keeps its leader-election Lease.")
    lease_name: str = setting(
        "userland-operator", text,
        "The name of that Lease.")
    gateway_pod_labels: tuple[tuple[str, str], ...] = setting(
        (("app.kubernetes.io/name", "userland-gateway"),), label_pairs,
        "Labels (`key=value,...`) of the gateway's Pods, the only Pods an environment admits.")
    gateway_namespace: str = setting(
        "", text,
        "The gateway's namespace, for the environments' NetworkPolicy; empty: the student's own "
        "namespace.")
    # Sleep and wake (docs/sleep.md): environments woken (or resumed) per second, and how many
    # at once, so "start all" for a class does not arrive as one burst.
    wake_rate: float = setting(
        5.0, per_second,
        "Environments woken or resumed per second (the wake line).")
    wake_burst: int = setting(
        20, whole(1),
        "Environments woken at once before the wake rate applies.")
    # Capacity (docs/capacity.md): images pulled ahead on the nodes, room held before lectures.
    nodes: Literal["cluster", "local"] = setting(
        "cluster", choice("cluster", "local"),
        "Where environments run: `cluster` (their images are pulled ahead on the nodes, room is held "
        "before lectures) or `local` (`make run`: the images are local, nothing to pull or hold).")
    pause_image: str = setting(
        "registry.k8s.io/pause:3.9", text,
        "The image of the Pods that only hold a place (image pullers' main container, placeholders).")
    placeholder_priority_class: str = setting(
        "userland-placeholder", text,
        "The PriorityClass of placeholder Pods (deploy/capacity.yaml: the lowest, never preempting).")
    image_pull_wait_seconds: int = setting(
        1800, whole(0),
        "After a Template's image changes, its running environments keep the old image until the new "
        "one is on every node, at most this many seconds (0: roll at once).")
    hold_room_seconds: int = setting(
        1800, whole(0),
        "Seconds before a scheduled lecture that placeholder Pods hold room for its environments "
        "(0: none).")
    # --- the gateway's limits (proxy/connections.py; SECURITY.md) ---
    max_header_bytes: int = setting(
        64 * 1024, whole(1024),
        "Bytes of one request head (request line and headers); more is a 431.")
    header_timeout_seconds: float = setting(
        15.0, seconds,
        "Seconds a request head may take from its first byte; then a 408.")
    keepalive_timeout_seconds: float = setting(
        30.0, seconds,
        "Seconds an idle keep-alive connection is kept.")
    # Behind a load balancer that does not keep client addresses every client shares its address.
    max_connections_per_client: int = setting(
        1000, whole(0),
        "Open connections per client address and gateway process (0: no limit; keep it generous "
        "behind a load balancer that hides client addresses).")
    max_websockets_per_user: int = setting(
        64, whole(0),
        "Open WebSockets per signed-in user and gateway process (0: no limit).")
    login_rate_per_minute: int = setting(
        120, whole(1),
        "Sign-ins one client address may start per minute; more get a 429.")
    # Behind an Ingress every request comes from the Ingress controller's address: without this
    # every user would share one limit (and anyone could use it up).
    trusted_proxies: tuple[str, ...] = setting(
        (), networks,
        "CIDRs of reverse proxies (your Ingress controller) whose `X-Forwarded-For` names the client;"
        " empty: the TCP peer is the client.")
    # Activity (docs/sleep.md): how often a student's use is written to Redis and to the API
    # server (the Userland's last-activity, once across all replicas); each also at most a
    # quarter of the Template's idleTimeout, so a short timeout is still honoured.
    activity_redis_seconds: float = setting(
        60.0, seconds,
        "At most how often the gateway notes a student's use in Redis.")
    activity_api_seconds: float = setting(
        300.0, seconds,
        "At most how often a student's use is written to their Userland (once across gateway "
        "replicas).")
    # --- the web UI ---
    # Each stream holds a connection through the gateway and a subscription.
    max_streams_per_user: int = setting(
        16, whole(0),
        "Open live class dashboards (server-sent event streams) per signed-in user and web UI process"
        " (0: no limit); one more gets a 429.")
    # --- assignments (docs/assignments.md) ---
    store_url: str = setting(
        "http://userland-store.userland-system.svc:8080", url,
        "The assignment store, for the operator, the web UI and the worker Pods.")
    store_secret: str = setting(
        "", text,
        "The key the operator signs worker Pods' jobs with and the web UI its requests, checked by the "
        "store; at least 32 characters, the same for all three.", secret=True)
    worker_image: str = setting(
        "", text,
        "The image of assignment worker Pods; empty: the operator's own (read from its Pod at start).")
    # In gateway_namespace, the platform's own namespace, when it is set.
    store_pod_labels: tuple[tuple[str, str], ...] = setting(
        (("app.kubernetes.io/name", "userland-store"),), label_pairs,
        "Labels (`key=value,...`) of the store's Pods, the only Pods worker Pods may connect to.")
    assignment_batch: int = setting(
        20, whole(1),
        "Students' environments per worker Pod (one Pod per batch, per Template and node).")
    grading_concurrency: int = setting(
        20, whole(1),
        "Grading Pods that run at once, across every course, shared fairly between the courses "
        "with copies waiting (docs/grading.md).")
    check_interval_seconds: float = setting(
        120.0, seconds,
        "How often a student may check their work (Check my work, docs/grading.md) in one course: "
        "one check per this many seconds.")
    collect_lead_seconds: float = setting(
        60.0, seconds,
        "How long before a deadline the collection Pods are made, so each copy is taken at it.")
    source_max_files: int = setting(
        10_000, whole(1),
        "Files of an assignment's source at most; a larger one is refused with a message.")
    source_max_mb: int = setting(
        500, whole(1),
        "Megabytes of an assignment's source at most.")
    folder_max_files: int = setting(
        20_000, whole(1),
        "Files of a student's folder collected at most; a larger one is not taken, with the reason.")
    folder_max_mb: int = setting(
        500, whole(1),
        "Megabytes of a student's folder collected at most.")
    # The store's one volume is shared by every course: quotas keep one course (or one assistant's
    # uploads) from filling it for the others (docs/assignments.md, "Quotas and retention").
    store_assignment_quota_mb: int = setting(
        5_000, whole(0),
        "Megabytes one assignment may keep in the store (sources, copies, feedback); a write past it "
        "is refused in words (0: no quota).")
    store_course_quota_mb: int = setting(
        10_000, whole(0),
        "Megabytes one course (namespace) may keep in the store, deleted assignments included until "
        "they are removed (0: no quota).")
    store_retention_hours: int = setting(
        24, whole(0),
        "Hours a deleted assignment's files (copies, feedback, sources) are kept in the store before "
        "they are removed (0: removed within a minute).")
    store_git_urls: tuple[str, ...] = setting(
        ("https://github.com/",), url_prefixes,
        "Address prefixes of the repositories the store may fetch (comma-separated, such as "
        "`https://github.com/your-org/`); any other source is refused with a reason naming this setting.")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, required: Iterable[str] = ()) -> Settings:
        """Build settings from `USERLAND_*` variables; `required` names fields that must be set.
        A variable set to blanks counts as unset."""
        env = os.environ if env is None else env
        for key, why in RETIRED.items():
            if env.get(PREFIX + key, "").strip():
                raise SettingsError(why)
        settings = cls(**declared_values(cls, env))
        settings.require(*required)
        return settings

    def require(self, *names: str) -> None:
        """Raise SettingsError naming the first of `names` (field names) that is unset."""
        known = {f.name for f in fields(self)}
        for name in names:
            if name not in known:
                raise ValueError(f"unknown setting {name}")
            if getattr(self, name) in ("", (), None):
                raise SettingsError(f"{env_name(name)} is required but not set")
        if "identity_secret" in names and len(self.identity_secret) < 32:
            raise SettingsError(f"{env_name('identity_secret')} must be at least 32 characters")
        if "store_secret" in names and len(self.store_secret) < 32:
            raise SettingsError(f"{env_name('store_secret')} must be at least 32 characters")


def declared_values(declared_in: type, env: Mapping[str, str]) -> dict[str, Any]:
    """The values `env` gives the settings declared in `declared_in`, parsed; a variable set to
    blanks counts as unset."""
    values: dict[str, Any] = {}
    for declared in fields(declared_in):
        variable = env_name(declared.name)
        raw = env.get(variable)
        if raw is not None and raw.strip():
            values[declared.name] = declared.metadata["parse"](variable, raw)
    return values


@dataclass(frozen=True)
class JobSettings:
    """What an assignment worker Pod is told by the operator that makes it (its Pod's env,
    operator/rules/assignment/pods.py); its store is `Settings.store_url`. Not for an admin to set."""

    job: str = setting(
        "", text,
        "The worker Pod's job (platform/model/coursework.py `Job`, JSON): its scope and its students.")
    job_token: str = setting(
        "", text,
        "The job's token, signed with the store's secret: the store checks it.", secret=True)
    log_level: str = setting(
        "INFO", log_level,
        "How much the worker logs: DEBUG, INFO, WARNING, ERROR or CRITICAL.")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobSettings:
        found = cls(**declared_values(cls, env))
        for name in ("job", "job_token"):
            if not getattr(found, name):
                raise SettingsError(f"{env_name(name)} is not set (the operator sets it)")
        return found


@dataclass(frozen=True)
class LocalTools:
    """Where `userland local` (and its tests) find what the Makefile built; not for a cluster."""

    k8s_cache: str = setting(
        str(Path.home() / ".cache/userland/k8s-1.20.2-p1"), text,
        "The control plane's binaries, as `make control-plane` builds them (its `bin/`).")
    apps_bin: tuple[str, ...] = setting(
        (), paths,
        "Folders (`:`-separated) of the apps `make local-apps` installed; empty: asked of "
        "scripts/install-local-apps.sh.")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocalTools:
        return cls(**declared_values(cls, os.environ if env is None else env))


def declarations() -> tuple[Field[Any], ...]:
    """The configuration's settings (the README's table); JobSettings and LocalTools aside."""
    return fields(Settings)


def env_name(name: str) -> str:
    """The environment variable of the setting `name` (a field of Settings)."""
    return PREFIX + name.upper()


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join("=".join(v) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


def environment(**values: Any) -> dict[str, str]:
    """The variables that give a service these settings (`redis_url=...` -> `USERLAND_REDIS_URL`),
    written so `from_env` reads them back as given. An unknown name is a programming error."""
    known = {f.name for f in declarations()}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown settings: {', '.join(unknown)}")
    return {env_name(name): _as_text(value) for name, value in values.items()}


def _default_text(declared: Field[Any]) -> str:
    value = declared.default if declared.default is not MISSING else None
    if value in ("", (), None):
        return "(none)"
    return f"`{_as_text(value)}`"


def markdown_table() -> str:
    """The README's table of settings, made from the declarations."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for declared in declarations():
        help_text = declared.metadata["help"]
        rows.append(f"| `{env_name(declared.name)}` | {_default_text(declared)} | {help_text} |")
    return "\n".join(rows) + "\n"
