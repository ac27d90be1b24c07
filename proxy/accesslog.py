"""Access log: one structured line per request, with nothing secret in it.

Fields: method, host, path (without the query string: it may hold OAuth codes or tokens),
status, bytes, duration_ms, remote, user (the login, once known). No headers at all, so no
cookies, Authorization or session ids.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

ACCESS_LOGGER = "userland.proxy.access"
# Where the gateway leaves the login of a request (never the cookie or session id).
LOGIN_KEY = web.RequestKey("userland.login", str)


class GatewayAccessLogger(AbstractAccessLogger):
    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.logger.info("request", extra={
            "method": request.method,
            "host": request.host,
            "path": request.path,
            "status": response.status,
            "bytes": response.body_length,
            "duration_ms": round(time * 1000, 2),
            "remote": request.remote,
            "user": request.get(LOGIN_KEY),
        })

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)
