"""LTI Dynamic Registration 1.0, the tool's side, as plain functions: the platform's OpenID
configuration checked, the registration request Userland sends, the platform's answer turned
into an LtiRegistration spec. No I/O (auth/lti_register.py fetches and posts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from userland.platform.model.lti import InvalidRegistration, check_url, parse_spec

PLATFORM_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-platform-configuration"
TOOL_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-tool-configuration"
SCOPES = (
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
    "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
)


class RegistrationRefused(ValueError):
    """The platform's configuration or answer cannot be used; the message says why, for an admin."""


def check_configuration(config: Any, url: str) -> dict[str, str]:
    """The endpoints of the platform's OpenID configuration fetched from `url`: its issuer must
    be the configuration's own site (a configuration cannot speak for another platform)."""
    if not isinstance(config, dict):
        raise RegistrationRefused("The platform's configuration is not a JSON object.")
    found: dict[str, str] = {}
    for key in ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri", "registration_endpoint"):
        value = config.get(key)
        if not isinstance(value, str) or not value:
            raise RegistrationRefused(f"The platform's configuration has no {key}.")
        try:
            found[key] = check_url(value, key, "a URL")
        except InvalidRegistration as exc:
            raise RegistrationRefused(f"The platform's configuration: {exc}") from None
    if not url.startswith(found["issuer"].rstrip("/") + "/"):
        raise RegistrationRefused(
            "The configuration's address is not on its issuer's site, so it cannot register that platform."
        )
    return found


def registration_request(public_url: str, name: str = "Userland") -> dict[str, Any]:
    """What Userland asks the platform to register (LTI Dynamic Registration §3.3)."""
    domain = public_url.split("://", 1)[-1].split("/", 1)[0]
    return {
        "application_type": "web",
        "response_types": ["id_token"],
        "grant_types": ["implicit", "client_credentials"],
        "initiate_login_uri": f"{public_url}/lti/login",
        "redirect_uris": [f"{public_url}/lti/launch"],
        "client_name": name,
        "jwks_uri": f"{public_url}/lti/jwks",
        "token_endpoint_auth_method": "private_key_jwt",
        "scope": " ".join(SCOPES),
        TOOL_CONFIGURATION: {
            "domain": domain,
            "target_link_uri": f"{public_url}/lti/launch",
            "claims": ["iss", "sub", "name", "email", "preferred_username"],
            "messages": [{"type": "LtiResourceLinkRequest"}, {"type": "LtiDeepLinkingRequest"}],
        },
    }


def registration_spec(endpoints: Mapping[str, str], answer: Any) -> dict[str, Any]:
    """The LtiRegistration spec for the platform's answer; RegistrationRefused when unusable."""
    if (
        not isinstance(answer, dict)
        or not isinstance(answer.get("client_id"), str)
        or not answer["client_id"]
    ):
        raise RegistrationRefused("The platform's answer has no client id.")
    tool = answer.get(TOOL_CONFIGURATION)
    deployment = tool.get("deployment_id") if isinstance(tool, dict) else None
    if not isinstance(deployment, str) or not deployment:
        raise RegistrationRefused("The platform's answer has no deployment id.")
    spec = {
        "issuer": endpoints["issuer"],
        "clientId": answer["client_id"],
        "deploymentIds": [deployment],
        "authLoginUrl": endpoints["authorization_endpoint"],
        "authTokenUrl": endpoints["token_endpoint"],
        "keySetUrl": endpoints["jwks_uri"],
    }
    try:
        parse_spec(spec)
    except InvalidRegistration as exc:
        raise RegistrationRefused(str(exc)) from None
    return spec


def object_name(issuer: str, client_id: str) -> str:
    """The LtiRegistration's name: stable for one (issuer, client id), a valid DNS label."""
    return "dynamic-" + hashlib.sha256(f"{issuer}\0{client_id}".encode()).hexdigest()[:12]
