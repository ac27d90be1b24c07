"""The LTI registration model (platform/model/lti.py) and its status (auth/rules/lti_registrations.py):
what an admin writes, what is refused and in which words. Pure."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from userland.auth.rules import lti_registrations as status_rules
from userland.platform.model.lti import InvalidRegistration, LtiRegistration, find_registration, parse_spec

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "ltiregistrations.userland.dev.yaml"

SPEC: dict[str, Any] = {
    "issuer": "https://canvas.instructure.com",
    "clientId": "10000000000001",
    "deploymentIds": ["1:abc", "2:def"],
    "authLoginUrl": "https://sso.canvaslms.com/api/lti/authorize_redirect",
    "authTokenUrl": "https://sso.canvaslms.com/login/oauth2/token",
    "keySetUrl": "https://sso.canvaslms.com/api/lti/security/jwks",
}


def test_a_full_spec_is_read() -> None:
    reg = LtiRegistration.from_object(
        {"metadata": {"name": "canvas", "namespace": "userland-system"}, "spec": SPEC}
    )
    assert reg.issuer == SPEC["issuer"] and reg.client_id == SPEC["clientId"]
    assert reg.deployment_ids == ("1:abc", "2:def")
    assert reg.key == (SPEC["issuer"], SPEC["clientId"])
    assert reg.login_claim == "email" and reg.name == "canvas"
    assert reg.knows_deployment("2:def") and not reg.knows_deployment("3:xyz")


def without(key: str) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    del spec[key]
    return spec


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (without("issuer"), "spec.issuer is missing"),
        (without("clientId"), "spec.clientId is missing"),
        (without("deploymentIds"), "spec.deploymentIds is empty"),
        ({**SPEC, "deploymentIds": []}, "at least one deployment id"),
        ({**SPEC, "deploymentIds": [""]}, "spec.deploymentIds[0]"),
        (without("keySetUrl"), "public keyset (JWKS) URL"),
        ({**SPEC, "keySetUrl": "http://lms.example.edu/jwks"}, "must use https"),
        ({**SPEC, "authLoginUrl": "lms.example.edu/auth"}, "not an absolute URL"),
        ({**SPEC, "authTokenUrl": "https://user:pw@lms.example.edu/token"}, "user name or password"),
        ({**SPEC, "loginClaim": "password"}, "custom:<name>"),
    ],
)
def test_an_unusable_spec_says_what_to_fix(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRegistration, match=r".*") as caught:
        parse_spec(spec)
    assert words in str(caught.value)


def test_loopback_platforms_may_use_http_for_local_trials() -> None:
    reg = parse_spec({**SPEC, "issuer": "http://127.0.0.1:8000", "keySetUrl": "http://localhost:8000/jwks"})
    assert reg.key_set_url == "http://localhost:8000/jwks"


def test_custom_login_claims() -> None:
    assert parse_spec({**SPEC, "loginClaim": "custom:student_login"}).login_claim == "custom:student_login"


def test_one_issuer_many_registrations_told_apart_by_client_id() -> None:
    a = parse_spec({**SPEC, "clientId": "A", "deploymentIds": ["d-a"]})
    b = parse_spec({**SPEC, "clientId": "B", "deploymentIds": ["d-b"]})
    regs = [a, b]
    assert find_registration(regs, SPEC["issuer"], "B") is b
    assert find_registration(regs, SPEC["issuer"], "C") is None
    # Without a client id, the deployment decides; never a guess between several.
    assert find_registration(regs, SPEC["issuer"], None, "d-a") is a
    assert find_registration(regs, SPEC["issuer"], None) is None
    assert find_registration([a], SPEC["issuer"], None) is a
    assert find_registration(regs, "https://other.example.edu", "A") is None


def test_the_crd_requires_what_the_model_requires() -> None:
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(schema["required"]) == {
        "issuer",
        "clientId",
        "deploymentIds",
        "authLoginUrl",
        "authTokenUrl",
        "keySetUrl",
    }
    # Every property the schema allows feeds the model: taking it away changes the registration.
    full = {**SPEC, "loginClaim": "preferred_username"}
    assert set(schema["properties"]) == set(full)
    parsed = parse_spec(full)
    for key in full:
        if key in schema["required"]:
            with pytest.raises(InvalidRegistration):
                parse_spec({k: v for k, v in full.items() if k != key})
        else:
            assert parse_spec({k: v for k, v in full.items() if k != key}) != parsed


def test_status_says_ready_and_writes_nothing_when_unchanged() -> None:
    obj: dict[str, Any] = {"metadata": {"generation": 2}, "status": {}}
    outcome = status_rules.key_set_fetched(1, "https://lms/jwks")
    patch = status_rules.status_patch(obj, outcome, now=1_700_000_000)
    assert patch is not None
    condition = patch["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Ready", "True", "KeySetFetched")
    assert patch["status"]["observedGeneration"] == 2 and patch["status"]["keys"] == 1
    obj["status"] = patch["status"]
    assert status_rules.status_patch(obj, outcome, now=1_700_000_100) is None
    failed = status_rules.status_patch(
        obj, status_rules.key_set_failed("https://lms/jwks", "it answered HTTP 404"), now=1_700_000_200
    )
    assert failed is not None
    words = failed["status"]["conditions"][0]["message"]
    assert "HTTP 404" in words and "keySetUrl" in words
    assert failed["status"]["conditions"][0]["lastTransitionTime"] != condition["lastTransitionTime"]


# -- Dynamic Registration (auth/rules/lti_dynamic.py) --


def test_dynamic_registration_turns_the_platforms_answer_into_a_spec() -> None:
    from userland.auth.rules import lti_dynamic

    config = {
        "issuer": "https://lms.example.edu",
        "authorization_endpoint": "https://lms.example.edu/auth",
        "token_endpoint": "https://lms.example.edu/token",
        "jwks_uri": "https://lms.example.edu/jwks",
        "registration_endpoint": "https://lms.example.edu/register",
    }
    endpoints = lti_dynamic.check_configuration(
        config, "https://lms.example.edu/.well-known/openid-configuration"
    )
    asked = lti_dynamic.registration_request("https://userland.example.edu")
    assert asked["initiate_login_uri"] == "https://userland.example.edu/lti/login"
    assert asked[lti_dynamic.TOOL_CONFIGURATION]["domain"] == "userland.example.edu"
    answer = {"client_id": "c-1", lti_dynamic.TOOL_CONFIGURATION: {"deployment_id": "d-1"}}
    spec = lti_dynamic.registration_spec(endpoints, answer)
    assert parse_spec(spec).key == ("https://lms.example.edu", "c-1")
    assert lti_dynamic.object_name("https://lms.example.edu", "c-1").startswith("dynamic-")
    for bad_url in (
        "https://evil.example/.well-known/openid-configuration",
        "https://lms.example.edu.evil.example/x",
    ):
        with pytest.raises(lti_dynamic.RegistrationRefused):
            lti_dynamic.check_configuration(config, bad_url)
    with pytest.raises(lti_dynamic.RegistrationRefused, match="deployment id"):
        lti_dynamic.registration_spec(endpoints, {"client_id": "c-1"})
    with pytest.raises(lti_dynamic.RegistrationRefused, match="must use https"):
        lti_dynamic.check_configuration(
            {**config, "jwks_uri": "http://lms.example.edu/jwks"},
            "https://lms.example.edu/.well-known/openid-configuration",
        )
