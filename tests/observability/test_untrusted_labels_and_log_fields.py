"""What anyone can send must not shape the metrics or the logs (from an adversarial review):
a made-up HTTP method (even without a token) is the ``other`` label, not a new series; a
caller-chosen id with a newline cannot forge a line of the text log format. SQLite only."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from blackops import Application
from blackops.http.app import create_http_app
from blackops.observability.logs import JsonFormatter, TextFormatter, configure

SYSTEM = "untrusted-labels-system-token"
H = {"Authorization": f"Bearer {SYSTEM}"}


class Flow:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        return await step.do("a", lambda: {"v": 1})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Application, FastAPI]]:
    app = Application(f"sqlite:///{tmp_path / 'journal.sqlite3'}")
    app.register_workflow(Flow, space="acme")
    api = create_http_app(app, SYSTEM)
    with TestClient(api) as client:
        assert client.post("/v1/spaces", json={"name": "acme"}, headers=H).is_success
    try:
        yield app, api
    finally:
        app.close()


def test_made_up_http_methods_share_one_label(served: tuple[Application, FastAPI]) -> None:
    _, api = served
    anonymous = TestClient(api)
    for i in range(50):
        anonymous.request(f"X{i:04d}", "/no/such/path")
    anonymous.request("GET", "/no/such/path")
    body = TestClient(api).get("/metrics", headers=H).text
    methods = set(
        re.findall(r'blackops_http_request_duration_seconds_count\{method="([^"]+)"', body)
    )
    assert "other" in methods and "GET" in methods, sorted(methods)
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}


def test_an_instance_id_with_a_newline_cannot_forge_a_text_log_line(
    served: tuple[Application, FastAPI],
) -> None:
    app, api = served
    out = io.StringIO()
    configure("text", "info", stream=out)
    forged = "x\n2026-12-01T00:00:00.000Z ERROR   checkpoint signer REFUSES: forged"
    try:
        with TestClient(api) as client:
            made = client.post(
                "/v1/spaces/acme/workflows/Flow/instances", json={"id": forged}, headers=H
            )
            assert made.status_code == 201, made.text
        asyncio.run(app.work_until_idle())
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if h.get_name() == "blackops-structured"]:
            root.removeHandler(handler)
    lines = out.getvalue().splitlines()
    naming = [line for line in lines if "REFUSES: forged" in line]
    assert naming, lines  # the id is logged ...
    assert not [line for line in lines if line.startswith("2026-12-01T00:00:00.000Z")]
    # ... quoted and escaped, on the line of the fact that named it
    assert all('instance_id="x\\n2026-12-01T00:00:00.000Z ERROR' in line for line in naming)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain-id", "plain-id"),
        ("two words", '"two words"'),
        ("a=b", '"a=b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("line\u2028separator", '"line\\u2028separator"'),
        ("nul\x00", '"nul\\u0000"'),
        ("", '""'),
        ("café", "café"),
    ],
)
def test_text_log_values_are_quoted_when_they_need_it(value: str, shown: str) -> None:
    record = logging.LogRecord("blackops.events", logging.INFO, __file__, 1, "fact", None, None)
    record.fields = {"id": value}
    line = TextFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert line.endswith(f"  id={shown}"), line


def test_an_exception_text_cannot_forge_a_text_log_line() -> None:
    forged = "2026-12-01T00:00:00.000Z ERROR   forged.line x=y"
    try:
        raise ValueError(f"bad input\n{forged}")
    except ValueError:
        import sys

        record = logging.LogRecord("blackops", logging.ERROR, __file__, 1, "boom", None,
                                   sys.exc_info())  # fmt: skip
    lines = TextFormatter().format(record).splitlines()
    assert len(lines) > 2 and not any(line.startswith(forged) for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])  # the traceback, indented
    assert f"    {forged}" in lines


@pytest.mark.parametrize(
    "fields",
    [
        {"operation_id": "op\n1\u2028\u00e9\x00", "attempt": 3, "ok": True, "none": None},
        {"big": 2**70},  # orjson refuses: the standard library writes it
        {"odd": "\ud800"},  # a lone surrogate (orjson refuses)
        {7: "a key that is no string"},
        {"delay_seconds": 1e-05, "tiny": 2.5e-07, "huge": 1e16},  # json.dumps's spelling
        {"nested": {"list": [1, "a", None]}},
    ],
)
def test_a_json_log_line_is_one_line_holding_every_field(fields: dict[Any, Any]) -> None:
    """The JSON format writes with orjson and, where orjson refuses, with the standard
    library: either way one line that reads back as the fields, and for the ordinary fields
    the very bytes json.dumps wrote."""
    record = logging.getLogger("t").makeRecord(
        "t", logging.INFO, __file__, 0, "m", (), None, extra={"fields": fields}
    )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    read = json.loads(line)
    assert {k: read[str(k)] for k in fields} == {k: fields[k] for k in fields}
    whole = {"ts": read["ts"], "level": "info", "logger": "t", "msg": "m", **fields}
    assert line == json.dumps(whole, ensure_ascii=False, separators=(",", ":"), default=str)
