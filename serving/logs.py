"""Logging for the three commands: ``--log-level`` and ``--log-format=text|json``, on stderr.

A line that records a decision passes its keys as ``extra`` (``log.info("...", extra=fields(...))``); both
formats print them, so ``jq 'select(.outcome == "hold")'`` filters the JSON lines and ``grep outcome=hold``
the text ones. JSON lines are one object each: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``msg``,
the decision's keys, and ``exception`` when there is a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, Final, TextIO

LEVELS: Final = ("debug", "info", "warning", "error")
FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET: Final = ("kubernetes_asyncio", "aiohttp", "asyncio", "urllib3")
"""Loggers kept at info or above whatever --log-level says."""

# Every attribute a LogRecord has of its own; anything else on a record came from ``extra``.
_RECORD_KEYS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format`` on a (sub)command."""
    group = parser.add_argument_group("logging")
    group.add_argument("--log-level", choices=LEVELS, default="info", help="least severe level logged (default info)")
    group.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text, or json: one JSON object a line, a decision's keys as fields (default text)",
    )


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one writing ``fmt`` to ``stream`` (stderr) from ``level`` up."""
    if level not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level {level!r} or format {fmt!r} is not one of {LEVELS} / {FORMATS}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Never below info for the libraries: at debug kubernetes_asyncio logs every response body, and the
    # certificate controller reads a Secret holding private keys.
    for name in QUIET:
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))


def fields(**values: Any) -> dict[str, Any]:
    """The ``extra`` of a decision line, without the keys whose value is None. A key that a LogRecord has
    of its own (``name``, ``message``, ...) would make logging raise, so it gets a trailing underscore."""
    return {f"{k}_" if k in _RECORD_KEYS else k: v for k, v in values.items() if v is not None}


def extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_KEYS and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extras(record).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The classic line, then the decision's keys as ``key=value`` (values with spaces JSON-quoted)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        pairs = extras(record)
        if not pairs:
            return text
        head, newline, rest = text.partition("\n")  # a traceback stays below the line
        return f"{head} {_pairs(pairs)}{newline}{rest}"


def _pairs(values: Mapping[str, Any]) -> str:
    out = []
    for key, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if not text or any(c.isspace() or c in '"=' for c in text):
            text = json.dumps(text, ensure_ascii=False)
        out.append(f"{key}={text}")
    return " ".join(out)
