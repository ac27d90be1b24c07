"""The running server's access log: buffered, written without a LogRecord, same JSON line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from userland.platform.clients.logs import JsonFormatter
from userland.proxy import accesslog


@pytest.fixture
def buffered() -> Iterator[accesslog.BufferedAccessHandler]:
    logger = logging.getLogger(accesslog.ACCESS_LOGGER)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    handler = accesslog.buffer_access_log()
    assert handler is not None
    handler.stream = io.StringIO()
    yield handler
    handler.stream = io.StringIO()
    handler.close()
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def test_direct_line_matches_the_json_formatter(buffered: accesslog.BufferedAccessHandler) -> None:
    request = make_mocked_request("GET", "/callback?code=SECRET", headers={
        "Host": "ide.test", "Cookie": "userland_session=SESSIONID"})
    request[accesslog.LOGIN_KEY] = "alice"
    response = web.Response(text="hello")
    accesslog.GatewayAccessLogger(logging.getLogger(accesslog.ACCESS_LOGGER), "").log(
        request, response, 0.0123)
    line = buffered.stream.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    direct = json.loads(line)
    record = logging.LogRecord(accesslog.ACCESS_LOGGER, logging.INFO, "", 0, "request", (), None)
    for key in ("method", "host", "path", "status", "bytes", "duration_ms", "remote", "user"):
        setattr(record, key, direct[key])
    expected = json.loads(JsonFormatter().format(record))
    assert direct.keys() == expected.keys()
    assert {k: v for k, v in direct.items() if k != "time"} == {
        k: v for k, v in expected.items() if k != "time"}
    assert direct["path"] == "/callback" and direct["user"] == "alice" and direct["duration_ms"] == 12.3
    assert "SECRET" not in line and "SESSIONID" not in line
    assert direct["time"].endswith("Z") and len(direct["time"]) == len(expected["time"])


@pytest.mark.parametrize(("path", "user"), [
    ('/a"quote\\\\back', None), ("/caf\u00e9/\u65e5\u672c", "bob"), ("/ctl\x01\x7f", "alice"), ("/", None),
])
def test_direct_lines_are_json_whatever_the_path_holds(buffered: accesslog.BufferedAccessHandler,
                                                        path: str, user: str | None) -> None:
    buffered.write_line("GET", 'h"ost', path, 200, 5, 1.5, None, user)
    line = json.loads(buffered.stream.getvalue())
    assert (line["path"], line["host"], line["user"], line["remote"], line["status"], line["bytes"],
            line["duration_ms"]) == (path, 'h"ost', user, None, 200, 5, 1.5)
