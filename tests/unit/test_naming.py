"""Naming rules: valid DNS labels for every valid input, never two inputs on one name."""

from __future__ import annotations

import itertools
import random
import string

import pytest

from userland.platform.model import naming


@pytest.mark.parametrize("login", ["a", "A1", "koba1t", "a-b", "a-b-c", "x" * 39, "Z9-y8"])
def test_valid_logins(login: str) -> None:
    assert naming.is_valid_login(login)
    assert naming.normalize_login(login) == login.lower()


@pytest.mark.parametrize("login", ["", "-a", "a-", "a--b", "x" * 40, "a b", "a_b", "a.b", "ä"])
def test_invalid_logins_are_refused_with_a_message(login: str) -> None:
    assert not naming.is_valid_login(login)
    with pytest.raises(naming.InvalidName, match="invalid GitHub login"):
        naming.normalize_login(login)


GOLDEN = [
    # (template, user) -> deployment, service, pvc
    ("vscode", "Koba1t", "vscode-koba1t", "vscode-koba1t-svc", "vscode-koba1t-data"),
    ("mariadb", "a-b", "mariadb-a-b", "mariadb-a-b-svc", "mariadb-a-b-data"),
    (
        "a-very-long-template-name-for-the-advanced-course",
        "x" * 39,
        "a-very-long-template-name-for-the-advanced-cour-e8278d7768",
        "a-very-long-template-name-for-the-advanced-cour-e8278d7768-svc",
        "a-very-long-template-name-for-the-advanced-cour-e8278d7768-data",
    ),
]


@pytest.mark.parametrize(("template", "user", "deployment", "service", "pvc"), GOLDEN)
def test_child_names_golden(template: str, user: str, deployment: str, service: str, pvc: str) -> None:
    assert naming.deployment_name(template, user) == deployment
    assert naming.service_name(template, user) == service
    assert naming.pvc_name(template, user) == pvc


def _random_login(rng: random.Random) -> str:
    length = rng.randint(1, 39)
    chars = [rng.choice(string.ascii_letters + string.digits) for _ in range(length)]
    for i in range(1, length - 1):
        if rng.random() < 0.15 and chars[i - 1] != "-":
            chars[i] = "-"
    return "".join(chars)


def _random_template(rng: random.Random) -> str:
    length = rng.randint(1, 63)
    body = "".join(rng.choice(string.ascii_lowercase + string.digits + "-") for _ in range(length))
    return (rng.choice(string.ascii_lowercase) + body[1:-1] + rng.choice(string.digits))[:length] or "a"


def test_every_name_is_a_dns_label_and_distinct_per_user() -> None:
    rng = random.Random(20261122)
    for _ in range(300):
        template = _random_template(rng)
        if not naming.is_valid_dns_label(template):
            continue
        logins = {_random_login(rng).lower() for _ in range(30)}
        names = {naming.deployment_name(template, login) for login in logins}
        assert len(names) == len(logins)
        for login in logins:
            for name in (
                naming.deployment_name(template, login),
                naming.service_name(template, login),
                naming.pvc_name(template, login),
            ):
                assert naming.is_valid_dns_label(name), (template, login, name)


def test_a_shortened_name_never_equals_a_plain_one() -> None:
    # A crafted login that spells out another pair's shortened name must not collide with it.
    template, long_user = "t" * 20, "u" * 39
    shortened = naming.deployment_name(template, long_user)
    crafted_user = shortened[len(template) + 1 :]
    if naming.is_valid_login(crafted_user):
        assert naming.deployment_name(template, crafted_user) != shortened
    assert len(shortened) == 58
    plain_lengths = {len(naming.deployment_name("t", "u" * n)) for n in range(1, 40)}
    assert 58 not in plain_lengths


def test_label_values_fit() -> None:
    for length in (1, 63, 64, 200):
        value = naming.label_value("x" * length)
        assert len(value) <= 63
    assert naming.label_value("short") == "short"
    assert naming.label_value("y" * 64) != naming.label_value("y" * 65)


def test_network_policy_names_are_labels() -> None:
    for length in (1, 30, 63):
        assert naming.is_valid_dns_label(naming.network_policy_name("t" * length))
    names = {naming.network_policy_name(a + b) for a, b in itertools.product("ab", "cd")}
    assert len(names) == 4
