"""How the text of a setting is read: each parser takes (variable, text) and returns the value,
or raises SettingsError with one line that names the variable (platform/model/settings.py declares
which parser each setting uses)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from userland.platform.model import naming
from userland.platform.model.addresses import split_listen

Parser = Callable[[str, str], Any]  # (variable name, its text) -> value; SettingsError if bad


class SettingsError(ValueError):
    """A setting that is missing or invalid; str() is one line naming it."""


# ----- parsers: (variable, text) -> value -----


def text(_: str, value: str) -> str:
    return value.strip()


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.replace("\n", ",").split(",") if part.strip())


def names(_: str, value: str) -> tuple[str, ...]:
    return _split(value)


def logins(_: str, value: str) -> tuple[str, ...]:
    """Logins, orgs and `org/team` entries: GitHub compares them case-insensitively."""
    return tuple(v.lower() for v in _split(value))


def namespaces(variable: str, value: str) -> tuple[str, ...]:
    found = _split(value)
    for ns in found:
        if not naming.is_valid_dns_label(ns):
            raise SettingsError(f"{variable} has {ns!r}, which is not a namespace name")
    return found


def boolean(variable: str, value: str) -> bool:
    word = value.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{variable}={value!r} is not a boolean: use true or false")


def whole(minimum: int) -> Parser:
    def parse(variable: str, value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise SettingsError(f"{variable}={value!r} is not a whole number") from None
        if number < minimum:
            raise SettingsError(f"{variable}={number} must be at least {minimum}")
        return number
    return parse


def seconds(variable: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise SettingsError(f"{variable}={value!r} is not a number of seconds") from None
    if not 0.1 <= number <= 3600:
        raise SettingsError(f"{variable}={number} must be between 0.1 and 3600 seconds")
    return number


def per_second(variable: str, value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        raise SettingsError(f"{variable}={value!r} is not a number (environments per second)") from None
    if not 0.1 <= rate <= 1000:
        raise SettingsError(f"{variable}={rate} must be between 0.1 and 1000 per second")
    return rate


def url(variable: str, value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"{variable}={value!r} is not an http(s) URL")
    return value.strip().rstrip("/")


def choice(*allowed: str) -> Parser:
    def parse(variable: str, value: str) -> str:
        word = value.strip().lower()
        if word not in allowed:
            raise SettingsError(f"{variable}={value!r} must be {', '.join(allowed[:-1])} or {allowed[-1]}")
        return word
    return parse


def domain(_: str, value: str) -> str:
    return value.strip().strip(".")


def listen(variable: str, value: str) -> str:
    try:
        split_listen(value)
    except ValueError as err:
        raise SettingsError(f"{variable}={err}") from None
    return value.strip()


def networks(variable: str, value: str) -> tuple[str, ...]:
    found = _split(value)
    for cidr in found:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise SettingsError(f"{variable} has {cidr!r}, which is not an address "
                                "or network (such as 10.0.0.0/8)") from None
    return found


def url_prefixes(variable: str, value: str) -> tuple[str, ...]:
    found = _split(value)
    for prefix in found:
        parts = urlsplit(prefix)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise SettingsError(f"{variable} has {prefix!r}, which is not an http(s) address with a host "
                                "(such as https://github.com/your-org/)")
    return found


def label_pairs(variable: str, value: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in _split(value):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"{variable} has {item!r}: use key=value[,key=value]")
        pairs.append((key.strip(), val.strip()))
    return tuple(pairs)


def log_level(variable: str, value: str) -> str:
    word = value.strip().upper()
    if word not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SettingsError(f"{variable}={value!r} must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return word


def paths(_: str, value: str) -> tuple[str, ...]:
    """Folders separated by ":", as in PATH."""
    return tuple(part for part in value.split(":") if part)
