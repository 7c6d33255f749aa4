"""Structured logs: one JSON object per line when stderr is not a terminal, a readable line
on a terminal (``--log-format json|text|auto``, ``--log-level``; decisions M6).

A record's structured fields travel in ``extra={"fields": {...}}``; the formatters print
them and nothing else of the caller's: the facts never carry params, payloads, outcomes,
error messages or tokens (``facts``). Set up only by ``serve`` and ``worker``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

import orjson

FORMATS = ("auto", "json", "text")
LEVELS = ("debug", "info", "warning", "error")
#: The logger of the facts (claims, attempt ends, retries, ...).
EVENTS = "blackops.events"
_HANDLER_NAME = "blackops-structured"
#: Field types whose JSON orjson writes byte for byte as json.dumps (ensure_ascii=False).
_ORJSON_TYPES = frozenset({str, int, bool, type(None)})


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    found = getattr(record, "fields", None)
    return found if isinstance(found, dict) else {}


def _time(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if all(map(_ORJSON_TYPES.__contains__, map(type, line.values()))):
            try:  # a fifth of json.dumps's time, the same bytes for these types
                return orjson.dumps(line).decode()
            except orjson.JSONEncodeError:  # an integer beyond 64 bits, a lone surrogate
                pass
        # Floats (json.dumps writes 1e-05, orjson 0.00001), containers and anything else.
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)


_PLAIN = frozenset('"\\=')


def _escaped(text: str) -> str:
    """``text`` with each character that is not printable (a newline, U+2028, ...), a
    quote or a backslash as a JSON-style escape: it cannot end the line or forge another."""
    out = []
    for char in text:
        if char.isprintable() and char not in '"\\':
            out.append(char)
        else:
            out.append(json.dumps(char, ensure_ascii=True)[1:-1])
    return "".join(out)


def _printable(text: str) -> str:
    """``text`` with only its characters that are not printable escaped (quotes kept)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)


def _value(value: Any) -> str:
    """A field's value as is when it is one plain token, else quoted and escaped."""
    text = str(value)
    if text and all(c.isprintable() and not c.isspace() and c not in _PLAIN for c in text):
        return text
    return f'"{_escaped(text)}"'


class TextFormatter(logging.Formatter):
    """``2026-12-01T17:02:10.123Z INFO  attempt.started operation_id=... attempt=1``; a value
    with a space, ``=``, a quote or a character that is not printable is quoted and escaped
    (ids are chosen by callers: a newline in one must not start a forged line)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{_escaped(str(k))}={_value(v)}" for k, v in _fields(record).items())
        text = f"{_time(record)} {record.levelname:<7} {_escaped(record.getMessage())}"
        if fields:
            text += f"  {fields}"
        if record.exc_info:
            # Indented: an exception's text (callers' data) must not start a line of its own.
            trace = self.formatException(record.exc_info).splitlines()
            text += "".join(f"\n    {_printable(line)}" for line in trace)
        return text


def configure(log_format: str = "auto", level: str = "info", stream: IO[str] | None = None) -> None:
    """Route BlackOps' (and uvicorn's) logs to ``stream`` (stderr) in ``log_format``."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    stream = stream or sys.stderr
    if log_format == "auto":
        log_format = "text" if stream.isatty() else "json"
    handler = logging.StreamHandler(stream)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()  # uvicorn's own plain handlers: one format on stderr
        logger.propagate = True


# A library stays quiet until the program sets logging up: no "last resort" lines on
# stderr from an application embedded in someone's tests.
logging.getLogger(EVENTS).addHandler(logging.NullHandler())
