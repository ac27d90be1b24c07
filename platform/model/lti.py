"""The LTI 1.3 registration: one LMS (platform) registered with Userland (the tool).

An admin registers an LMS once, as an `LtiRegistration` custom resource (deploy/crds/) in the
LTI namespace (`USERLAND_LTI_NAMESPACE`), or through Dynamic Registration. `LtiRegistration`
is the typed, validated form every component uses: the gateway's launch (auth/lti*.py) and the
LTI service clients (tokens, roster, grades). `from_object` turns the custom object into it,
raising `InvalidRegistration` with a sentence an admin can act on (it becomes the object's
`Ready=False` condition message).

One issuer may have many registrations (every hosted Canvas is `https://canvas.instructure.com`):
the client id (and then the deployment id) tells them apart, so a registration's key is
`(issuer, client_id)`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

KIND = "LtiRegistration"
PLURAL = "ltiregistrations"

# Where the login name comes from by default: the email's local part (`alice` of alice@uni.edu).
DEFAULT_LOGIN_CLAIM = "email"
# Claims a registration may name for the login; `custom:<name>` reads a custom parameter.
LOGIN_CLAIMS = ("email", "preferred_username", "sub", "name",
                "https://purl.imsglobal.org/spec/lti/claim/lis#person_sourcedid")
_CUSTOM_PREFIX = "custom:"
_CUSTOM_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_DEPLOYMENTS = 100
MAX_TEXT = 255
MAX_URL = 2048


class InvalidRegistration(ValueError):
    """A registration that cannot be used; the message says what to fix, in an admin's words."""


@dataclass(frozen=True)
class LtiRegistration:
    """One platform registration: what the tool needs to accept its launches and call it back.

    issuer: the platform's `iss` (exactly as in its id_tokens); client_id: the id the platform
    gave this tool; deployment_ids: the deployments whose launches are accepted; auth_login_url:
    the platform's OIDC authorization endpoint (where /lti/login sends the browser);
    auth_token_url: its OAuth2 token endpoint (client credentials, for the LTI services);
    key_set_url: its JWKS (the keys its id_tokens are signed with)."""

    issuer: str
    client_id: str
    deployment_ids: tuple[str, ...]
    auth_login_url: str
    auth_token_url: str
    key_set_url: str
    # Which claim gives a user's login (see LOGIN_CLAIMS; `custom:<name>` for a custom parameter).
    login_claim: str = DEFAULT_LOGIN_CLAIM
    # The custom object's name and namespace ("" when not from one, as in tests).
    name: str = ""
    namespace: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """What tells one registration from another: (issuer, client id)."""
        return (self.issuer, self.client_id)

    def knows_deployment(self, deployment_id: str) -> bool:
        return deployment_id in self.deployment_ids

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> LtiRegistration:
        """The registration of a custom object; InvalidRegistration says what is wrong."""
        raw = obj.get("metadata")
        metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise InvalidRegistration("The registration has no spec.")
        return parse_spec(spec, name=str(metadata.get("name") or ""),
                          namespace=str(metadata.get("namespace") or ""))


def _text(spec: dict[str, Any], key: str, what: str) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRegistration(f"spec.{key} is missing: give {what}.")
    if len(value) > MAX_TEXT:
        raise InvalidRegistration(f"spec.{key} is longer than {MAX_TEXT} characters.")
    return value.strip()


