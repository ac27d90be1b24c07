"""Settings: read from a mapping, frozen, one clear line for any missing or invalid value."""

from __future__ import annotations

import dataclasses

import pytest

from userland.platform.settings import Settings, SettingsError


def test_defaults_and_parsing() -> None:
    settings = Settings.from_env(
        {
            "USERLAND_NAMESPACES": "classroom, lab2",
            "USERLAND_ADMINS": "Alice,\nmyorg/Staff",
            "USERLAND_COOKIE_SECURE": "false",
            "USERLAND_UPSTREAM_MODE": "LOCAL",
            "USERLAND_PUBLIC_URL": "https://userland.example.edu/",
            "USERLAND_COOKIE_DOMAIN": ".Example.edu",
            "USERLAND_GATEWAY_POD_LABELS": "app=gw, tier=edge",
        }
    )
    assert settings.namespaces == ("classroom", "lab2")
    assert settings.admins == ("alice", "myorg/staff")
    assert settings.cookie_secure is False
    assert settings.upstream_mode == "local"
    assert settings.public_url == "https://userland.example.edu"
    assert settings.cookie_domain == "example.edu"
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
        ({"USERLAND_COOKIE_DOMAIN": "localhost"}, "USERLAND_COOKIE_DOMAIN"),
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
