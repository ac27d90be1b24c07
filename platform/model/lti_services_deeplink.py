"""Deep Linking 2.0: the tool's answer to a deep-linking launch, as a signed JWT. Pure, no I/O.

When a teacher adds Userland to an LMS module, the LMS sends an `LtiDeepLinkingRequest` whose
`https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings` claim says where to send
the answer (`deep_link_return_url`), what it accepts (`accept_types`) and an opaque `data` to
echo. The tool answers by having the browser POST a form field `JWT` to that URL: an
`LtiDeepLinkingResponse` message, signed with the tool's key:

    iss: the tool's client id        aud: the platform's issuer       iat, exp, nonce
    .../claim/message_type: LtiDeepLinkingResponse    .../claim/version: 1.3.0
    .../claim/deployment_id: the launch's              .../lti-dl/claim/data: echoed
    .../lti-dl/claim/content_items: [{"type": "ltiResourceLink", "title": ..., "url": ...,
        "lineItem": {"scoreMaximum": 10, "label": ..., "resourceId": ...}, ...}]

The line item in the content item makes the LMS create the gradebook column at once, with the
`resourceId` AGS later finds it by (platform/model/lti_services_grades.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from userland.platform.model.lti_services_grades import LineItemSpec, timestamp
from userland.platform.model.lti_services_keys import ToolKey, sign
from userland.platform.model.lti_services_token import check_url

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
DL_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/"
SETTINGS_CLAIM = DL_CLAIM + "deep_linking_settings"
RESPONSE_LIFETIME_SECONDS = 300
RESOURCE_LINK = "ltiResourceLink"


class DeepLinkError(ValueError):
    """The deep-linking request cannot be answered as asked. str() is for the teacher."""


@dataclass(frozen=True)
class Settings:
    """What the deep-linking request's settings claim allows."""

    return_url: str
    accept_types: frozenset[str]
    accept_multiple: bool
    data: str | None

    @classmethod
    def parse(cls, claim: Any) -> Settings:
        if not isinstance(claim, Mapping):
            raise DeepLinkError("The LMS sent no deep-linking settings with this launch.")
        return_url = claim.get("deep_link_return_url")
        if not isinstance(return_url, str):
            raise DeepLinkError("The LMS's deep-linking settings have no return address.")
        try:
            check_url(return_url, "the LMS's deep-linking return address")
        except ValueError as err:
            raise DeepLinkError(str(err)) from None
        types = claim.get("accept_types")
        data = claim.get("data")
        return cls(
            return_url=return_url,
            accept_types=frozenset(t for t in types if isinstance(t, str))
            if isinstance(types, list)
            else frozenset(),
            accept_multiple=claim.get("accept_multiple") is not False,
            data=data if isinstance(data, str) else None,
        )


def resource_link(
    *,
    url: str,
    title: str,
    text: str = "",
    line_item: LineItemSpec | None = None,
    custom: Mapping[str, str] | None = None,
    available_end: datetime | None = None,
    submission_end: datetime | None = None,
    allow_http: bool = False,
) -> dict[str, Any]:
    """An `ltiResourceLink` content item: the link the LMS will launch, with its gradebook column.
    `allow_http`: the URL is the tool's own, from its configured public URL (`make run` and the
    tests serve plain http on names other than loopback); any other link must be https."""
    try:
        check_url(url, "the link's address")
    except ValueError as err:
        parts = urlsplit(url)
        if not (allow_http and parts.scheme == "http" and parts.hostname and not parts.username):
            raise DeepLinkError(str(err)) from None
    if not title.strip():
        raise DeepLinkError("A link needs a title.")
    item: dict[str, Any] = {"type": RESOURCE_LINK, "title": title[:200], "url": url}
    if text:
        item["text"] = text[:1000]
    if line_item is not None:
        column: dict[str, Any] = {
            "scoreMaximum": line_item.score_maximum,
            "label": line_item.label[:200],
            "resourceId": line_item.resource_id,
        }
        if line_item.tag:
            column["tag"] = line_item.tag
        item["lineItem"] = column
    if custom:
        item["custom"] = {str(k): str(v) for k, v in custom.items()}
    if available_end is not None:
        item["available"] = {"endDateTime": timestamp(available_end)}
    if submission_end is not None:
        item["submission"] = {"endDateTime": timestamp(submission_end)}
    return item


def response_claims(
    *,
    client_id: str,
    platform_issuer: str,
    deployment_id: str,
    settings: Settings,
    items: Sequence[Mapping[str, Any]],
    now: float,
    nonce: str,
    message: str = "",
    error: str = "",
) -> dict[str, Any]:
    if not client_id or not platform_issuer or not deployment_id:
        raise DeepLinkError(
            "A deep-linking answer needs the client id, the platform's issuer and the deployment."
        )
    for item in items:
        if item.get("type") not in settings.accept_types:
            raise DeepLinkError(
                f"The LMS does not accept links of type {item.get('type')!r} here "
                f"(it accepts: {', '.join(sorted(settings.accept_types)) or 'none'})."
            )
    if len(items) > 1 and not settings.accept_multiple:
        raise DeepLinkError("The LMS accepts one link here; choose one.")
    issued = int(now)
    claims: dict[str, Any] = {
        "iss": client_id,
        "aud": platform_issuer,
        "iat": issued,
        "exp": issued + RESPONSE_LIFETIME_SECONDS,
        "nonce": nonce,
        CLAIM + "message_type": "LtiDeepLinkingResponse",
        CLAIM + "version": "1.3.0",
        CLAIM + "deployment_id": deployment_id,
        DL_CLAIM + "content_items": [dict(item) for item in items],
    }
    if settings.data is not None:
        claims[DL_CLAIM + "data"] = settings.data
    if message:
        claims[DL_CLAIM + "msg"] = message[:500]
    if error:
        claims[DL_CLAIM + "errormsg"] = error[:500]
    return claims


def deep_linking_response(key: ToolKey, **claims: Any) -> str:
    """The signed JWT for the form field `JWT` (keyword arguments as `response_claims`)."""
    return sign(response_claims(**claims), key)
