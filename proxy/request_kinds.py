"""What kind of request the gateway has in hand, and what it marks on one for the access log
and the metrics (proxy/app.py reads the marks)."""

from __future__ import annotations

from aiohttp import web


def wants_html(request: web.Request) -> bool:
    return request.method in ("GET", "HEAD") and "text/html" in request.headers.get("Accept", "")


def is_background(request: web.Request) -> bool:
    """A page's own request from a browser tab (fetch/XHR, not a navigation or a WebSocket):
    browsers mark those with Sec-Fetch-Mode (cors, same-origin, no-cors)."""
    return request.headers.get("Sec-Fetch-Mode", "") in ("cors", "same-origin", "no-cors")


# Set on a request whose response comes from an upstream (it keeps its own headers).
FORWARDED = web.RequestKey("userland_forwarded", bool)
# Set when a forwarded request's upstream failed and the gateway answered itself (a 502/504 page),
# and when it answered the designed 503 of an environment not answering yet: which 5xx are the
# platform's own failures (proxy/metrics.py `failed`).
UPSTREAM_FAILED = web.RequestKey("userland_upstream_failed", bool)
NOT_READY = web.RequestKey("userland_not_ready", bool)