def is_loopback_host(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(value: str, field: str, what: str) -> str:
    """`value` as an absolute https URL (http only on this machine's loopback, for local trials)."""
    if len(value) > MAX_URL:
        raise InvalidRegistration(f"spec.{field} is longer than {MAX_URL} characters.")
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
    except ValueError:
        raise InvalidRegistration(f"spec.{field} ({value!r}) is not a URL: give {what}.") from None
    if parts.scheme not in ("https", "http") or not host:
        raise InvalidRegistration(f"spec.{field} ({value!r}) is not an absolute URL: give {what}.")
    if parts.scheme == "http" and not is_loopback_host(host):
        raise InvalidRegistration(
            f"spec.{field} ({value!r}) must use https: the platform's keys and tokens must not "
            "travel unencrypted.")
    if parts.username or parts.password:
        raise InvalidRegistration(f"spec.{field} must not contain a user name or password.")
    if parts.fragment:
        raise InvalidRegistration(f"spec.{field} must not contain a #fragment.")
    return value


def check_login_claim(claim: str) -> str:
    if claim in LOGIN_CLAIMS:
        return claim
    if claim.startswith(_CUSTOM_PREFIX) and _CUSTOM_RE.fullmatch(claim[len(_CUSTOM_PREFIX):]):
        return claim
    raise InvalidRegistration(
        f"spec.loginClaim {claim!r} is not one Userland can read: use one of "
        f"{', '.join(LOGIN_CLAIMS)}, or custom:<name> for a custom parameter.")


def parse_spec(spec: dict[str, Any], *, name: str = "", namespace: str = "") -> LtiRegistration:
    issuer = check_url(_text(spec, "issuer", "the platform's issuer, such as https://canvas.instructure.com"),
                       "issuer", "the platform's issuer")
    client_id = _text(spec, "clientId", "the client id the LMS showed when Userland was added")
    deployments = spec.get("deploymentIds")
    if not isinstance(deployments, list) or not deployments:
        raise InvalidRegistration(
            "spec.deploymentIds is empty: give at least one deployment id (the LMS shows it "
            "where the tool is installed); launches from other deployments are refused.")
    if len(deployments) > MAX_DEPLOYMENTS:
        raise InvalidRegistration(f"spec.deploymentIds has more than {MAX_DEPLOYMENTS} entries.")
    deployment_ids: list[str] = []
    for index, value in enumerate(deployments):
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
            raise InvalidRegistration(f"spec.deploymentIds[{index}] must be a non-empty text of at "
                                      f"most {MAX_TEXT} characters.")
        if value.strip() not in deployment_ids:
            deployment_ids.append(value.strip())
    login_url = check_url(_text(spec, "authLoginUrl", "the platform's OIDC authentication URL"),
                          "authLoginUrl", "the platform's OIDC authentication URL")
    token_url = check_url(_text(spec, "authTokenUrl", "the platform's access token URL"),
                          "authTokenUrl", "the platform's access token URL")
    key_set_url = check_url(_text(spec, "keySetUrl", "the platform's public keyset (JWKS) URL"),
                            "keySetUrl", "the platform's public keyset (JWKS) URL")
    claim = spec.get("loginClaim", DEFAULT_LOGIN_CLAIM)
    if not isinstance(claim, str):
        raise InvalidRegistration("spec.loginClaim must be text.")
    return LtiRegistration(issuer=issuer, client_id=client_id, deployment_ids=tuple(deployment_ids),
                           auth_login_url=login_url, auth_token_url=token_url, key_set_url=key_set_url,
                           login_claim=check_login_claim(claim or DEFAULT_LOGIN_CLAIM),
                           name=name, namespace=namespace)


def find_registration(registrations: tuple[LtiRegistration, ...] | list[LtiRegistration], issuer: str,
                      client_id: str | None, deployment_id: str | None = None) -> LtiRegistration | None:
    """The registration a login or launch names. Without a client id (some platforms leave it
    out of the login), the issuer's only registration, or the one that knows `deployment_id`;
    never a guess between several."""
    of_issuer = [r for r in registrations if r.issuer == issuer]
    if client_id:
        return next((r for r in of_issuer if r.client_id == client_id), None)
    if deployment_id:
        of_issuer = [r for r in of_issuer if r.knows_deployment(deployment_id)]
    return of_issuer[0] if len(of_issuer) == 1 else None


def linked_contexts(annotation: object) -> frozenset[tuple[str, str]]:
    """The (registration name, context id) pairs a Template's `userland.dev/lti-contexts`
    annotation names (`canvas:8f2a,moodle:17`); malformed entries are left out."""
    if not isinstance(annotation, str):
        return frozenset()
    pairs = set()
    for entry in annotation.split(","):
        registration, sep, context = entry.strip().partition(":")
        if sep and registration.strip() and context.strip():
            pairs.add((registration.strip(), context.strip()))
    return frozenset(pairs)
