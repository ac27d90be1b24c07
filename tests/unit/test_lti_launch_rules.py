"""Every id_token check of an LTI 1.3 launch (auth/rules/lti_launch.py), one row per check, with
real RSA keys and tokens signed by PyJWT. Pure: the time is passed in. The same attacks run
end to end against a real platform in tests/proxy/test_lti_launch.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from userland.auth.rules import lti_identity
from userland.auth.rules.lti_launch import (
    CLAIM,
    DEEP_LINKING_SETTINGS,
    LaunchRefused,
    check_claims,
    seconds_to_remember_nonce,
    verify_signature,
)
from userland.platform.model.lti import parse_spec

NOW = 1_800_000_000
ORIGIN = "https://userland.example.edu"
TARGET = ORIGIN + "/lti/launch"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
REG = parse_spec(
    {
        "issuer": "https://lms.example.edu",
        "clientId": "tool-1",
        "deploymentIds": ["dep-1"],
        "authLoginUrl": "https://lms.example.edu/auth",
        "authTokenUrl": "https://lms.example.edu/token",
        "keySetUrl": "https://lms.example.edu/jwks",
    }
)


def jwk_of(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


JWKS = {"keys": [jwk_of(KEY, "k1")]}


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": REG.issuer,
        "aud": "tool-1",
        "azp": "tool-1",
        "sub": "user-42",
        "iat": NOW - 5,
        "exp": NOW + 300,
        "nonce": "n-1",
        "email": "Alice.Smith@uni.example.edu",
        "name": "Alice Smith",
        CLAIM + "message_type": "LtiResourceLinkRequest",
        CLAIM + "version": "1.3.0",
        CLAIM + "deployment_id": "dep-1",
        CLAIM + "target_link_uri": TARGET,
        CLAIM + "resource_link": {"id": "link-1"},
        CLAIM + "roles": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"],
        CLAIM + "context": {"id": "ctx-1", "title": "Databases"},
    }
    for key, value in changes.items():
        key = key.replace("__", "/")
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


def sign(payload: dict[str, Any], key: rsa.RSAPrivateKey = KEY, kid: str = "k1") -> str:
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})


def check(token: str, *, nonce: str = "n-1", target: str = TARGET, now: float = NOW) -> Any:
    return check_claims(
        verify_signature(token, JWKS),
        REG,
        nonce=nonce,
        target_link_uri=target,
        platform_origin=ORIGIN,
        now=now,
    )


def refused(token: str, **kwargs: Any) -> str:
    with pytest.raises(LaunchRefused) as caught:
        check(token, **kwargs)
    assert caught.value.message  # every refusal has words for the person launching
    return caught.value.reason


def test_a_good_launch_passes() -> None:
    launch = check(sign(claims()))
    assert (launch.issuer, launch.subject, launch.deployment_id) == (REG.issuer, "user-42", "dep-1")
    assert launch.context_id == "ctx-1" and launch.resource_link_id == "link-1" and not launch.deep_linking


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


PUBLIC_PEM = KEY.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)


def hs256_with_public_key(payload: dict[str, Any]) -> str:
    """The classic confusion attack: HMAC keyed with the platform's public key."""
    import hashlib
    import hmac

    head = _b64({"alg": "HS256", "typ": "JWT", "kid": "k1"}) + "." + _b64(payload)
    mac = hmac.new(PUBLIC_PEM, head.encode(), hashlib.sha256).digest()
    return head + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def alg_none(payload: dict[str, Any]) -> str:
    return _b64({"alg": "none", "typ": "JWT", "kid": "k1"}) + "." + _b64(payload) + "."


SIGNATURE_ATTACKS: list[tuple[str, Callable[[], str], str]] = [
    ("signed by another key, same kid", lambda: sign(claims(), OTHER_KEY), "signature"),
    ("signed by another key, its own kid", lambda: sign(claims(), OTHER_KEY, "k2"), "unknown_key"),
    ("alg none", lambda: alg_none(claims()), "algorithm"),
    ("HS256 keyed with the public key", lambda: hs256_with_public_key(claims()), "algorithm"),
    ("RS512", lambda: jwt.encode(claims(), KEY, algorithm="RS512", headers={"kid": "k1"}), "algorithm"),
    (
        "payload changed after signing",
        lambda: _swap_payload(sign(claims()), claims(sub="admin")),
        "signature",
    ),
    ("not a JWT", lambda: "not-a-token", "malformed"),
]


def _swap_payload(token: str, payload: dict[str, Any]) -> str:
    head, _, sig = token.split(".")
    return f"{head}.{_b64(payload)}.{sig}"


@pytest.mark.parametrize(
    ("attack", "token", "reason"), SIGNATURE_ATTACKS, ids=[a[0] for a in SIGNATURE_ATTACKS]
)
def test_signature_attacks_are_refused(attack: str, token: Callable[[], str], reason: str) -> None:
    assert refused(token()) == reason


