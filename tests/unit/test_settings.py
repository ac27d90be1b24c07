"""Settings: read from a mapping, frozen, one clear line for any missing or invalid value."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import yaml

from userland.platform.model import settings as settings_module
from userland.platform.model.addresses import client_address, split_listen
from userland.platform.model.settings import JobSettings, LocalTools, Settings, SettingsError


def test_defaults_and_parsing() -> None:
    settings = Settings.from_env(
        {
            "USERLAND_NAMESPACES": "classroom, lab2",
            "USERLAND_ADMINS": "Alice,\nmyorg/Staff",
            "USERLAND_COOKIE_SECURE": "false",
            "USERLAND_UPSTREAM_MODE": "LOCAL",
            "USERLAND_PUBLIC_URL": "https://userland.example.edu/",
            "USERLAND_ALLOW_PATH_ROUTES": "true",
            "USERLAND_GATEWAY_POD_LABELS": "app=gw, tier=edge",
        }
    )
    assert settings.namespaces == ("classroom", "lab2")
    assert settings.admins == ("alice", "myorg/staff")
    assert settings.cookie_secure is False
    assert settings.upstream_mode == "local"
    assert settings.public_url == "https://userland.example.edu"
    assert settings.allow_path_routes is True
    assert Settings.from_env({}).allow_path_routes is False  # per-student origins by default
    assert settings.gateway_pod_labels == (("app", "gw"), ("tier", "edge"))
    assert Settings.from_env({}).cookie_secure is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.namespaces = ()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"USERLAND_UPSTREAM_MODE": "ftp"}, "USERLAND_UPSTREAM_MODE"),
        ({"USERLAND_COOKIE_SECURE": "perhaps"}, "USERLAND_COOKIE_SECURE"),
        ({"USERLAND_PUBLIC_URL": "userland.example.edu"}, "USERLAND_PUBLIC_URL"),
        ({"USERLAND_NAMESPACES": "Class_Room"}, "USERLAND_NAMESPACES"),
        ({"USERLAND_SESSION_TTL_SECONDS": "soon"}, "USERLAND_SESSION_TTL_SECONDS"),
        ({"USERLAND_GATEWAY_POD_LABELS": "novalue"}, "USERLAND_GATEWAY_POD_LABELS"),
        ({"USERLAND_ALLOW_PATH_ROUTES": "maybe"}, "USERLAND_ALLOW_PATH_ROUTES"),
        # Removed: a cookie shared by every student origin is refused, never silently ignored.
        ({"USERLAND_COOKIE_DOMAIN": "example.edu"}, "USERLAND_COOKIE_DOMAIN"),
    ],
)
def test_invalid_values_name_the_variable_in_one_line(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_env(env)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_required_settings() -> None:
    with pytest.raises(SettingsError, match="USERLAND_IDENTITY_SECRET is required"):
        Settings.from_env({}, required=["identity_secret"])
    with pytest.raises(SettingsError, match="at least 32"):
        Settings.from_env({"USERLAND_IDENTITY_SECRET": "short"}, required=["identity_secret"])
    Settings.from_env({"USERLAND_IDENTITY_SECRET": "x" * 32}, required=["identity_secret"])


def test_secrets_stay_out_of_repr() -> None:
    settings = Settings.from_env(
        {"USERLAND_IDENTITY_SECRET": "s3cr3t" * 6, "USERLAND_GITHUB_CLIENT_SECRET": "gh-secret-value"}
    )
    assert "s3cr3t" not in repr(settings) and "gh-secret-value" not in repr(settings)


def test_gateway_limits_have_defaults_and_parse() -> None:
    defaults = Settings.from_env({})
    assert (defaults.max_header_bytes, defaults.header_timeout_seconds, defaults.keepalive_timeout_seconds,
            defaults.max_connections_per_client, defaults.max_websockets_per_user,
            defaults.login_rate_per_minute) == (65536, 15.0, 30.0, 1000, 64, 120)
    settings = Settings.from_env({
        "USERLAND_MAX_HEADER_BYTES": "32768", "USERLAND_HEADER_TIMEOUT_SECONDS": "2.5",
        "USERLAND_KEEPALIVE_TIMEOUT_SECONDS": "10", "USERLAND_MAX_CONNECTIONS_PER_CLIENT": "0",
        "USERLAND_MAX_WEBSOCKETS_PER_USER": "8", "USERLAND_LOGIN_RATE_PER_MINUTE": "30"})
    assert (settings.max_header_bytes, settings.header_timeout_seconds, settings.keepalive_timeout_seconds,
            settings.max_connections_per_client, settings.max_websockets_per_user,
            settings.login_rate_per_minute) == (32768, 2.5, 10.0, 0, 8, 30)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("USERLAND_MAX_HEADER_BYTES", "100", "at least 1024"),
    ("USERLAND_MAX_HEADER_BYTES", "lots", "not a whole number"),
    ("USERLAND_HEADER_TIMEOUT_SECONDS", "0", "between 0.1 and 3600"),
    ("USERLAND_KEEPALIVE_TIMEOUT_SECONDS", "soon", "not a number of seconds"),
    ("USERLAND_LOGIN_RATE_PER_MINUTE", "0", "at least 1"),
    ("USERLAND_MAX_WEBSOCKETS_PER_USER", "-1", "at least 0"),
])
def test_gateway_limits_refuse_bad_values_with_one_line(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: value})
    assert name in str(caught.value) and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_internal_listener_has_a_default_and_parses() -> None:
    assert Settings.from_env({}).internal_listen == "0.0.0.0:8081"
    given = Settings.from_env({"USERLAND_INTERNAL_LISTEN": "127.0.0.1:9100"})
    assert given.internal_listen == "127.0.0.1:9100"
    assert split_listen("[::]:8081") == ("::", 8081) and split_listen(":8081") == ("0.0.0.0", 8081)
    for bad in ("8081", "host:port", "0.0.0.0:70000", "0.0.0.0:"):
        with pytest.raises(SettingsError) as caught:
            Settings.from_env({"USERLAND_INTERNAL_LISTEN": bad})
        assert "USERLAND_INTERNAL_LISTEN" in str(caught.value) and "host:port" in str(caught.value)


@pytest.mark.parametrize(("peer", "forwarded", "trusted", "client"), [
    ("10.1.2.3", ["198.51.100.7"], (), "10.1.2.3"),  # no trusted proxies: the header is ignored
    ("203.0.113.1", ["198.51.100.7"], ("10.0.0.0/8",), "203.0.113.1"),  # the peer is no proxy
    ("10.1.2.3", ["198.51.100.7"], ("10.0.0.0/8",), "198.51.100.7"),
    ("10.1.2.3", ["1.1.1.1, 198.51.100.7"], ("10.0.0.0/8",), "198.51.100.7"),  # left: the client's own
    ("10.1.2.3", ["198.51.100.7, 10.9.9.9"], ("10.0.0.0/8",), "198.51.100.7"),  # two proxies
    ("10.1.2.3", ["1.1.1.1", "198.51.100.7"], ("10.0.0.0/8",), "198.51.100.7"),  # repeated header
    ("10.1.2.3", ["1.1.1.1, not-an-ip"], ("10.0.0.0/8",), "10.1.2.3"),  # malformed: stop there
    ("10.1.2.3", [], ("10.0.0.0/8",), "10.1.2.3"),
    ("fd00::5", ["2001:db8::1"], ("fd00::/8",), "2001:db8::1"),
])
def test_client_address_believes_forwarded_for_only_from_trusted_proxies(
        peer: str, forwarded: list[str], trusted: tuple[str, ...], client: str) -> None:
    assert client_address(peer, forwarded, trusted) == client


def test_trusted_proxies_are_networks() -> None:
    settings = Settings.from_env({"USERLAND_TRUSTED_PROXIES": "10.0.0.0/8, fd00::/8,192.168.1.1"})
    assert settings.trusted_proxies == ("10.0.0.0/8", "fd00::/8", "192.168.1.1")
    with pytest.raises(SettingsError, match="USERLAND_TRUSTED_PROXIES has 'ingress'"):
        Settings.from_env({"USERLAND_TRUSTED_PROXIES": "ingress"})


# ----- one declaration per setting (issue 18): parsing, the environment, the README -----

README = Path(__file__).resolve().parents[2] / "README.md"
# A value other than the default for every setting, as a program would pass it.
NON_DEFAULTS: dict[str, object] = {
    "public_url": "https://userland.example.edu", "namespaces": ("cs101", "db202"),
    "redis_url": "redis://redis:6379/1", "identity_secret": "k" * 40, "github_client_id": "id",
    "github_client_secret": "shh", "github_url": "https://ghe.example.edu",
    "github_api_url": "https://ghe.example.edu/api/v3", "allowed_orgs": ("uni", "uni/staff"),
    "admins": ("root",), "instructors": ("prof", "uni/teachers"), "course_teams": True,
    "cookie_secure": False, "allow_path_routes": True, "session_ttl_seconds": 600, "dev_login": True,
    "lti_namespace": "userland-system",
    "lti_sync_minutes": 30, "lti_grade_seconds": 15.0,
    "upstream_mode": "dns", "cluster_domain": "k8s.example", "web_url": "http://web:8080",
    "internal_listen": "127.0.0.1:9000", "lease_namespace": "ops", "lease_name": "lead",
    "gateway_pod_labels": (("app", "gw"), ("tier", "edge")), "gateway_namespace": "edge",
    "wake_rate": 2.5, "wake_burst": 3, "nodes": "local", "pause_image": "registry.example.edu/pause:3",
    "placeholder_priority_class": "classroom-low", "image_pull_wait_seconds": 0, "hold_room_seconds": 600,
    "max_header_bytes": 2048, "header_timeout_seconds": 2.5,
    "keepalive_timeout_seconds": 9.0, "max_connections_per_client": 0, "max_websockets_per_user": 8,
    "login_rate_per_minute": 30, "trusted_proxies": ("10.0.0.0/8",), "activity_redis_seconds": 5.0,
    "activity_api_seconds": 20.0, "max_streams_per_user": 2,
    "store_url": "http://store:8080", "store_secret": "s" * 40, "worker_image": "registry/userland:1",
    "store_pod_labels": (("app", "store"),), "assignment_batch": 5, "grading_concurrency": 7,
    "collect_lead_seconds": 30.0, "check_interval_seconds": 45.0,
    "source_max_files": 100, "source_max_mb": 10, "folder_max_files": 200, "folder_max_mb": 20,
    "store_assignment_quota_mb": 0, "store_course_quota_mb": 300, "store_retention_hours": 0,
    "store_git_urls": ("https://git.example.edu/course/", "http://127.0.0.1:9418/"),
}


def test_the_stores_git_urls_are_http_addresses_with_a_host() -> None:
    assert Settings().store_git_urls == ("https://github.com/",)
    for bad in ("https://", "git@github.com:org/repo.git", "https://user:pw@github.com/", "file:///srv/git"):
        with pytest.raises(SettingsError, match="USERLAND_STORE_GIT_URLS has"):
            Settings.from_env({"USERLAND_STORE_GIT_URLS": bad})


def test_every_setting_round_trips_through_the_environment_a_program_passes() -> None:
    assert set(NON_DEFAULTS) == {f.name for f in dataclasses.fields(Settings)}, "a setting with no case"
    env = settings_module.environment(**NON_DEFAULTS)
    assert all(key.startswith("USERLAND_") for key in env)
    parsed = Settings.from_env(env)
    for name, value in NON_DEFAULTS.items():
        assert getattr(parsed, name) == value, name
        assert value != getattr(Settings(), name), f"{name}: the case must not be the default"


def test_environment_refuses_an_unknown_setting() -> None:
    with pytest.raises(ValueError, match="unknown settings: redis"):
        settings_module.environment(redis="redis://x")


def test_every_setting_has_help() -> None:
    for declared in settings_module.declarations():
        assert len(declared.metadata.get("help", "")) > 10, declared.name


def test_readme_lists_every_setting_as_declared() -> None:
    text = README.read_text()
    begin, end = "<!-- settings table: begin -->\n", "<!-- settings table: end -->"
    assert begin in text and end in text
    shown = text[text.index(begin) + len(begin):text.index(end)]
    assert shown == settings_module.markdown_table(), (
        "README's settings table differs from platform/model/settings.py: paste markdown_table()'s output")


def test_deploy_sets_only_declared_settings_and_they_parse() -> None:
    """deploy/config.env and the Deployments' env name real settings (a typo would be ignored)."""
    deploy = README.parent / "deploy"
    known = {settings_module.env_name(f.name) for f in settings_module.declarations()}
    config = dict(line.split("=", 1) for line in (deploy / "config.env").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    assert set(config) <= known, set(config) - known
    Settings.from_env(config)  # every value there parses
    for manifest in ("gateway.yaml", "web.yaml", "operator.yaml"):
        for doc in yaml.safe_load_all((deploy / manifest).read_text()):
            if not doc or doc.get("kind") != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                names = {e["name"] for e in container.get("env") or [] if e["name"].startswith("USERLAND_")}
                assert names <= known, (manifest, names - known)


# Where the project's code lives (tests aside: the suite's own knobs, USERLAND_NODE_* and the
# like, are the harness's, documented in its conftest files, not the platform's).
SCANNED = ("platform", "operator", "auth", "proxy", "web", "cli", "local", "coursework", "bench", "scripts")
OWNER = README.parent / "platform" / "model" / "settings.py"


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) of every `USERLAND_` variable `source` reads by its name: `environ["X"]`,
    `environ.get("X")`, `os.getenv("X")`, `env.pop("X")` (any mapping: `env` is often
    os.environ passed on). Writing one (`{"USERLAND_X": ...}`, `env["X"] = ...`) is not a read."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name = node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "getenv", "pop", "setdefault") and node.args):
            name = node.args[0]
        if isinstance(name, ast.Constant) and str(name.value).startswith("USERLAND_"):
            found.append((node.lineno, str(name.value)))
    return found


