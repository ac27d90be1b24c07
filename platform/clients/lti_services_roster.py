"""Names and Role Provisioning Services 2.0: reading a whole context's roster (the I/O edge).

`read_roster(tokens, credentials, memberships_url, ...)` GETs every page (`Link: rel="next"`)
with a token for the membership scope alone, and returns all members, or raises a
`RosterError` saying why, in words for the course's staff. It never returns part of a roster:
the sync suspends whoever a roster does not list, so a roster read in part would drop the
students on the pages not read. It stops (with the reason) on:

- a page loop: a `next` that points to a page already read;
- a roster past `max_members` members or `max_pages` pages (a 5,000-member course is well
  inside both);
- a `next` to another site (the bearer token follows it: platform/model/lti_services_roster.py);
- the LMS refusing (401/403/404), failing (5xx, no answer in time) or answering garbage.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from userland.platform.clients.lti_services_token import ServiceError, TokenClient
from userland.platform.model.lti_services_roster import (
    MAX_MEMBERS,
    MAX_PAGES,
    MEDIA_TYPE,
    Member,
    RosterError,
    next_link,
    parse_page,
)
from userland.platform.model.lti_services_token import SCOPE_MEMBERSHIP, ServiceCredentials, TokenError

log = logging.getLogger("userland.lti.services")


@dataclass(frozen=True)
class Roster:
    context: str  # the linked context asked for
    context_id: str  # the context the LMS says it answered for (may differ: PrairieLearn#15632)
    members: tuple[Member, ...]
    pages: int
    unreadable: int  # entries without a user id or roles
    seconds: float


def _canonical(url: str) -> str:
    """The same page however its query is ordered (a loop that reorders parameters is a loop)."""
    parts = urlsplit(url)
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return urlunsplit((parts.scheme, parts.netloc.lower(), parts.path, query, ""))


def _with_limit(url: str, limit: int | None) -> str:
    if not limit:
        return url
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "limit"]
    return urlunsplit((*parts[:3], urlencode([*query, ("limit", str(limit))]), parts.fragment))


def _refusal(status: int, url: str) -> RosterError:
    if status in (401, 403):
        return RosterError(
            f"The LMS refused to give Userland the course roster (HTTP {status}). Check that "
            "the Names and Role Provisioning service is enabled for Userland in the LMS.",
            retryable=False,
        )
    if status == 404:
        return RosterError(
            "The LMS has no roster at the address it gave (HTTP 404): the LMS course may "
            "have been deleted or the link removed. Launch Userland from the course again.",
            retryable=False,
        )
    if status >= 500 or status == 429:
        return RosterError(
            f"The LMS failed to answer the roster request (HTTP {status}); Userland will try again.",
            retryable=True,
        )
    return RosterError(f"The LMS answered the roster request with HTTP {status}.", retryable=False)


async def read_roster(
    tokens: TokenClient,
    credentials: ServiceCredentials,
    memberships_url: str,
    *,
    issuer: str,
    context: str,
    limit: int | None = None,
    max_members: int = MAX_MEMBERS,
    max_pages: int = MAX_PAGES,
) -> Roster:
    started = time.monotonic()
    url: str | None = _with_limit(memberships_url, limit)
    seen: set[str] = set()
    members: list[Member] = []
    unreadable = 0
    context_id = ""
    while url is not None:
        canonical = _canonical(url)
        if canonical in seen:
            raise RosterError(
                f"The LMS's roster pages go round in a loop (page {len(seen) + 1} points back to "
                "one already read); Userland stopped reading and changed nothing.",
                retryable=False,
            )
        if len(seen) >= max_pages:
            raise RosterError(
                f"The LMS's roster has more than {max_pages} pages; Userland stopped reading "
                "and changed nothing.",
                retryable=False,
            )
        seen.add(canonical)
        try:
            response = await tokens.call(credentials, {SCOPE_MEMBERSHIP}, "GET", url, accept=MEDIA_TYPE)
        except TokenError as err:
            raise RosterError(
                f"Userland could not sign in to the LMS: {err}", retryable=err.retryable
            ) from None
        except ServiceError as err:
            raise RosterError(str(err), retryable=err.retryable) from None
        if response.status != 200:
            raise _refusal(response.status, url)
        page = parse_page(response.body, issuer=issuer, context=context)
        context_id = context_id or page.context_id
        members.extend(page.members)
        unreadable += page.unreadable
        if len(members) > max_members:
            raise RosterError(
                f"The LMS's roster has more than {max_members:,} members, more than Userland "
                "takes in one course; it stopped reading and changed nothing.",
                retryable=False,
            )
        url = next_link(response.link, url)
    roster = Roster(
        context=context,
        context_id=context_id,
        members=tuple(members),
        pages=len(seen),
        unreadable=unreadable,
        seconds=time.monotonic() - started,
    )
    log.info(
        "LTI roster read",
        extra={
            "context": context,
            "members": len(members),
            "pages": roster.pages,
            "unreadable": unreadable,
            "seconds": round(roster.seconds, 3),
        },
    )
    return roster
