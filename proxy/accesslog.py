"""Access log: one structured line per request, with nothing secret in it.

Fields: method, host, path (without the query string: it may hold OAuth codes or tokens),
status, bytes, duration_ms, remote, user (the login, once known). No headers at all, so no
cookies, Authorization or session ids.
"""

from __future__ import annotations

import io
import json
import json.encoder
import logging
import os
import sys
import time as _time
from collections.abc import Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

ACCESS_LOGGER = "userland.proxy.access"
# Where the gateway leaves the login of a request (never the cookie or session id).
LOGIN_KEY = web.RequestKey("userland.login", str)


class GatewayAccessLogger(AbstractAccessLogger):
    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        direct = _direct
        if direct is not None:  # the running server: the same JSON line, without a LogRecord
            direct.write_line(request.method, request.host, request.path, response.status,
                              response.body_length, round(time * 1000, 2), request.remote,
                              request.get(LOGIN_KEY))
            return
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


class BufferedAccessHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Access lines into a 64 KiB buffer, written out by `flush_now()` (the server calls it a few
    times a second and at shutdown) instead of one write per request: stderr is line-buffered,
    which made every access line a system call. A crash loses at most that fraction of a
    second of access lines; other logs are not affected."""

    def __init__(self) -> None:
        stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(os.dup(sys.stderr.fileno()), "w"),
                                                    buffer_size=65536),
                                  encoding="utf-8", line_buffering=False, write_through=False)
        super().__init__(stream)

    _second = -1
    _stamp = ""

    def write_line(self, method: str, host: str, path: str, status: int, size: int,
                   duration_ms: float, remote: str | None, user: str | None) -> None:
        """The line JsonFormatter makes of an access record (about 6x cheaper than logging it)."""
        now = _time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(second))
        # The JSON object written out by hand (the strings escaped by json's own C function):
        # a dict and the JSON encoder per request cost three times as much.
        self.stream.write(
            f'{{"time": "{self._stamp}.{int((now - second) * 1000):03d}Z", "level": "info", '
            f'"logger": "{ACCESS_LOGGER}", "msg": "request", "method": {_string(method)}, '
            f'"host": {_string(host)}, "path": {_string(path)}, "status": {int(status)}, '
            f'"bytes": {int(size)}, "duration_ms": {float(duration_ms)!r}, '
            f'"remote": {_optional(remote)}, "user": {_optional(user)}}}\n')

    def flush(self) -> None:
        """Called by `emit` after every record: left to `flush_now`."""

    def flush_now(self) -> None:
        with self.lock or _NO_LOCK:
            self.stream.flush()

    def close(self) -> None:
        global _direct
        if _direct is self:
            _direct = None
        self.flush_now()
        self.stream.close()
        super().close()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def buffer_access_log() -> BufferedAccessHandler | None:
    """Give the access logger its own buffered handler, formatted like the root's (the first
    root handler's formatter). None when access lines are not logged at all."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not logger.isEnabledFor(logging.INFO):
        return None
    handler = BufferedAccessHandler()
    root = logging.getLogger()
    if root.handlers and root.handlers[0].formatter is not None:
        handler.setFormatter(root.handlers[0].formatter)
    logger.addHandler(handler)
    logger.propagate = False
    global _direct
    _direct = handler
    return handler


_string: Callable[[str], str] = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def _optional(value: str | None) -> str:
    return "null" if value is None else _string(str(value))
# Set while a server runs with the buffered access log: GatewayAccessLogger writes to it directly.
_direct: BufferedAccessHandler | None = None