def test_the_scan_finds_every_way_of_reading_a_variable() -> None:
    source = ('import os\n'
              'a = os.environ["USERLAND_A"]\n'
              'b = os.environ.get("USERLAND_B", "x")\n'
              'c = os.getenv("USERLAND_C")\n'
              'd = env.get("USERLAND_D") or ""\n'
              'env = {"USERLAND_E": "1"}\n'
              'env["USERLAND_F"] = "2"\n'
              'g = os.environ.get("HOME")\n')
    assert sorted(environment_reads(source)) == [(2, "USERLAND_A"), (3, "USERLAND_B"), (4, "USERLAND_C"),
                                                  (5, "USERLAND_D")]


def test_no_module_reads_a_userland_variable_but_through_the_declarations() -> None:
    """Settings, JobSettings and LocalTools (platform/model/settings.py) read every `USERLAND_` variable:
    a module reading one itself escapes the parsing, the README and the check of deploy/."""
    offenders = [f"{path.relative_to(README.parent)}:{line}: {name}"
                 for folder in SCANNED for path in sorted((README.parent / folder).rglob("*.py"))
                 if path != OWNER for line, name in environment_reads(path.read_text())]
    assert not offenders, ("declare it in platform/model/settings.py and read it from there:\n"
                           + "\n".join(offenders))


