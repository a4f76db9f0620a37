"""Logging set-up for the service: one JSON object per line (or plain text), one level.

A JSON line carries ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg``, whatever the call
site passed as ``extra`` (the access log: ``request_id``, ``method``, ``route``, ``path``,
``status``, ``duration_ms``) and ``exc`` (the traceback) when there is one. uvicorn's
``color_message`` (its message again, with ANSI colour codes for a terminal) is never written.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

__all__ = ["JsonFormatter", "configure"]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_DROPPED = _STANDARD | {"color_message"}  # uvicorn's coloured copy of ``msg``


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _DROPPED})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


def configure(level: str, fmt: str, access_log: bool) -> None:
    """Send the service's and uvicorn's logs to stderr at ``level`` as ``fmt`` (``json`` or ``text``);
    ``access_log`` False drops the one line per request."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    for name in ("evaluator_host", "uvicorn", "uvicorn.error", "opentelemetry"):  # (the span exporter's warnings)
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    logging.getLogger("evaluator_host.access").disabled = not access_log
