"""Structured logging: one JSON object per line, and `[namespace/name]` on reconcile lines.

Fields passed with `extra=` become keys of the line. Nothing here logs secrets; callers must
never pass tokens, cookies or session ids (the gateway logs a hash when it must refer to one).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is replaced by each server's own (which scrubs cookies).
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class ObjectLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Prefixes `[namespace/name]` and adds `object` to every line about one object."""

    def __init__(self, logger: logging.Logger, namespace: str, name: str) -> None:
        super().__init__(logger, {"object": f"{namespace}/{name}"})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return f"[{extra['object']}] {msg}", kwargs