def test_each_variable_is_declared_once_across_the_groups() -> None:
    groups = (Settings, JobSettings, LocalTools)
    variables = [settings_module.env_name(f.name) for group in groups for f in dataclasses.fields(group)]
    assert len(variables) == len(set(variables)), sorted(v for v in variables if variables.count(v) > 1)
    for group in groups:
        for declared in dataclasses.fields(group):
            assert len(declared.metadata.get("help", "")) > 10, declared.name


def test_what_a_worker_pod_is_told() -> None:
    told = JobSettings.from_env({"USERLAND_JOB": "{}", "USERLAND_JOB_TOKEN": "sekrit-token",
                                 "USERLAND_LOG_LEVEL": "warning"})
    assert (told.job, told.job_token, told.log_level) == ("{}", "sekrit-token", "WARNING")
    assert "sekrit-token" not in repr(told)  # the token stays out of logs
    with pytest.raises(SettingsError, match=r"^USERLAND_JOB is not set"):
        JobSettings.from_env({"USERLAND_JOB_TOKEN": "t"})
    with pytest.raises(SettingsError, match=r"^USERLAND_JOB_TOKEN is not set"):
        JobSettings.from_env({"USERLAND_JOB": "{}", "USERLAND_JOB_TOKEN": "  "})
    with pytest.raises(SettingsError, match="USERLAND_LOG_LEVEL"):
        JobSettings.from_env({"USERLAND_JOB": "{}", "USERLAND_JOB_TOKEN": "t", "USERLAND_LOG_LEVEL": "loud"})


def test_where_the_local_tools_are() -> None:
    tools = LocalTools.from_env({"USERLAND_K8S_CACHE": "/cache/k8s", "USERLAND_APPS_BIN": "/a/bin::/b/bin"})
    assert (tools.k8s_cache, tools.apps_bin) == ("/cache/k8s", ("/a/bin", "/b/bin"))
    assert LocalTools.from_env({}).apps_bin == ()
