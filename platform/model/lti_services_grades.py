"""Assignment and Grade Services 2.0: line items and Scores, as data. Pure, no I/O.

A line item is a gradebook column. The tool finds its own by `resourceId` (the Userland
Assignment it stands for) with `GET <lineitems URL>?resource_id=...`, and creates it with a POST
when there is none, so every sync finds the one it made instead of adding another
(PrairieLearn#15643). A Score goes to `<line item URL>/scores` (the path gets `/scores`, the
query stays: Moodle's line item URLs carry one), as `application/vnd.ims.lis.v1.score+json`:

    {"userId": "<LMS user id>", "scoreGiven": 8, "scoreMaximum": 10, "comment": "...",
     "activityProgress": "Completed", "gradingProgress": "FullyGraded",
     "timestamp": "2026-11-28T05:30:00.123+00:00"}

The LMS keeps the newest Score by timestamp, so each post carries the time it was made.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from userland.platform.model.models import parse_time

LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
RESULTS_TYPE = "application/vnd.ims.lis.v2.resultcontainer+json"

Activity = Literal["Initialized", "Started", "InProgress", "Submitted", "Completed"]
Grading = Literal["FullyGraded", "Pending", "PendingManual", "Failed", "NotReady"]
MAX_LABEL = 200
MAX_COMMENT = 4000


class GradesError(Exception):
    """An answer from the LMS that is not what AGS says. str() is for staff."""


@dataclass(frozen=True)
class LineItemSpec:
    """The column an Assignment wants: its label, maximum, and the id that finds it again."""

    resource_id: str  # the Assignment's stable id (namespace/name or uid)
    label: str
    score_maximum: float
    tag: str = ""
    resource_link_id: str = ""  # the LMS link it belongs to, when it came from one
    end: datetime | None = None  # the due date, as the column's endDateTime

    def __post_init__(self) -> None:
        if not self.resource_id:
            raise ValueError("a line item needs a resource id to be found again")
        if not self.label.strip():
            raise ValueError("a line item needs a label")
        if not math.isfinite(self.score_maximum) or self.score_maximum <= 0:
            raise ValueError("a line item's score maximum must be above 0")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "scoreMaximum": self.score_maximum,
            "label": self.label[:MAX_LABEL],
            "resourceId": self.resource_id,
        }
        if self.tag:
            body["tag"] = self.tag
        if self.resource_link_id:
            body["resourceLinkId"] = self.resource_link_id
        if self.end is not None:
            body["endDateTime"] = timestamp(self.end)
        return body


@dataclass(frozen=True)
class LineItem:
    id: str  # its URL
    label: str
    score_maximum: float
    resource_id: str = ""
    resource_link_id: str = ""
    tag: str = ""
    end: str = ""  # endDateTime as the LMS wrote it

    def due(self) -> datetime | None:
        """The column's end date as the Assignment's due date (the LMS's date wins), or None
        when it has none or an unreadable one (then the Assignment keeps its own)."""
        return parse_time(self.end) if self.end else None


def timestamp(when: datetime) -> str:
    """ISO 8601 with milliseconds and the offset, as AGS asks."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.isoformat(timespec="milliseconds")


def _line_item(raw: Any) -> LineItem | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
        return None
    maximum = raw.get("scoreMaximum")
    return LineItem(
        id=raw["id"],
        label=str(raw.get("label") or "")[:MAX_LABEL],
        score_maximum=float(maximum)
        if isinstance(maximum, (int, float)) and not isinstance(maximum, bool)
        else 0.0,
        resource_id=str(raw.get("resourceId") or ""),
        resource_link_id=str(raw.get("resourceLinkId") or ""),
        tag=str(raw.get("tag") or ""),
        end=str(raw.get("endDateTime") or ""),
    )


def parse_line_items(body: bytes) -> list[LineItem]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise GradesError("The LMS answered the line item list with something that is not JSON.") from None
    if not isinstance(document, list):
        raise GradesError("The LMS answered the line item list with something that is not a list.")
    return [item for item in map(_line_item, document) if item is not None]


def parse_line_item(body: bytes) -> LineItem:
    try:
        item = _line_item(json.loads(body))
    except (ValueError, UnicodeDecodeError):
        item = None
    if item is None:
        raise GradesError("The LMS answered the new line item without its id.")
    return item


def pick(items: Sequence[LineItem], resource_id: str) -> LineItem | None:
    """The tool's column for `resource_id`: the first one the LMS lists (the oldest, if a
    platform ignored the filter or an earlier tool made duplicates)."""
    return next((item for item in items if item.resource_id == resource_id), None)


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    return urlunsplit((*parts[:3], urlencode([*query, *params.items()]), parts.fragment))


def service_url(lineitem_url: str, service: Literal["scores", "results"]) -> str:
    """`<line item URL>/scores` (or /results): the path gets the segment, the query stays."""
    parts = urlsplit(lineitem_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + service, parts.query, ""))


@dataclass(frozen=True)
class Grade:
    """What Userland would have the gradebook say for one student."""

    given: float | None  # None: no points yet (an activity in progress)
    maximum: float
    comment: str = ""
    activity: Activity = "Completed"
    grading: Grading = "FullyGraded"

    def __post_init__(self) -> None:
        if not math.isfinite(self.maximum) or self.maximum <= 0:
            raise ValueError("a grade's maximum must be above 0")
        if self.given is not None and (not math.isfinite(self.given) or self.given < 0):
            raise ValueError("a grade's points must be a number of at least 0")


def score_body(user_id: str, grade: Grade, when: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {
        "userId": user_id,
        "activityProgress": grade.activity,
        "gradingProgress": grade.grading,
        "timestamp": timestamp(when),
    }
    if grade.given is not None:
        body["scoreGiven"] = grade.given
        body["scoreMaximum"] = grade.maximum
    if grade.comment:
        body["comment"] = grade.comment[:MAX_COMMENT]
    return body