CLAIM_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("another issuer", {"iss": "https://evil.example.edu"}, "issuer"),
    ("another client id", {"aud": "tool-2", "azp": "tool-2"}, "audience"),
    ("several audiences without azp", {"aud": ["tool-1", "tool-2"], "azp": None}, "audience"),
    ("azp of another tool", {"aud": ["tool-1", "tool-2"], "azp": "tool-2"}, "audience"),
    ("expired", {"exp": NOW - 120}, "expired"),
    ("no exp", {"exp": None}, "expired"),
    ("issued in the future", {"iat": NOW + 600}, "expired"),
    ("issued two hours ago", {"iat": NOW - 7200, "exp": NOW + 60}, "expired"),
    ("another nonce", {"nonce": "n-2"}, "nonce"),
    ("no nonce", {"nonce": None}, "nonce"),
    ("unknown deployment", {CLAIM + "deployment_id": "dep-9"}, "deployment"),
    ("no deployment", {CLAIM + "deployment_id": None}, "deployment"),
    ("unknown message type", {CLAIM + "message_type": "LtiSubmissionReviewRequest"}, "message_type"),
    ("LTI 1.1 version", {CLAIM + "version": "1.1"}, "version"),
    ("target elsewhere", {CLAIM + "target_link_uri": "https://evil.example.edu/lti/launch"}, "target"),
    (
        "target on a look-alike host",
        {CLAIM + "target_link_uri": ORIGIN + ".evil.example/lti/launch"},
        "target",
    ),
    ("anonymous launch", {"sub": None}, "subject"),
    ("roles not a list", {CLAIM + "roles": "Learner"}, "roles"),
    ("resource link without id", {CLAIM + "resource_link": {}}, "resource_link"),
    ("deep linking without settings", {CLAIM + "message_type": "LtiDeepLinkingRequest"}, "deep_linking"),
]


@pytest.mark.parametrize(("case", "changes", "reason"), CLAIM_CASES, ids=[c[0] for c in CLAIM_CASES])
def test_each_claim_check(case: str, changes: dict[str, Any], reason: str) -> None:
    assert refused(sign(claims(**changes))) == reason


def test_target_must_be_the_one_the_login_named() -> None:
    # The token's target is on this site but not where the login said the launch goes.
    token = sign(claims(**{CLAIM + "target_link_uri": ORIGIN + "/lti/launch?other"}))
    assert refused(token) == "target"


def test_deep_linking_launch_passes_with_settings() -> None:
    launch = check(
        sign(
            claims(
                **{
                    CLAIM + "message_type": "LtiDeepLinkingRequest",
                    DEEP_LINKING_SETTINGS: {"deep_link_return_url": "https://lms/x"},
                }
            )
        )
    )
    assert launch.deep_linking


def test_a_used_nonce_is_remembered_until_the_token_expires() -> None:
    assert seconds_to_remember_nonce(claims(), now=NOW) == 300 + 60 + 1
    assert seconds_to_remember_nonce(claims(exp=NOW + 10**6), now=NOW) == 3660


def test_a_key_set_without_kid_match_is_refused_even_with_one_key() -> None:
    token = jwt.encode(claims(), KEY, algorithm="RS256")  # no kid: the only key is tried
    assert check(token).subject == "user-42"
    two = {"keys": [jwk_of(KEY, "k1"), jwk_of(OTHER_KEY, "k2")]}
    with pytest.raises(LaunchRefused) as caught:
        verify_signature(token, two)
    assert caught.value.reason == "unknown_key"


# -- identity --


@pytest.mark.parametrize(
    ("claim", "given", "login"),
    [
        ("email", {"email": "Alice.Smith@uni.example.edu"}, "alice-smith"),
        ("email", {"email": "no-at-sign"}, "lti-user"),
        ("email", {}, "lti-user"),
        ("preferred_username", {"preferred_username": "s1234567"}, "s1234567"),
        ("custom:login", {CLAIM + "custom": {"login": "Bob_Jones"}}, "bob-jones"),
        ("email", {"email": "日本語@uni.example.edu"}, "lti-user"),
        ("email", {"email": "x" * 80 + "@u.edu"}, "x" * 35),
    ],
)
def test_login_from_the_registrations_claim(claim: str, given: dict[str, Any], login: str) -> None:
    reg = parse_spec(
        {
            **{
                "issuer": REG.issuer,
                "clientId": "c",
                "deploymentIds": ["d"],
                "authLoginUrl": REG.auth_login_url,
                "authTokenUrl": REG.auth_token_url,
                "keySetUrl": REG.key_set_url,
            },
            "loginClaim": claim,
        }
    )
    assert lti_identity.normalise(lti_identity.claimed_name(given, reg)) == login


def test_candidates_are_numbered_then_unique_to_the_user() -> None:
    subject = lti_identity.subject_key("https://lms", "user-1")
    candidates = list(lti_identity.login_candidates("alice", subject))
    assert candidates[:3] == ["alice", "alice-2", "alice-3"]
    assert candidates[-1] == f"alice-{subject[:12]}"
    assert lti_identity.subject_key("https://lms", "user-1") != lti_identity.subject_key(
        "https://lms2", "user-1"
    )


@pytest.mark.parametrize(
    ("roles", "role"),
    [
        (["http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"], "instructor"),
        (["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"], "student"),
        (["http://purl.imsglobal.org/vocab/lis/v2/membership#TeachingAssistant"], "assistant"),
        (
            [
                "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant",
                "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor",
            ],
            "assistant",
        ),
        (["Learner"], "student"),
        # An institution role is no course role.
        (["http://purl.imsglobal.org/vocab/lis/v2/institution/person#Instructor"], None),
        (["http://purl.imsglobal.org/vocab/lis/v2/system/person#Administrator"], None),
        ([], None),
    ],
)
def test_course_roles(roles: list[str], role: str | None) -> None:
    assert lti_identity.course_role(roles) == role
