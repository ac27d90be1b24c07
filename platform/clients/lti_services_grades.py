"""Assignment and Grade Services 2.0 over HTTP: line items and grade passback (the I/O edge).

- `LineItems.ensure(credentials, lineitems_url, spec)`: the line item whose `resourceId` is the
  spec's, found with `?resource_id=` (every page), or created when there is none. Idempotent on
  every sync, and one call at a time per (lineitems URL, resource id) in this process, so two
  syncs racing never create two columns. Token scope: `lineitem` alone.
- `post_score(...)`: one Score to `<line item>/scores`, read as an Outcome (platform/model/
  lti_services_passback.py). Token scope: `score` alone.
- `pass_back(...)`: a round of the passback state machine for one line item: posts the grades
  that are due (a few at a time) and returns every student's new state. When the LMS stops
  answering, the round stops too: the students not tried wait for the next round instead of
  each waiting for a timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from userland.platform.clients.lti_services_token import ServiceError, TokenClient
from userland.platform.model import lti_services_passback as passback
from userland.platform.model.lti_services_grades import (
    LINEITEM_TYPE,
    LINEITEMS_TYPE,
    SCORE_TYPE,
    Grade,
    GradesError,
    LineItem,
    LineItemSpec,
    parse_line_item,
    parse_line_items,
    pick,
    score_body,
    service_url,
    with_query,
)
from userland.platform.model.lti_services_roster import RosterError, next_link
from userland.platform.model.lti_services_token import (
    SCOPE_LINEITEM,
    SCOPE_SCORE,
    ServiceCredentials,
    TokenError,
)

log = logging.getLogger("userland.lti.services")
MAX_LINE_ITEM_PAGES = 100
DEFAULT_CONCURRENCY = 8


class LineItemError(Exception):
    """The line item could not be found or made. str() is for staff; `retryable` as ServiceError."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class LineItems:
    def __init__(self, tokens: TokenClient) -> None:
        self._tokens = tokens
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def _get(
        self, credentials: ServiceCredentials, url: str, accept: str
    ) -> tuple[bytes, tuple[str, ...]]:
        try:
            response = await self._tokens.call(credentials, {SCOPE_LINEITEM}, "GET", url, accept=accept)
        except (TokenError, ServiceError) as err:
            raise LineItemError(str(err), retryable=err.retryable) from None
        if response.status != 200:
            raise LineItemError(
                f"The LMS answered the gradebook column list with HTTP {response.status}.",
                retryable=response.status >= 500 or response.status == 429,
            )
        return response.body, response.link

    async def find(
        self, credentials: ServiceCredentials, lineitems_url: str, resource_id: str
    ) -> LineItem | None:
        url: str | None = with_query(lineitems_url, resource_id=resource_id)
        pages = 0
        while url is not None:
            pages += 1
            if pages > MAX_LINE_ITEM_PAGES:
                raise LineItemError("The LMS's gradebook column list has too many pages.", retryable=False)
            body, links = await self._get(credentials, url, LINEITEMS_TYPE)
            try:
                found = pick(parse_line_items(body), resource_id)
                if found is not None:
                    return found
                url = next_link(links, url)
            except (GradesError, RosterError) as err:
                raise LineItemError(str(err), retryable=False) from None
        return None

    async def ensure(
        self, credentials: ServiceCredentials, lineitems_url: str, spec: LineItemSpec
    ) -> LineItem:
        lock = self._locks.setdefault((lineitems_url, spec.resource_id), asyncio.Lock())
        async with lock:
            found = await self.find(credentials, lineitems_url, spec.resource_id)
            if found is not None:
                return found
            try:
                response = await self._tokens.call(
                    credentials,
                    {SCOPE_LINEITEM},
                    "POST",
                    lineitems_url,
                    accept=LINEITEM_TYPE,
                    json_body=spec.body(),
                    content_type=LINEITEM_TYPE,
                )
            except (TokenError, ServiceError) as err:
                raise LineItemError(str(err), retryable=err.retryable) from None
            if response.status not in (200, 201):
                raise LineItemError(
                    f"The LMS refused to create the gradebook column {spec.label!r} "
                    f"(HTTP {response.status}).",
                    retryable=response.status >= 500 or response.status == 429,
                )
            try:
                item = parse_line_item(response.body)
            except GradesError as err:
                raise LineItemError(str(err), retryable=False) from None
            log.info("LTI line item created", extra={"resource_id": spec.resource_id, "line_item": item.id})
            return item


async def post_score(
    tokens: TokenClient,
    credentials: ServiceCredentials,
    lineitem_url: str,
    user_id: str,
    grade: Grade,
    when: datetime,
) -> passback.Outcome:
    try:
        response = await tokens.call(
            credentials,
            {SCOPE_SCORE},
            "POST",
            service_url(lineitem_url, "scores"),
            accept="application/json",
            json_body=score_body(user_id, grade, when),
            content_type=SCORE_TYPE,
            max_bytes=65_536,
        )
    except TokenError as err:
        return passback.Outcome(
            "retry" if err.retryable else "refused", f"Userland could not sign in to the LMS: {err}"
        )
    except ServiceError as err:
        return passback.Outcome("retry" if err.retryable else "refused", str(err))
    return passback.outcome_of(response.status)


@dataclass(frozen=True)
class Round:
    states: dict[str, passback.Passback]
    posted: int  # score posts sent
    sent: int
    retrying: int
    failed: int
    deferred: int  # not tried: the LMS had stopped answering


async def pass_back(
    tokens: TokenClient,
    credentials: ServiceCredentials,
    lineitem_url: str,
    grades: Mapping[str, Grade],
    states: Mapping[str, passback.Passback],
    *,
    now: datetime | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Round:
    now = now or datetime.now(UTC)
    planned = passback.plan(grades, states, now)
    result = dict(planned.states)
    queue = list(planned.post)
    down: list[passback.Passback] = []  # set once a post says the LMS is not answering
    counts = {"posted": 0, "sent": 0, "retry": 0, "refused": 0, "deferred": 0}

    async def worker() -> None:
        while queue:
            user = queue.pop(0)
            state = result[user]
            if down:
                until = down[0].next_at or now
                result[user] = passback.deferred(state, "Waiting: the LMS was not answering.", until)
                counts["deferred"] += 1
                continue
            counts["posted"] += 1
            outcome = await post_score(
                tokens, credentials, lineitem_url, user, state.value, datetime.now(UTC)
            )
            result[user] = passback.after(state, outcome, now)
            counts["sent" if outcome.kind == "ok" else outcome.kind] += 1
            if outcome.kind == "retry" and not down:
                down.append(result[user])

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(queue))))))
    round_ = Round(
        states=result,
        posted=counts["posted"],
        sent=counts["sent"],
        retrying=counts["retry"],
        failed=counts["refused"],
        deferred=counts["deferred"],
    )
    log.info(
        "LTI grade passback round",
        extra={
            "line_item": lineitem_url,
            "posted": round_.posted,
            "sent": round_.sent,
            "retrying": round_.retrying,
            "failed": round_.failed,
            "deferred": round_.deferred,
        },
    )
    return round_
